"""Summary sheet, "Key ideas", "Tracing" (S:7).

"jax.jit runs the Python function once with tracers that carry only shapes and dtypes"
(JIT-02). "A Python if on a traced value therefore raises an error (use jax.lax.cond or a
static argument)" (JIT-03, JIT-04); "Python side effects such as print or list.append happen
only during tracing" (JIT-05); "the compiled code is cached, so calling again with arrays of the
same shapes and dtypes reuses it, while a new shape or dtype (or a new value of a static
argument) triggers a new trace" (JIT-06). "torch.jit.trace, now deprecated in favour of
torch.compile and torch.export" (JIT-07), "records only the branch taken by the example input
and replays it on every input" (JIT-08).

JIT-03 and JIT-05 are also the lecture's (L:138: "a Python if that depends on the value of an
array cannot be traced. It needs jax.lax.cond ... any side effect ... runs once at trace time
and then never again") and, with JIT-08, the pitfall S:57's.
"""
import warnings

import jax
import jax.numpy as jnp
import pytest
import torch

from support.rules.controls import control
from support.lab.jaxutil import attempt, refusal


def _branchy(x):
    return x * 2 if x.sum() > 0 else -x


@pytest.mark.claim("JIT-02")
def test_jit_traces_with_shape_and_dtype_only(claim):
    seen = []

    @jax.jit
    def f(x):
        seen.append((repr(x), isinstance(x, jax.core.Tracer)))
        return x * 2
    f(jnp.array([1.5, 2.5, 3.5], dtype=jnp.float32))
    text, is_tracer = seen[0]
    claim.record("printed_argument", text)
    assert is_tracer and "float32[3]" in text
    assert "1.5" not in text                 # no values, only the abstract shape/dtype


@control("JIT-02", "JIT-23", what="jax.jit does not trace: it runs the Python function on the "
                                  "concrete arrays, so a Python if on a value just works")
def jit_runs_the_function_eagerly(mp):
    mp.setattr(jax, "jit", lambda fun, *args, **kwargs: fun)


@pytest.mark.claim("JIT-03")
def test_python_if_on_a_traced_value_raises_under_jit(claim):
    def f(x):
        if x > 0:
            return x * 2
        return -x
    refused = refusal(jax.jit(f), 1.0)
    claim.record("error_class", refused)
    assert refused, "jit ran a Python if on a traced value"
    g = jax.jit(lambda x: jax.lax.cond(x > 0, lambda v: v * 2, lambda v: -v, x))
    claim.record('lax_cond_results', [float(g(1.0)), float(g(-1.0))])
    assert float(g(1.0)) == 2.0 and float(g(-1.0)) == 1.0


@control("JIT-03", "JIT-05", "JIT-14", what="jax.jit does not trace: it runs the Python function "
                                            "on the values, as under jax.disable_jit()")
def jit_runs_python_on_values(mp):
    def jit(fun, **kwargs):
        def run(*args, **kw):
            with jax.disable_jit():
                return fun(*args, **kw)
        return run
    mp.setattr(jax, "jit", jit)


@pytest.mark.claim("JIT-04")
def test_static_argument_makes_the_python_if_legal(claim):
    def f(x, n):
        if n > 0:
            return x * n
        return -x
    g = jax.jit(f, static_argnums=1)
    runs = [attempt(g, 2.0, 3), attempt(g, 2.0, -1)]
    got = [value if err is None else type(err).__name__ for value, err in runs]
    claim.record('results', got)
    assert got == [6.0, -2.0]
    _, traced = attempt(jax.jit(f), 2.0, 3)      # the same function, n traced
    claim.record("error_with_n_traced", type(traced).__name__ if traced else "none")
    assert isinstance(traced, jax.errors.ConcretizationTypeError), "the traced if did not raise"


@control("JIT-04", what="jax.jit ignores static_argnums: the marked argument is traced like "
                        "any other, so the Python if on it stays illegal")
def static_argnums_ignored(mp):
    real = jax.jit

    def jit(fun, *args, static_argnums=None, static_argnames=None, **kwargs):
        return real(fun, *args, **kwargs)
    mp.setattr(jax, "jit", jit)


@pytest.mark.claim("JIT-05")
def test_side_effects_run_at_trace_time_only(claim):
    log = []

    @jax.jit
    def f(x):
        log.append("traced")
        print("side effect")
        return x + 1
    for _ in range(3):
        f(jnp.ones(3))
    claim.check('appends_after_three_calls', len(log))
    # and "then never again" only while the cache hits: a new shape traces again
    f(jnp.ones(4))
    claim.check("appends_after_new_shape", len(log))


@pytest.mark.claim("JIT-06")
def test_new_shape_dtype_or_static_value_retraces(claim):
    traces = []

    def f(x, k):
        traces.append(1)
        return x * k
    g = jax.jit(f, static_argnums=1)
    counts = []
    for x, k in [(jnp.ones(3), 2), (jnp.zeros(3), 2), (jnp.ones(4), 2),
                 (jnp.ones(4, dtype=jnp.int32), 2), (jnp.ones(4, dtype=jnp.int32), 5)]:
        g(x, k)
        counts.append(len(traces))
    claim.record('trace_counts', counts, note='calls: f32[3]; f32[3] again; f32[4]; i32[4]; i32[4] with k=5')
    assert counts == [1, 1, 2, 3, 4]


@control("JIT-06", what="jax.jit keeps no cache: every call traces the function again, even "
                        "with the same shapes and dtypes")
def jit_keeps_no_cache(mp):
    real = jax.jit

    def jit(fun, *args, **kwargs):
        jitted = real(fun, *args, **kwargs)

        def call(*a, **k):
            jitted.clear_cache()
            return jitted(*a, **k)
        return call
    mp.setattr(jax, "jit", jit)


@pytest.mark.claim("JIT-07")
def test_torch_jit_trace_is_deprecated_for_compile_and_export(claim):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(lambda x: x * 2, torch.ones(2))
    # torch <= 2.13 warns with DeprecationWarning, 2.14 and later with FutureWarning (the
    # category Python shows users by default): both say the API is deprecated
    found = [w for w in caught if issubclass(w.category, (DeprecationWarning, FutureWarning))]
    dep = [str(w.message) for w in found]
    claim.record("deprecation_warning", dep[0] if dep else "")
    claim.record("warning_category", found[0].category.__name__ if found else "")
    assert dep and "torch.compile" in dep[0] and "torch.export" in dep[0]


@control("JIT-07", what="torch.jit.trace is not deprecated: it traces without a warning")
def jit_trace_not_deprecated(mp):
    real = torch.jit.trace

    def trace(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            return real(*args, **kwargs)
    mp.setattr(torch.jit, "trace", trace)


@pytest.mark.claim("JIT-08")
def test_torch_jit_trace_replays_the_branch_of_its_example(claim):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(_branchy, torch.ones(3))
    tracer_warnings = [w for w in caught if "TracerWarning" in w.category.__name__]
    got, eager = traced(-torch.ones(3)), _branchy(-torch.ones(3))
    claim.check('traced_on_minus_ones', got.tolist())
    claim.check("eager_on_minus_ones", eager.tolist())
    claim.record("tracer_warnings", len(tracer_warnings))
    assert tracer_warnings


@control("JIT-08", what="torch.jit.trace returns the Python function itself, which takes the "
                        "branch of whatever input it is given")
def jit_trace_keeps_the_python_function(mp):
    mp.setattr(torch.jit, "trace", lambda fn, example_inputs, *args, **kwargs: fn)
