"""JAX configuration helpers: 64-bit mode without leaking it between tests.

JAX's ``jax_enable_x64`` flag is process-global. The notes' autodiff figures (AD-13, JAX-06,
JIT-09/10) need it on; the dtype claims (DTYPE-09...15) are about its default (off). Tests
must therefore never call ``jax.config.update("jax_enable_x64", True)`` themselves; they use

    from support.lab.jaxutil import x64
    with x64():
        ...            # float64 arrays here; the previous setting is restored on exit

and claims about the default assert ``not x64_enabled()`` first (a leak would then show up
as a failure, not as a silently different dtype).

API (stable; other modules import it):

* ``x64(enabled=True)``: context manager setting 64-bit mode for the block and restoring the
  previous value. Uses ``jax.enable_x64(...)`` (JAX >= 0.5, the one in JAX 0.10), else
  ``jax.experimental.enable_x64()``/``disable_x64()`` (JAX 0.4.x), else saves and restores
  ``jax.config`` by hand.
* ``x64_enabled() -> bool``: the current setting (thread-local context included).
* ``run_fresh_python(code, env=None, timeout=120) -> subprocess.CompletedProcess``: run
  ``code`` in a new interpreter (for "at program start" claims: DTYPE-11), with JAX on CPU.
* ``assert_default_precision()``: a claim about JAX's defaults finds x64 off.
* ``refusal(fn, *args) -> str`` and ``attempt(fn, *args) -> (value, error)``: a function
  that branches in Python on a traced value, run: the ConcretizationTypeError it raises, if
  any (the claims about tracing).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import jax


def x64_enabled() -> bool:
    """Whether 64-bit types are on right now (also inside an ``x64()`` block).

    Probes the default float dtype: ``jax.config.jax_enable_x64`` reads the global value and
    misses a thread-local context manager."""
    import jax.numpy as jnp
    return jnp.zeros(()).dtype.itemsize == 8


@contextlib.contextmanager
def x64(enabled: bool = True):
    """Run the block with ``jax_enable_x64 = enabled``; restore the previous value after."""
    if hasattr(jax, "enable_x64"):                       # JAX >= 0.5 (0.10 here)
        with jax.enable_x64(enabled):
            yield
        return
    try:                                                  # JAX 0.4.x
        from jax.experimental import disable_x64, enable_x64
    except ImportError:
        enable_x64 = disable_x64 = None
    if enable_x64 is not None:
        with (enable_x64() if enabled else disable_x64()):
            yield
        return
    old = bool(jax.config.jax_enable_x64)                 # last resort: global flag
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


def run_fresh_python(code: str, env: dict | None = None, timeout: float = 120
                     ) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (JAX on CPU, x64 env var unset unless given)."""
    e = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    e.setdefault("JAX_PLATFORMS", "cpu")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=e, timeout=timeout)


def assert_default_precision():
    """A claim about JAX's default dtypes runs with x64 off (no other test left it on)."""
    assert not x64_enabled(), "JAX x64 leaked into a claim about JAX's default"


def refusal(fn, *args) -> str:
    """The name of the ConcretizationTypeError ``fn(*args)`` raises, "" when it runs."""
    try:
        fn(*args)
    except jax.errors.ConcretizationTypeError as err:
        return type(err).__name__
    return ""


def attempt(fn, *args):
    """(fn(*args) as a float, None), or (None, the error) when fn branched in Python on a
    traced value: the error JIT-04 and JIT-23 are about, caught so that it shows up where the
    sentence does not expect it as a failed claim, not a crashed test."""
    try:
        return float(fn(*args)), None
    except jax.errors.ConcretizationTypeError as exc:
        return None, exc
