"""Where things are: the checkout's root and the folders the suite reads, in one place.

Every module that needs a path takes it from here; none derives one from its own
``__file__``, so a module can move between the wings of ``support/`` without its paths
moving with it. This module imports nothing of the suite.
"""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
# the checkout: support/ and claims/ side by side (an editable install runs from it)
ROOT = SUPPORT.parent
RESOURCES = SUPPORT / "resources"
CLAIMS = ROOT / "claims"
REPORTS = ROOT / "reports"
