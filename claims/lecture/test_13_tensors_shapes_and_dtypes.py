"""Lecture, "Tensors, shapes, and dtypes" (L:261-276).

"An operation between a (N, 1) and a (N,) array broadcasts into (N, N) ... It raises no error."
"reshape may return a view sharing storage, clone does not, and mutating a view mutates the
original." "an in-place operation on a tensor needed for the backward pass raises a helpful
error." "Every built-in module in PyTorch expects input shaped (N, ...)." "PyTorch reports mat1
and mat2 shapes cannot be multiplied (32x8 and 64x1)." "A read is clamped to the last valid
element, so jnp.arange(3.0)[10] returns 2.0, and an out-of-bounds write is silently dropped."

L:263's "it is immutable: x[0] = 1.0 raises a TypeError" is JAX-02, tested with L:110 in
``claims/lecture/test_09_switching_the_tape_off.py``.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from support.rules.controls import control

N = st.integers(min_value=1, max_value=64)


def _aligned(real):
    """``real`` subtraction, except that a column (N, 1) and a vector (N,) or row (1, N) are
    matched element by element into (N,) instead of broadcast into (N, N)."""
    def sub(a, b):
        sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
        if len(sa) == 2 and sa[1] == 1 and sb in ((sa[0],), (1, sa[0])):
            return real(a[:, 0], b.reshape(-1))
        return real(a, b)
    return sub


MODULES = {
    "Linear": (lambda: torch.nn.Linear(8, 4), (5, 8)),
    "Conv1d": (lambda: torch.nn.Conv1d(3, 4, 3), (5, 3, 10)),
    "Conv2d": (lambda: torch.nn.Conv2d(3, 4, 3), (5, 3, 10, 10)),
    "LSTM": (lambda: torch.nn.LSTM(8, 4), (5, 7, 8)),
    "GRU": (lambda: torch.nn.GRU(8, 4), (5, 7, 8)),
    "MultiheadAttention": (lambda: torch.nn.MultiheadAttention(8, 2), (5, 7, 8)),
    "TransformerEncoderLayer": (lambda: torch.nn.TransformerEncoderLayer(8, 2, 16), (5, 7, 8)),
}


_read = jax.jit(lambda a, i: a[i])       # a traced index


@pytest.mark.claim("JAX-14")
def test_jax_array_has_a_device_a_float32_default_and_no_grad(claim):
    from support.lab.jaxutil import x64_enabled
    assert not x64_enabled(), "x64 leaked into a default-dtype claim"
    a = jnp.array([1.0])
    claim.check('jax_default', str(a.dtype))
    claim.check('numpy_default', str(np.array([1.0]).dtype))
    assert len(a.devices()) == 1
    assert not hasattr(a, "grad") and not hasattr(a, "requires_grad")
    # differentiable through a transformation of the function instead
    assert float(jax.grad(lambda v: (v ** 2).sum())(a)[0]) == 2.0


@control("JAX-14", what="a jax.Array carries a .grad attribute, as a torch tensor does")
def arrays_carry_grad(mp):
    mp.setattr(type(jnp.zeros(1)), "grad", None, raising=False)


# ----------------------------------------------------------------------------- shapes
@pytest.mark.claim("SHAPE-01")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_n_by_1_with_n_broadcasts_to_n_by_n(claim, framework):
    if framework == "torch":
        run = lambda n: tuple((torch.zeros(n, 1) - torch.zeros(n)).shape)
    else:
        # JAX's shape rule by abstract evaluation (a concrete run would compile once per N)
        run = lambda n: tuple(jax.eval_shape(
            lambda a, b: a - b, jax.ShapeDtypeStruct((n, 1), jnp.float32),
            jax.ShapeDtypeStruct((n,), jnp.float32)).shape)
        assert (jnp.zeros((5, 1)) - jnp.zeros(5)).shape == (5, 5)

    @given(N)
    def prop(n):
        assert run(n) == (n, n)
    prop()
    claim.check('shape_for_n5', list(run(5)))


@control("SHAPE-01", "SHAPE-09", what="torch subtracts a (N, 1) column and a (N,) vector "
                                      "element by element instead of broadcasting to (N, N)")
def torch_does_not_broadcast_a_column(mp):
    mp.setattr(torch.Tensor, "__sub__", _aligned(torch.Tensor.__sub__))


@control("SHAPE-01", what="JAX subtracts a (N, 1) column and a (N,) vector element by element "
                          "instead of broadcasting to (N, N)")
def jax_does_not_broadcast_a_column(mp):
    # eager arrays and the tracers of eval_shape/jit subtract through their own classes
    for cls in (type(jnp.zeros(1)), jax.core.Tracer):
        mp.setattr(cls, "__sub__", _aligned(cls.__sub__))


@pytest.mark.claim("SHAPE-02")
def test_reshape_views_share_storage_clone_does_not(claim):
    x = torch.arange(6.0)
    view = x.reshape(2, 3)
    copy = x.clone()
    shares = view.data_ptr() == x.data_ptr()
    view[0, 0] = 100.0
    claim.record('reshape_shares_storage', shares)
    claim.record('write_through_view_visible', float(x[0]) == 100.0)
    claim.record('clone_shares_storage', copy.data_ptr() == x.data_ptr())
    assert shares and float(x[0]) == 100.0
    assert copy.data_ptr() != x.data_ptr() and float(copy[0]) == 0.0
    # "may": a non-contiguous input makes reshape copy
    t = torch.arange(6.0).reshape(2, 3).t()
    assert t.reshape(6).data_ptr() != t.data_ptr()


@control("SHAPE-02", what="reshape always copies: it never returns a view of the original")
def reshape_always_copies(mp):
    real = torch.Tensor.reshape
    mp.setattr(torch.Tensor, "reshape", lambda self, *shape: real(self, *shape).clone())


@pytest.mark.claim("TAPE-19")
def test_in_place_change_of_a_saved_tensor_raises_a_helpful_error(claim):
    w = torch.randn(3, requires_grad=True)
    a = torch.tanh(w)           # tanh saves its output
    # the operation whose saved tensor the in-place op changes, as torch's graph names it
    saver = re.sub(r"Backward\d*$", "", a.grad_fn.name())
    a.mul_(2)
    try:
        a.sum().backward()
        message = None
    except RuntimeError as err:
        message = str(err)
    claim.record("message", message.splitlines()[0][:200] if message else "nothing raised")
    assert message is not None, "backward() through a changed saved tensor raised nothing"
    # "helpful", as the entry reads it: the message names the cause and where it is
    claim.check("message names an in-place operation",
                re.search(r"in-?place", message, re.IGNORECASE) is not None)
    claim.check("message names the operation whose saved tensor changed", saver in message,
                note=saver)


@control("TAPE-19", what="an in-place change leaves a tensor's version counter alone, so "
                         "autograd does not notice that a saved tensor changed")
def in_place_change_unnoticed(mp):
    real = torch.Tensor.mul_

    def mul_(self, other):
        real(self.data, other)            # .data has a version counter of its own
        return self
    mp.setattr(torch.Tensor, "mul_", mul_)


@control("TAPE-19", what="autograd still refuses the changed saved tensor but says only "
                         "'backward failed', naming neither the in-place change nor the tensor")
def in_place_error_says_nothing(mp):
    real = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        try:
            return real(self, *args, **kwargs)
        except RuntimeError:
            raise RuntimeError("backward failed") from None
    mp.setattr(torch.Tensor, "backward", backward)


@pytest.mark.claim("SHAPE-03")
@pytest.mark.parametrize("module", list(MODULES))
def test_every_builtin_module_expects_batch_first(claim, module):
    """Feed a batch of N=5 laid out (N, ...): the output's first axis must be the batch."""
    torch.manual_seed(0)
    make, shape = MODULES[module]
    m = make().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        out = m(x, x, x) if module == "MultiheadAttention" else m(x)
    out = out[0] if isinstance(out, tuple) else out
    batch_first = getattr(m, "batch_first", None)
    claim.record("batch_first_attribute", repr(batch_first))
    # a seq-first module mixes the 5 "examples" along its sequence axis: perturbing example 0
    # changes the outputs of the others
    x2 = x.clone()
    x2[0] += 1.0
    with torch.no_grad():
        out2 = m(x2, x2, x2) if module == "MultiheadAttention" else m(x2)
    out2 = out2[0] if isinstance(out2, tuple) else out2
    independent = torch.allclose(out[1:], out2[1:])
    assert out.shape[0] == 5
    claim.check('examples_independent_along_axis_0', independent)


