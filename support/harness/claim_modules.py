"""The claim test modules, imported into this process: the one place support/ reaches into claims/.

A control is registered when the module that declares it is imported
(:func:`support.rules.controls.control`), so finding the suite's controls means importing
every claim test module (:func:`discover`): pytest's collection under ``--control`` does it
(a control written beside one section's test may name a claim of a section collected
earlier), and so does the controls runner before it plans its sessions. Once they are
imported, :func:`absent_here` reads their tests' marks to say when a control's every test
needs a device this machine lacks. support/tests/test_layout.py lists this module as the
suite's one reach into claims/ that no import statement shows.
"""
from __future__ import annotations

import importlib
import sys

from support.harness.device_marks import variants
from support.machine import devices
from support.paths import CLAIMS, ROOT
from support.rules.controls import CONTROLS, Control


def discover() -> dict[str, Control]:
    """Every control of the suite: the claim test modules are imported, which registers
    theirs."""
    for path in sorted(CLAIMS.rglob("test_*.py")):
        importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return dict(CONTROLS)


def absent_here(c: Control) -> str | None:
    """Why no test of ``c``'s claims can run on this machine, every variant of each needing
    a device that is absent (a CPU-vs-GPU claim without a card), or None: its session would
    start only to skip them. Read from the imported tests' marks (:func:`discover` first)."""
    def marked(fn, name):
        return [m for m in getattr(fn, "pytestmark", []) if m.name == name]

    # a benchmark decides nothing, and a controls session does not select its tier
    tests = [fn for name, mod in list(sys.modules.items())
             if name.startswith("claims.") and name.rsplit(".", 1)[-1].startswith("test_")
             for key, fn in vars(mod).items() if key.startswith("test_") and callable(fn)
             and {a for m in marked(fn, "claim") for a in m.args} & set(c.claims)
             and not marked(fn, "bench")]
    reasons = set()
    for fn in tests:
        for needed in variants(fn):
            ok, why = devices.check(needed)
            if ok:
                return None
            reasons.add(why)
    return "; ".join(sorted(reasons)) if tests else None
