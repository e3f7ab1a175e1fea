"""Support library for the Lecture 11 executable specification.

It is built in wings, each a package whose ``__init__`` says what it holds;
support/README.md lists the wings and what each holds. Imports run one way, from the top wing
down, never back up (support/tests/test_layout.py checks it); ``paths`` (where things are)
sits below every wing, ``cli`` (``python -m support``) above them.
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
