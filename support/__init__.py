"""Support library for the Lecture 11 executable specification.

One job per module: ``registry`` (the claim registry and expectations), ``tolerances``
(the one tolerance table), ``plugin`` (the pytest plugin that turns claim tests into
verdicts), ``report`` (claims.json / claims.md and the terminal summary),
``environment`` (the run's fingerprint), ``data`` (the concrete data and the lecture's
folds), ``train_torch`` (the one PyTorch training loop) and the rest as named.
"""
from pathlib import Path as _Path

_CLAIMS = _Path(__file__).resolve().parent.parent / "claims"
if not (_CLAIMS / "registry").is_dir():
    # A non-editable `pip install .` copies this package alone into site-packages: the
    # registry, the claim tests and the kept runs stay in the checkout.
    raise ImportError(
        f"support (lecture11-claims) runs from a checkout of the suite, and {_CLAIMS} has no "
        "registry/: this copy was installed without the claims it checks. Install it "
        "editable from the checkout (`pip install -e .`) and run from the checkout's root.")
