"""The lab: what the claims measure with. ``data`` (the verified concrete table and the
lecture's folds), ``train_torch`` (the one PyTorch loop), ``batched`` (many such networks at
once), ``train_jax`` and ``jaxutil``, ``stories`` and ``experiments`` (the shared concrete
runs), ``cache`` (results keyed by everything that could change them), ``toy``, ``bowl`` and
``optim_reference`` (small models and reference optimisers), ``distributed`` (processes and
ranks). Helpers that the claims of several sections share: ``workloads`` (timing workloads),
``properties`` (Hypothesis strategies and the rounding verdict), ``accumulation`` (the sheet's
micro-batch example), ``precision`` (float16 and bfloat16), ``modes`` (dropout and batch norm),
``nondeterminism`` (repeated CUDA sums), ``perturb`` (the negative controls' perturbations).
Imports ``rules`` and ``machine``; never ``reports``, ``notes`` or ``harness``.
"""
