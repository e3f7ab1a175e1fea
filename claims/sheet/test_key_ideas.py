"""Sheet, "Key ideas" (eager vs compiled, tracing, random numbers in JAX, autograd rules,
mixed precision) and "Common pitfalls" - the sentences that only the sheet makes.

"jax.jit runs the Python function once with tracers that carry only shapes and dtypes. A Python
if on a traced value therefore raises an error (use jax.lax.cond or a static argument) ... the
compiled code is cached, so calling again with arrays of the same shapes and dtypes reuses it,
while a new shape or dtype (or a new value of a static argument) triggers a new trace.
torch.jit.trace, now deprecated in favour of torch.compile and torch.export, records only the
branch taken by the example input and replays it on every input." "x.detach() shares the values
but is cut from the graph." "floating-point addition is not associative." "bfloat16 keeps
float32's 8 exponent bits and hence its range."
"""
import importlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import find, given, strategies as st

from support.harness.controls import control
from support.lab import toy
from support.spec import error_models


def api(path: str) -> bool:
    """Whether the API ``path`` ("torch.utils.data.DataLoader", "jax.export") exists in this
    installation, whatever was imported before: the longest importable module prefix is
    imported explicitly, and only the rest is looked up as attributes. (``hasattr(jax,
    "export")`` is False in JAX releases that import the submodule lazily, until something
    else imports it.)"""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_api_imports_submodules_rather_than_asking_for_attributes():
    """The lookup FW-01 relies on: a submodule counts whether or not it was imported."""
    import sys
    assert api("json.decoder.JSONDecoder") and api("xml.dom.minidom")
    assert not api("json.no_such_thing") and not api("no_such_package.x")
    assert "xml.dom.minidom" in sys.modules


@pytest.mark.claim("FW-01")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_framework_supplies_the_pieces(claim, framework):
    if framework == "torch":
        wanted = {"tensors_on_devices": ["torch.device", "torch.cuda.is_available"],
                  "autodiff": ["torch.autograd.grad"],
                  "layers": ["torch.nn.Linear"], "losses": ["torch.nn.MSELoss"],
                  "optimizers": ["torch.optim.Adam"],
                  "data_loading": ["torch.utils.data.DataLoader"],
                  "save": ["torch.save", "torch.load"],
                  "export": ["torch.export.export", "torch.onnx.export"]}
    else:
        pytest.importorskip("optax")
        wanted = {"tensors_on_devices": ["jax.devices", "jax.device_put"],
                  "autodiff": ["jax.grad"],
                  "layers_losses": ["jax.nn.relu", "optax.l2_loss"],
                  "optimizers": ["optax.adam"],
                  # jax.export from JAX 0.4.30; jax.experimental.export before
                  "export": ["jax.export.export|jax.experimental.export.export"]}
    pieces = {k: all(any(api(alt) for alt in p.split("|")) for p in paths)
              for k, paths in wanted.items()}
    claim.record("pieces", pieces)
    claim.record("APIs looked up", {k: v for k, v in wanted.items()})
    if framework == "jax":
        claim.record("jax.export exported as", "jax.export" if api("jax.export.export")
                     else "jax.experimental.export")
    assert all(pieces.values()), [k for k, v in pieces.items() if not v]


@control("FW-01", what="neither framework ships an optimizer any more: torch.optim.Adam and "
                       "optax.adam are gone")
def no_adam_in_either_framework(mp):
    import optax
    mp.delattr(torch.optim, "Adam")
    mp.delattr(optax, "adam")


# ----------------------------------------------------------------------------- tracing
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


def _attempt(fn, *args):
    """(fn(*args) as a float, None), or (None, the error) when fn branched in Python on a
    traced value: the error JIT-04 and JIT-23 are about, caught so that it shows up where the
    sentence does not expect it as a failed claim, not a crashed test."""
    try:
        return float(fn(*args)), None
    except jax.errors.ConcretizationTypeError as exc:
        return None, exc


@pytest.mark.claim("JIT-04")
def test_static_argument_makes_the_python_if_legal(claim):
    def f(x, n):
        if n > 0:
            return x * n
        return -x
    g = jax.jit(f, static_argnums=1)
    runs = [_attempt(g, 2.0, 3), _attempt(g, 2.0, -1)]
    got = [value if err is None else type(err).__name__ for value, err in runs]
    claim.record('results', got)
    assert got == [6.0, -2.0]
    _, traced = _attempt(jax.jit(f), 2.0, 3)      # the same function, n traced
    claim.record("error_with_n_traced", type(traced).__name__ if traced else "none")
    assert isinstance(traced, jax.errors.ConcretizationTypeError), "the traced if did not raise"


