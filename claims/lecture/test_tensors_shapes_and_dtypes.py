"""Lecture, "Tensors, shapes, and dtypes" (and the shape-bug story's sentences about the
broadcast loss, L:321-327, and the notebook warning of L:11).

"it is immutable: x[0] = 1.0 raises a TypeError, and x = x.at[0].set(1.0) returns a new array."
"An operation between a (N, 1) and a (N,) array broadcasts into (N, N) ... It raises no error."
"reshape may return a view sharing storage, clone does not, and mutating a view mutates the
original." "an in-place operation on a tensor needed for the backward pass raises a helpful
error." "Every built-in module in PyTorch expects input shaped (N, ...)." "PyTorch reports mat1
and mat2 shapes cannot be multiplied (32x8 and 64x1)." "A read is clamped to the last valid
element, so jnp.arange(3.0)[10] returns 2.0, and an out-of-bounds write is silently dropped."
"""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from support.harness.controls import control
from support.spec import error_models


N = st.integers(min_value=1, max_value=64)


# ----------------------------------------------------------------------------- arrays
@pytest.mark.claim("JAX-02")
def test_jax_arrays_are_immutable(claim):
    x = jnp.zeros(3)
    try:
        x[0] = 1.0
        error = None
    except TypeError as err:
        error = str(err).splitlines()[0][:100]
    claim.record("error", error or "nothing raised")
    assert error is not None, "item assignment to a jax.Array raised nothing"
    y = x.at[0].set(1.0)
    claim.record('original_after_at_set', np.asarray(x).tolist())
    assert np.array_equal(x, np.zeros(3)) and float(y[0]) == 1.0 and y is not x


@control("JAX-02", what="a jax.Array accepts x[0] = 1.0 without an error (and ignores it)")
def jax_array_accepts_item_assignment(mp):
    mp.setattr(type(jnp.zeros(1)), "__setitem__", lambda self, index, value: None)


@pytest.mark.claim("JAX-14")
def test_jax_array_has_a_device_a_float32_default_and_no_grad(claim):
    from support.lab.jaxutil import x64_enabled
    assert not x64_enabled(), "x64 leaked into a default-dtype claim"
    a = jnp.array([1.0])
    claim.check('jax_default', str(a.dtype))
    claim.check('numpy_default', str(np.array([1.0]).dtype))
    assert a.dtype == jnp.float32 and np.array([1.0]).dtype == np.float64
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


def _aligned(real):
    """``real`` subtraction, except that a column (N, 1) and a vector (N,) or row (1, N) are
    matched element by element into (N,) instead of broadcast into (N, N)."""
    def sub(a, b):
        sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
        if len(sa) == 2 and sa[1] == 1 and sb in ((sa[0],), (1, sa[0])):
            return real(a[:, 0], b.reshape(-1))
        return real(a, b)
    return sub


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
    a.mul_(2)
    try:
        a.sum().backward()
        message = None
    except RuntimeError as err:
        message = str(err)
    claim.record("message", message.splitlines()[0][:200] if message else "nothing raised")
    assert message is not None, "backward() through a changed saved tensor raised nothing"
    assert "modified by an inplace operation" in message


@control("TAPE-19", what="an in-place change leaves a tensor's version counter alone, so "
                         "autograd does not notice that a saved tensor changed")
def in_place_change_unnoticed(mp):
    real = torch.Tensor.mul_

    def mul_(self, other):
        real(self.data, other)            # .data has a version counter of its own
        return self
    mp.setattr(torch.Tensor, "mul_", mul_)


