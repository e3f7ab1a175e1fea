"""The lab: what the claims measure with. ``data`` (the verified concrete table and the
lecture's folds), ``train_torch`` (the one PyTorch loop), ``batched`` (many such networks at
once), ``train_jax`` and ``jaxutil``, ``stories`` and ``experiments`` (the shared concrete
runs), ``cache`` (results keyed by everything that could change them), ``toy``, ``bowl`` and
``optim_reference`` (small models and reference optimisers), ``distributed`` (processes and
ranks). Imports ``spec`` and ``machine``; never ``reports``, ``notes`` or ``harness``.
"""