@control("JIT-04", what="jax.jit ignores static_argnums: the marked argument is traced like "
                        "any other, so the Python if on it stays illegal")
def static_argnums_ignored(mp):
    real = jax.jit

    def jit(fun, *args, static_argnums=None, static_argnames=None, **kwargs):
        return real(fun, *args, **kwargs)
    mp.setattr(jax, "jit", jit)


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


def _branchy(x):
    return x * 2 if x.sum() > 0 else -x


@pytest.mark.claim("JIT-08")
def test_torch_jit_trace_replays_the_branch_of_its_example(claim):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(_branchy, torch.ones(3))
    tracer_warnings = [w for w in caught if "TracerWarning" in w.category.__name__]
    got, eager = traced(-torch.ones(3)), _branchy(-torch.ones(3))
    claim.check('traced_on_minus_ones', got.tolist())
    claim.record("eager_on_minus_ones", eager.tolist())
    claim.record("tracer_warnings", len(tracer_warnings))
    assert torch.equal(got, -2 * torch.ones(3)) and torch.equal(eager, torch.ones(3))
    assert tracer_warnings


@control("JIT-08", what="torch.jit.trace returns the Python function itself, which takes the "
                        "branch of whatever input it is given")
def jit_trace_keeps_the_python_function(mp):
    mp.setattr(torch.jit, "trace", lambda fn, example_inputs, *args, **kwargs: fn)


@pytest.mark.claim("JIT-23")
@pytest.mark.parametrize("how", ["lax.cond", "python_if"])
def test_data_dependent_branches_need_framework_control_flow(claim, how):
    if how == "lax.cond":
        f = jax.jit(lambda x: jax.lax.cond(x > 0, lambda v: v * 2, lambda v: -v, x))
        got = [float(f(3.0)), float(f(-3.0))]
        claim.record('results', got)
        assert got == [6.0, 3.0]
    else:
        value, err = _attempt(jax.jit(lambda x: x * 2 if x > 0 else -x), 3.0)
        claim.record("python_if_under_jit", type(err).__name__ if err else f"returned {value}")
        assert isinstance(err, jax.errors.ConcretizationTypeError), \
            f"a Python if on a traced value returned {value} instead of raising"


@control("JIT-23", what="jax.lax.cond ignores its predicate and always takes the false branch")
def lax_cond_always_false(mp):
    mp.setattr(jax.lax, "cond", lambda pred, true_fun, false_fun, *operands, **kwargs:
               false_fun(*operands))


# ----------------------------------------------------------------------------- autograd rules
@pytest.mark.claim("TAPE-13")
def test_detach_shares_values_but_leaves_the_graph(claim):
    w = torch.tensor([2.0, -1.0], requires_grad=True)
    d = w.detach()
    claim.record('same_storage', d.data_ptr() == w.data_ptr())
    claim.record('requires_grad', d.requires_grad)
    assert d.data_ptr() == w.data_ptr() and not d.requires_grad and d.grad_fn is None
    with torch.no_grad():
        d[0] = 5.0
    assert w.detach()[0].item() == 5.0       # shared values: the change shows in w
    # treated as a constant: the sheet's own example, y = w.detach()**2 + 3w at w=2 -> 3
    v = torch.tensor(2.0, requires_grad=True)
    (v.detach() ** 2 + 3 * v).backward()
    claim.check('grad_of_detached_square_plus_3w', v.grad.item())
    assert v.grad.item() == 3.0

    # for any value and weight: the detached term is a constant to autograd
    @given(st.floats(-100, 100), st.floats(-10, 10))
    def prop(x, k):
        u = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        (k * u.detach() ** 2 + 3 * u).backward()
        assert u.grad.item() == 3.0
    prop()


@control("TAPE-13", what="x.detach() returns a copy in new storage, so a change to it does not "
                         "show in x")
def detach_copies_the_values(mp):
    real = torch.Tensor.detach
    mp.setattr(torch.Tensor, "detach", lambda self: real(self).clone())