MODULES = {
    "Linear": (lambda: torch.nn.Linear(8, 4), (5, 8)),
    "Conv1d": (lambda: torch.nn.Conv1d(3, 4, 3), (5, 3, 10)),
    "Conv2d": (lambda: torch.nn.Conv2d(3, 4, 3), (5, 3, 10, 10)),
    "LSTM": (lambda: torch.nn.LSTM(8, 4), (5, 7, 8)),
    "GRU": (lambda: torch.nn.GRU(8, 4), (5, 7, 8)),
    "MultiheadAttention": (lambda: torch.nn.MultiheadAttention(8, 2), (5, 7, 8)),
    "TransformerEncoderLayer": (lambda: torch.nn.TransformerEncoderLayer(8, 2, 16), (5, 7, 8)),
}


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
    claim.record('examples_independent_along_axis_0', independent)
    assert out.shape[0] == 5
    assert independent, (f"{module} mixes the examples laid out along axis 0 "
                         f"(batch_first={batch_first!r})")


@control("SHAPE-03", what="nn.Linear, nn.Conv1d and nn.Conv2d run along axis 0 as a "
                          "sequence-first recurrent module does (each output adds up the ones "
                          "before it), so axis 0 is no longer the batch")
def batch_axis_read_as_a_sequence(mp):
    for cls in (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d):
        def forward(self, x, _real=cls.forward):
            return _real(self, x).cumsum(0)
        mp.setattr(cls, "forward", forward)


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
    claim.check('weight_shape', list(layer.weight.shape))
    # (out, in) first: x @ W.T below has no meaning for another layout
    assert tuple(layer.weight.shape) == (1, 64)
    diff = (layer(x) - (x @ layer.weight.T + layer.bias)).abs().max().item()
    claim.check('max_abs_diff', diff)
    assert diff <= 1e-6


@control("SHAPE-06", what="nn.Linear stores its weight as (in, out) and computes x @ W + b")
def linear_stores_in_by_out(mp):
    class InByOut(torch.nn.Linear):
        def __init__(self, in_features, out_features, bias=True, **kwargs):
            super().__init__(in_features, out_features, bias, **kwargs)
            self.weight = torch.nn.Parameter(self.weight.detach().T.contiguous())

        def forward(self, x):
            return x @ self.weight + self.bias
    mp.setattr(torch.nn, "Linear", InByOut)


_read = jax.jit(lambda a, i: a[i])       # a traced index


@pytest.mark.claim("JAX-09")
@pytest.mark.parametrize("where", ["static", "traced"])
def test_out_of_bounds_reads_clamp(claim, where):
    read = (lambda a, i: a[i]) if where == "static" else _read
    got = float(read(jnp.arange(3.0), 10))
    claim.check('arange3_at_10', got)
    assert got == 2.0

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
    from jax._src.numpy import indexing      # arr[i], eager and traced, is rewriting_take
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
    # negative control: an in-bounds write lands
    assert float(jnp.arange(3.0).at[2].set(99.0)[2]) == 99.0


@control("JAX-10", what="an out-of-bounds write lands on the last element (JAX's mode='clip') "
                        "instead of being dropped")
def out_of_bounds_writes_clip(mp):
    ref = type(jnp.zeros(1).at[0])
    real = ref.set
    mp.setattr(ref, "set", lambda self, values, **kwargs: real(
        self, values, **{**kwargs, "mode": kwargs.get("mode") or "clip"}))


# ----------------------------------------------------------------------------- shape-bug story
def _mse_warnings(pred, target):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = torch.nn.MSELoss()(pred, target)
    return loss, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.claim("SHAPE-08")
def test_mse_of_64x1_against_64_is_the_all_pairs_mean(claim):
    torch.manual_seed(0)
    pred, y = torch.randn(64, 1), torch.randn(64)
    loss, _ = _mse_warnings(pred, y)
    pairs = ((pred - y[None, :]) ** 2)
    claim.check('broadcast_shape', list((pred - y).shape))
    claim.check('diff_to_all_pairs_mean', abs(loss.item() - pairs.mean().item()))
    assert tuple((pred - y).shape) == (64, 64)
    assert abs(loss.item() - pairs.mean().item()) <= 1e-6
    assert abs(loss.item() - ((pred[:, 0] - y) ** 2).mean().item()) > 1e-3


@control("SHAPE-08", what="MSELoss matches a (64, 1) prediction to a (64,) target element by "
                          "element instead of broadcasting them")
