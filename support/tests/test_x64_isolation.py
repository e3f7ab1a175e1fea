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


def _outcomes(pytester, order, name):
    """Run ``order`` (node ids, kept in command-line order) in a nested pytest session in this
    process, whose JAX state the outer session has already touched."""
    res = pytester.runpytest_inprocess(
        *[str(ROOT / n) for n in order], "-q", "-n", "0", "-p", "no:cacheprovider",
        "--rootdir", str(ROOT),
        "-c", str(ROOT / "pyproject.toml"), "--claims-report", str(pytester.path / name))
    return res, res.parseoutcomes()


def test_x64_does_not_leak_between_tests_in_either_order(pytester):
    for name, order in {"x64_first": X64_GROUP + DEFAULT_GROUP,
                        "default_first": DEFAULT_GROUP + X64_GROUP}.items():
        res, out = _outcomes(pytester, order, name)
        assert res.ret == 0, f"{name}: {out}\n" + "\n".join(res.outlines[-30:])
        assert out.get("passed", 0) >= 9 and not out.get("failed") \
            and not out.get("errors"), f"{name}: {out}"
    assert not x64_enabled()