@control("TAPE-13", what="x.detach() returns a view that stays in the graph, so autograd "
                         "differentiates through it")
def detach_stays_in_the_graph(mp):
    mp.setattr(torch.Tensor, "detach", lambda self: self.view_as(self))


@pytest.mark.claim("TAPE-21")
def test_forgetting_zero_grad_adds_old_gradients(claim):
    torch.manual_seed(0)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    grads = {}
    for zero in (True, False):
        torch.manual_seed(1)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)   # lr 0: same point every step
        for _ in range(3):
            if zero:
                opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        grads[zero] = model.weight.grad.clone()
    ratio = (grads[False] / grads[True]).mean().item()
    claim.check('grad_ratio_after_3_steps', ratio)
    assert torch.allclose(grads[False], 3 * grads[True], rtol=1e-6)


@control("TAPE-21", what="backward() replaces each leaf's .grad instead of adding to it, so a "
                         "forgotten zero_grad() costs nothing")
def backward_replaces_old_gradients(mp):
    real = torch.Tensor.backward

    def replace(self, *args, **kwargs):
        for node in toy.tape_nodes(self):
            if hasattr(node, "variable"):          # AccumulateGrad: a leaf's .grad
                node.variable.grad = None
        return real(self, *args, **kwargs)
    mp.setattr(torch.Tensor, "backward", replace)


# ----------------------------------------------------------------------------- numerics
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@pytest.mark.claim("RNG-10")
def test_float_addition_is_not_associative(claim):
    a, b, c = 0.1, 0.2, 0.3
    claim.record("(0.1+0.2)+0.3", (a + b) + c)
    claim.record("0.1+(0.2+0.3)", a + (b + c))
    assert (a + b) + c != a + (b + c)
    found = find(st.tuples(finite, finite, finite),
                 lambda t: (t[0] + t[1]) + t[2] != t[0] + (t[1] + t[2]))
    claim.record("counterexample_found_by_hypothesis", list(found))
    assert (found[0] + found[1]) + found[2] != found[0] + (found[1] + found[2])

    # in float32 too, the case of a GPU reduction
    @given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=3, max_size=50))
    def order_changes_sum_by_rounding_only(xs):
        arr = np.array(xs, dtype=np.float32)
        fwd, rev = np.float32(0), np.float32(0)
        for v in arr:
            fwd = np.float32(fwd + v)
        for v in arr[::-1]:
            rev = np.float32(rev + v)
        # each order within gamma_(n-1) sum |x| of the exact sum (the error model)
        model = error_models.model("sum:two-orders")
        magnitude = float(np.abs(arr.astype(np.float64)).sum())
        share = model.share(float(fwd) - float(rev), magnitude, n=len(arr) - 1)
        claim.record("share_of_rounding_bound", share, reduce="max",
                     note=model.describe(len(arr) - 1))
        assert share <= 1, f"the two orders differ by {share:.3g} of the rounding bound"
    order_changes_sum_by_rounding_only()
    claim.check("share_of_rounding_bound", claim.measurements["share_of_rounding_bound"]["value"])


@control("RNG-10", what="NumPy's float32 is half precision: the two orders of a float32 sum "
                        "differ by more than float32 rounding allows")
def float32_sums_round_to_half_precision(mp):
    mp.setattr(np, "float32", np.float16)


@pytest.mark.claim("DTYPE-16")
def test_bfloat16_keeps_float32_exponent_and_range(claim):
    bf, f32, f16 = torch.finfo(torch.bfloat16), torch.finfo(torch.float32), torch.finfo(torch.float16)
    nexp = int(jnp.finfo(jnp.bfloat16).nexp)
    claim.check('bfloat16_exponent_bits', nexp)
    claim.record('bfloat16_max', bf.max)
    claim.check('float16_max', f16.max)
    assert nexp == int(jnp.finfo(jnp.float32).nexp) == 8
    assert abs(bf.max / f32.max - 1) < 0.01 and bf.smallest_normal == f32.smallest_normal
    assert f16.max == 65504.0            # negative control: float16's 5 bits give no such range


@control("DTYPE-16", what="bfloat16 is float16 in both frameworks: 5 exponent bits and a "
                          "maximum of 65504")
def bfloat16_is_float16(mp):
    mp.setattr(torch, "bfloat16", torch.float16)
    mp.setattr(jnp, "bfloat16", jnp.float16)