def mse_matches_the_shapes(mp):
    real = torch.nn.functional.mse_loss
    mp.setattr(torch.nn.functional, "mse_loss", lambda input, target, *args, **kwargs: real(
        input.reshape(target.shape), target, *args, **kwargs))
# SHAPE-09's control: torch_does_not_broadcast_a_column (after SHAPE-01's test)


@pytest.mark.claim("SHAPE-09")
def test_all_pairs_mse_is_minimised_by_the_batch_mean(claim):
    @given(st.integers(0, 2**32 - 1), st.integers(2, 50))
    def prop(seed, n):
        rng = np.random.default_rng(seed)
        y = torch.tensor(rng.normal(size=n) * 10)
        p = torch.full((n, 1), y.mean().item(), dtype=torch.float64, requires_grad=True)
        loss = ((p - y[None, :]) ** 2).mean()
        loss.backward()
        gmax = p.grad.abs().max().item()
        # 0 in exact arithmetic; the rounding of the mean and of the sum over the n pairs
        # is relative to (2/n^2) sum_j (|p| + |y_j|) (support/spec/error_models.py)
        model = error_models.model("shape:all-pairs-mean-float64")
        magnitude = 2.0 / n**2 * float((p.detach()[0, 0].abs() + y.abs()).sum())
        share = model.share(gmax, magnitude, n=n)
        claim.record("max_grad_at_mean", gmax, reduce="max")
        claim.record("share_of_rounding_bound", share, reduce="max", note=model.describe(n))
        assert share <= 1, f"gradient {gmax:.3g} at the mean: {share:.3g} of the rounding bound"
        other = torch.tensor(rng.normal(size=(n, 1)) * 10)
        assert loss.item() <= ((other - y[None, :]) ** 2).mean().item()
    prop()
    claim.check('worst_grad_at_mean', claim.measurements['max_grad_at_mean']['value'])
    claim.check("share_of_rounding_bound", claim.measurements["share_of_rounding_bound"]["value"])


WARNING_PREFIX = ("Using a target size (torch.Size([64])) that is different to the input size "
                  "(torch.Size([64, 1])). This will likely lead to incorrect results")


@pytest.mark.claim("SHAPE-10")
def test_mse_warns_about_the_target_size(claim):
    _, msgs = _mse_warnings(torch.randn(64, 1), torch.randn(64))
    claim.record("warning", msgs[0] if msgs else "")
    assert len(msgs) == 1 and msgs[0].startswith(WARNING_PREFIX)


def _mse_quiet_after(mp, warned: int):
    """F.mse_loss (what nn.MSELoss calls) that stops warning about a target of another size
    once it has warned ``warned`` times."""
    real, count = torch.nn.functional.mse_loss, [0]

    def mse_loss(input, target, *args, **kwargs):
        if input.size() != target.size():
            count[0] += 1
            if count[0] > warned:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return real(input, target, *args, **kwargs)
        return real(input, target, *args, **kwargs)
    mp.setattr(torch.nn.functional, "mse_loss", mse_loss)


@control("SHAPE-10", what="PyTorch stays silent about a target whose size differs from the "
                          "input's")
def mse_silent_about_the_target_size(mp):
    _mse_quiet_after(mp, 0)


@pytest.mark.claim("SHAPE-11")
def test_the_warning_fires_once_per_batch_1560_times(claim, concrete, fresh):
    """The story's own 120-epoch run (train(target_2d=False)), shared with STORY-02 through
    support.lab.stories, so the suite trains it once per process."""
    from support.lab import stories
    res = stories.run(concrete, "shape_bug", fresh=fresh)
    n = sum(m.startswith("Using a target size") for m in res.warnings)
    claim.check('batches_per_epoch', res.steps / 120)
    claim.check('warnings_in_120_epochs', n)
    assert n == res.steps == 1560        # once per batch, every batch
    # negative control: the fixed loop warns nothing
    assert not stories.run(concrete, "fixed", fresh=fresh).warnings


