"""A test's devices as pytest marks, and the devices a run selects.

:func:`params` parametrises a claim's test over devices. Each parameter carries the
``needs_device`` mark; :mod:`support.harness.device_options` skips it with the reason when the
device is absent (:func:`support.machine.devices.check`), or makes that an error under
``--require-device`` (:data:`REQUIRED`), keeps only the devices ``--only-device`` names
(:data:`ONLY`, :func:`selected`) and counts the variants that actually ran on each device.
:func:`needs` marks a whole test::

    from support.harness import device_marks

    @pytest.mark.claim("DEV-15")
    @device_marks.needs("cuda")
    def test_same_answer_on_cpu_and_gpu(claim): ...

    @pytest.mark.parametrize("device", device_marks.params("cpu", "cuda", "mps"))
    def test_something(claim, device): ...
"""
from __future__ import annotations

import pytest

from support.machine.devices import DEVICES

MARK = "needs_device"
# the set of devices the run requires (--require-device); filled by
# support/harness/device_options.py
REQUIRED: set[str] = set()
# the devices a run is restricted to (--only-device); empty: all present
ONLY: set[str] = set()


def needs(*devs: str):
    """Mark a test as needing every device in ``devs`` (skipped with the reason if absent)."""
    return getattr(pytest.mark, MARK)(*devs)


def params(*devs: str):
    """``pytest.param`` per device, id = device name, each carrying the ``needs_device`` mark.

    Absent devices stay in the list (so the report shows them as skipped with the reason,
    and ``--require-device`` can turn that into an error)."""
    return [pytest.param(d, id=d, marks=needs(d)) for d in devs]


def variants(fn) -> list[list[str]]:
    """The devices each variant of the test function ``fn`` needs, read from its marks
    before collection: its own ``needs_device`` marks, plus each device parameter's
    (:func:`params`); one entry for a test without device parameters."""
    own = [d for m in getattr(fn, "pytestmark", []) if m.name == MARK for d in m.args]
    per_param = [[d for m in getattr(v, "marks", ()) if m.name == MARK for d in m.args]
                 for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"
                 for v in (m.args[1] if len(m.args) > 1 else ())]
    return [own + p for p in per_param if p] or [own]


def selected(item_devices: list[str]) -> bool:
    """Whether ``--only-device`` keeps a test needing ``item_devices`` (all, if not given).

    A test needing cpu and cuda (a CPU-vs-GPU comparison) is kept when cuda is selected."""
    if not ONLY:
        return True
    groups = {DEVICES[d].hardware for d in item_devices}
    accel = [g for g in groups if g != "cpu"] or ["cpu"]
    return any(g in ONLY for g in accel)


def mark_args(item, name: str) -> list:
    """The arguments of every ``name`` mark on a test item, in order, without repeats (a
    claim ID of ``@pytest.mark.claim``, a device of ``needs_device``)."""
    out: list = []
    for mark in item.iter_markers(name):
        out += [a for a in mark.args if a not in out]
    return out


def item_devices(item) -> list[str]:
    """The devices a test item needs (its ``needs_device`` marks)."""
    return mark_args(item, MARK)