@control("SHAPE-03", what="nn.Linear, nn.Conv1d and nn.Conv2d run along axis 0 as a "
                          "sequence-first recurrent module does (each output adds up the ones "
                          "before it), so axis 0 is no longer the batch")
def batch_axis_read_as_a_sequence(mp):
    for cls in (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d):
        def forward(self, x, _real=cls.forward):
            return _real(self, x).cumsum(0)
        mp.setattr(cls, "forward", forward)


@control("SHAPE-03", expect="holds",
         what="nn.LSTM, nn.GRU, nn.MultiheadAttention and nn.TransformerEncoderLayer default to "
              "batch_first=True, so every built-in module takes its input batch first, (N, ...)")
def sequence_modules_default_to_batch_first(mp):
    for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.MultiheadAttention,
                torch.nn.TransformerEncoderLayer):
        def __init__(self, *args, _real=cls.__init__, **kwargs):
            kwargs.setdefault("batch_first", True)
            _real(self, *args, **kwargs)
        mp.setattr(cls, "__init__", __init__)


@pytest.mark.claim("SHAPE-04")
def test_a_batch_first_slice_is_one_contiguous_slab(claim):
    X = torch.randn(100, 3, 8, 8)
    batch = X[10:42]
    claim.record('slice_contiguous', batch.is_contiguous())
    claim.record('feature_slice_contiguous', X[:, 0].is_contiguous())
    assert batch.is_contiguous()
    assert batch.data_ptr() == X.data_ptr() + 10 * X[0].numel() * X.element_size()
    assert not X[:, 0].is_contiguous()     # the other axis is not one slab


