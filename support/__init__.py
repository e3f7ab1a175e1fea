"""Support library for the Lecture 11 executable specification.

One job per module: ``registry`` (the claim registry and expectations), ``tolerances``
(the one tolerance table), ``plugin`` (the pytest plugin that turns claim tests into
verdicts), ``report`` (claims.json / claims.md and the terminal summary),
``environment`` (the run's fingerprint), ``data`` (the concrete data and the lecture's
folds), ``train_torch`` (the one PyTorch training loop) and the rest as named.
"""