# the story trains inside the test (one thread, no worker process): under a test-scope control
# support.lab.cache.isolated() makes it train afresh, so no session of its own is needed
@control("SHAPE-11", what="PyTorch warns about the target size only the first time, not on "
                          "every batch")
def mse_warns_only_once(mp):
    _mse_quiet_after(mp, 1)


@pytest.mark.claim("SHAPE-12")
def test_a_repeated_warning_is_shown_once(claim):
    """Python's default filter shows a warning once per call site; a notebook uses it too."""
    counts = {}
    for action in ("default", "always"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.simplefilter(action)
            for _ in range(5):
                torch.nn.MSELoss()(torch.randn(64, 1), torch.randn(64))
        counts[action] = sum("Using a target size" in str(w.message) for w in caught)
    claim.check('times_shown_for_5_calls', counts['default'])
    claim.record("times_with_always_filter", counts["always"])
    assert counts["default"] == 1 and counts["always"] == 5


@control("SHAPE-12", what="Python's default warning filter shows every repetition of a "
                          "warning, as 'always' does")
def default_filter_shows_every_warning(mp):
    real = warnings.simplefilter
    mp.setattr(warnings, "simplefilter", lambda action, *args, **kwargs: real(
        "always" if action == "default" else action, *args, **kwargs))


@pytest.mark.claim("SHAPE-13")
@pytest.mark.parametrize("fix", ["target_y[:, None]", "pred.squeeze()"])
def test_matching_shapes_removes_the_warning(claim, fix):
    torch.manual_seed(0)
    pred, y = torch.randn(64, 1), torch.randn(64)
    loss, msgs = _mse_warnings(*((pred, y[:, None]) if fix.startswith("target") else
                                 (pred.squeeze(), y)))
    elementwise = ((pred[:, 0] - y) ** 2).mean()
    claim.check('warnings', len(msgs))
    assert not msgs and torch.allclose(loss, elementwise, rtol=0, atol=0)


@control("SHAPE-13", what="squeeze() leaves a (64, 1) prediction as it is, so the squeezed "
                          "fix still broadcasts")
def squeeze_does_nothing(mp):
    mp.setattr(torch.Tensor, "squeeze", lambda self, *dims: self)


@pytest.mark.claim("SHAPE-14")
def test_a_shape_assertion_catches_the_bug_on_the_first_batch(claim):
    from torch.utils.data import DataLoader, TensorDataset

    from support.lab.train_torch import mlp
    torch.manual_seed(0)
    X, y = torch.randn(832, 8), torch.randn(832)       # the story's target: shape (N,)

    def first_failing_batch(target) -> tuple[int | None, str]:
        """Run an epoch with the notes' assertion at the loss; the batch it stops at."""
        model = mlp()
        for i, (xb, yb) in enumerate(DataLoader(TensorDataset(X, target), batch_size=64), 1):
            pred = model(xb)
            try:
                assert pred.shape == yb.shape
            except AssertionError:
                return i, f"{tuple(pred.shape)} != {tuple(yb.shape)}"
            torch.nn.functional.mse_loss(pred, yb)
        return None, ""
    caught_at, shapes = first_failing_batch(y)
    fixed_at, _ = first_failing_batch(y[:, None])
    claim.record("batch at which the assertion stopped the buggy loop", caught_at, note=shapes)
    claim.record("batch at which it stopped the fixed loop", fixed_at if fixed_at else "none",
                 note="13 batches of 64")
    assert caught_at == 1, f"the shape assertion stopped the buggy loop at batch {caught_at}"
    assert fixed_at is None, "control: the assertion stopped the fixed loop"


@control("SHAPE-14", what="a tensor's .shape leaves out trailing axes of length 1, so a (64, 1) "
                          "prediction reports the shape of a (64,) target")
def shape_hides_trailing_ones(mp):
    real = torch.Tensor.shape                # the C attribute, read through its descriptor

    def shape(self):
        dims = tuple(real.__get__(self))
        while len(dims) > 1 and dims[-1] == 1:
            dims = dims[:-1]
        return torch.Size(dims)
    mp.setattr(torch.Tensor, "shape", property(shape))
