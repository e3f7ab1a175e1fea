"""JAX's x64 switch does not leak between claim tests: the claims that need float64 (AD-13,
JAX-06) switch it on for their own body only, and the claims about JAX's float32 default
(DTYPE-*, JAX-02, JAX-12) find it off, whichever ran first in a process (an xdist worker runs
its share in one process, in order)."""
from __future__ import annotations

from pathlib import Path

# Each nested session restores sys.modules when it ends, so a module first imported inside it
# is imported afresh by the next: re-importing torch in one process crashes it, and the toy
# network's class would differ between the fixture that makes a network (claims/conftest.py)
# and the functions that take one. Imported here, each is one module for every nested session.
import jax  # noqa: F401
import torch  # noqa: F401

import support.lab.toy  # noqa: F401
from support.lab.jaxutil import x64_enabled

ROOT = Path(__file__).resolve().parents[2]
LECTURE = "claims/lecture"

X64_GROUP = [
    f"{LECTURE}/test_06_why_not_finite_differences.py::"
    "test_autodiff_agrees_with_the_hand_gradient_in_float64",
    f"{LECTURE}/test_11_jax_batches_with_vmap_and_compiles_with_jit.py::"
    "test_vmap_agrees_with_a_python_loop"]
DEFAULT_GROUP = [
    f"{LECTURE}/test_12_side_by_side.py::test_default_float_dtypes",
    f"{LECTURE}/test_12_side_by_side.py::test_float64_requests_are_truncated_with_a_warning",
    f"{LECTURE}/test_13_tensors_shapes_and_dtypes.py::"
    "test_jax_array_has_a_device_a_float32_default_and_no_grad",
    f"{LECTURE}/test_14_the_dtype_trap_measured.py::"
    "test_jax_converts_float64_numpy_to_float32_silently",
    f"{LECTURE}/test_14_the_dtype_trap_measured.py::"
    "test_jax_warns_only_for_explicit_float64_and_truncates",
    f"{LECTURE}/test_26_limitations_and_trade_offs.py::"
    "test_jax_fails_quietly_with_float32_by_default"]


# records JAX's x64 switch as each test starts and as it ends, into X64_LOG
WATCH = """
import json, os
from support.lab.jaxutil import x64_enabled

def _log(item, when):
    with open(os.environ["X64_LOG"], "a") as f:
        f.write(json.dumps([item.nodeid, when, x64_enabled()]) + "\\n")

def pytest_runtest_setup(item):
    _log(item, "start")

def pytest_runtest_teardown(item):
    _log(item, "end")
"""


def _x64_states(pytester, monkeypatch, order, name, *plugins) -> list:
    """Run ``order`` (node ids, kept in command-line order) in a nested pytest session in this
    process, whose JAX state the outer session has already touched; the x64 switch as each
    test started and ended."""
    import json
    pytester.makepyfile(x64_watch=WATCH)
    monkeypatch.syspath_prepend(str(pytester.path))
    log = pytester.path / f"{name}.jsonl"
    monkeypatch.setenv("X64_LOG", str(log))
    pytester.runpytest_inprocess(
        *[str(ROOT / n) for n in order], "-q", "-n", "0", "-p", "no:cacheprovider",
        "-p", "x64_watch", *[a for p in plugins for a in ("-p", p)], "--rootdir", str(ROOT),
        "-c", str(ROOT / "pyproject.toml"),
        "--claims-report", str(pytester.path / name))
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_x64_does_not_leak_between_tests_in_either_order(pytester, monkeypatch):
    """Every test starts and ends with x64 off, whichever group runs first: the float64
    claims switch it on inside their own bodies only. (The verdicts of the inner run are the
    claims' business, not this test's: a figure that moves in some release is no leak.)"""
    for name, order in {"x64_first": X64_GROUP + DEFAULT_GROUP,
                        "default_first": DEFAULT_GROUP + X64_GROUP}.items():
        states = _x64_states(pytester, monkeypatch, order, name)
        ran = {node.split("[")[0] for node, _, _ in states}
        assert ran == {n.replace(str(ROOT) + "/", "") for n in order}, (name, sorted(ran))
        leaked = [(node, when) for node, when, on in states if on]
        assert not leaked, f"{name}: x64 on at {leaked}"
    assert not x64_enabled()


def test_the_watch_sees_a_leak(pytester, monkeypatch):
    """Negative control of the test above: a claim that switched x64 on for good."""
    pytester.makepyfile(x64_leak="import jax\n\ndef pytest_runtest_teardown(item):\n"
                                 "    jax.config.update('jax_enable_x64', True)\n")
    try:
        states = _x64_states(pytester, monkeypatch, X64_GROUP[:1] + DEFAULT_GROUP[:1], "leak",
                             "x64_leak")
    finally:
        jax.config.update("jax_enable_x64", False)
    # the switch is seen on from the first test's end, and at the second test's start
    seen = [(node.split("::")[-1].split("[")[0], when) for node, when, on in states if on]
    assert (DEFAULT_GROUP[0].split("::")[-1], "start") in seen, seen
