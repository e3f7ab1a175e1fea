"""Support library for the Lecture 11 executable specification.

Six wings, each a package whose ``__init__`` says what it holds; imports run one way, from
the top of this list down, never back up (support/tests/test_layout.py checks it):

* ``harness``: the pytest plugins and the run's state (plugin, session, recorder, device
  options, timing lock, scheduler), the stability and GPU runners;
* ``notes``: the notes themselves: locating sentences, pinning, the annotated pages, errata;
* ``reports``: one run's report, runs as data, diff, matrix, page renderers, the figures;
* ``lab``: what claims measure with: the data, the PyTorch and JAX loops, batched training,
  the stories and shared experiments, the result cache, small models;
* ``rules``: the rules each claim is judged by: the registry (read from the section files
  beside the claim tests), expectations, verdicts, tolerances, error models, what the test
  sources say, number formatting, and the scaffold of a new claim;
* ``machine``: the machine a run measures on: environment probes, the fingerprint, devices,
  the timing method, memory readings, file locks.

``paths`` (where things are) sits below them all; ``cli`` (``python -m support``) above.
"""
from support.paths import CLAIMS as _CLAIMS

if not (_CLAIMS / "lecture").is_dir():
    # A non-editable `pip install .` copies this package alone into site-packages: the
    # registry, the claim tests and the kept runs stay in the checkout.
    raise ImportError(
        f"support (lecture11-claims) runs from a checkout of the suite, and {_CLAIMS} has no "
        "lecture/ (the claims' section files and tests): this copy was installed without the "
        "claims it checks. Install it editable from the checkout (`pip install -e .`) and run "
        "from the checkout's root.")