@control("SHAPE-04", what="tensors are laid out with the first axis fastest (column-major, as "
                          "in Fortran), so a slice of rows is no longer one slab of memory")
def column_major_layout(mp):
    real = torch.randn

    def randn(*size, **kwargs):
        t = real(*size, **kwargs)
        flip = list(reversed(range(t.dim())))
        return t.permute(flip).contiguous().permute(flip)
    mp.setattr(torch, "randn", randn)


@pytest.mark.claim("SHAPE-05")
def test_skipped_first_layer_gives_the_quoted_shape_error(claim):
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    with pytest.raises(RuntimeError) as err:
        model[2](torch.randn(32, 8))
    claim.record("message", str(err.value))
    assert "mat1 and mat2 shapes cannot be multiplied (32x8 and 64x1)" in str(err.value)
    assert model(torch.randn(32, 8)).shape == (32, 1)


@control("SHAPE-05", what="PyTorch words the shape error otherwise: 'input and weight shapes "
                          "do not match (32x8 and 64x1)'")
def shape_error_worded_otherwise(mp):
    real = torch.nn.functional.linear

    def linear(input, weight, bias=None):
        try:
            return real(input, weight, bias)
        except RuntimeError as err:
            raise RuntimeError(str(err).replace("mat1 and mat2 shapes cannot be multiplied",
                                                "input and weight shapes do not match")) from None
    mp.setattr(torch.nn.functional, "linear", linear)


@pytest.mark.claim("SHAPE-06")
def test_linear_stores_out_by_in_and_computes_x_w_transposed(claim):
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 1)
    x = torch.randn(32, 64)
    # (out, in) first: x @ W.T below has no meaning for another layout
    claim.check('weight_shape', list(layer.weight.shape), halt=True)
    diff = (layer(x) - (x @ layer.weight.T + layer.bias)).abs().max().item()
    claim.check('max_abs_diff', diff)


@control("SHAPE-06", what="nn.Linear stores its weight as (in, out) and computes x @ W + b")
def linear_stores_in_by_out(mp):
    class InByOut(torch.nn.Linear):
        def __init__(self, in_features, out_features, bias=True, **kwargs):
            super().__init__(in_features, out_features, bias, **kwargs)
            self.weight = torch.nn.Parameter(self.weight.detach().T.contiguous())

        def forward(self, x):
            return x @ self.weight + self.bias
    mp.setattr(torch.nn, "Linear", InByOut)


@pytest.mark.claim("JAX-09")
@pytest.mark.parametrize("where", ["static", "traced"])
def test_out_of_bounds_reads_clamp(claim, where):
    read = (lambda a, i: a[i]) if where == "static" else _read
    got = float(read(jnp.arange(3.0), 10))
    claim.check('arange3_at_10', got)

    # any index and length (a few lengths: each new length is a compile); indices from -100 to
    # 100 clamp into range after Python's negative wrap-around
    @given(st.sampled_from([1, 2, 3, 7]), st.integers(-100, 100))
    def prop(n, i):
        a = jnp.arange(float(n))
        want = float(min(i, n - 1)) if i >= 0 else float(max(i + n, 0))
        assert float(_read(a, i)) == want
    if where == "traced":
        prop()
    else:
        for n, i in [(3, 3), (3, 10**6), (1, 5), (3, -100)]:
            want = float(min(i, n - 1)) if i >= 0 else float(max(i + n, 0))
            assert float(jnp.arange(float(n))[i]) == want


@control("JAX-09", what="an out-of-bounds read wraps around (index modulo the length) instead "
                        "of clamping to the last element")
def out_of_bounds_reads_wrap(mp):
    from jax._src.numpy import indexing  # arr[i], eager and traced, is rewriting_take
    real = indexing.rewriting_take

    def take(arr, idx, *args, **kwargs):
        scalar = isinstance(idx, int) or (getattr(idx, "ndim", None) == 0
                                          and jnp.issubdtype(idx.dtype, jnp.integer))
        if scalar and jnp.ndim(arr) == 1:
            idx = idx % arr.shape[0]
        return real(arr, idx, *args, **kwargs)
    mp.setattr(indexing, "rewriting_take", take)
    jax.clear_caches()                       # _read was compiled with the real indexing


@pytest.mark.claim("JAX-10")
def test_out_of_bounds_writes_are_dropped(claim):
    out = jnp.arange(3.0).at[10].set(99.0)
    claim.record('after_write_at_10', np.asarray(out).tolist())
    assert np.array_equal(out, [0.0, 1.0, 2.0])
    # contrast: an in-bounds write lands
    assert float(jnp.arange(3.0).at[2].set(99.0)[2]) == 99.0


@control("JAX-10", what="an out-of-bounds write lands on the last element (JAX's mode='clip') "
                        "instead of being dropped")
def out_of_bounds_writes_clip(mp):
    ref = type(jnp.zeros(1).at[0])
    real = ref.set
    mp.setattr(ref, "set", lambda self, values, **kwargs: real(
        self, values, **{**kwargs, "mode": kwargs.get("mode") or "clip"}))
