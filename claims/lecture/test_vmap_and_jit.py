"""Lecture, "JAX batches with vmap and compiles with jit" (and the composition rows of the
"Limitations and trade-offs" table; the device/dispatch sentences of L:426/L:477).

"vmap agrees with an explicit Python loop over the same 256 examples to 2.2e-15" (protocol
§4.6: x64 on, key = PRNGKey(0) reused for W (16x8), v (16) and the 256x8 batch, b = 0, c = 0).
"torch.func provides grad, vmap, jvp and vjp as function transforms in the JAX style, and
torch.compile compiles a model into fused kernels." "grad, vmap and jit in any combination:
jax.hessian or per-example gradients with vmap(grad(f)) are one line." The jit timing table
(JIT-16...21) and vmap's speed (JAX-07) belong to the performance block.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from support.harness.controls import control
from support.lab.jaxutil import x64
from support.lab.train_torch import mlp
from support.spec import error_models


def predict_one(params, x):
    return params["v"] @ jnp.tanh(params["W"] @ x + params["b"]) + params["c"]


def _vmap_vs_loop():
    key = jax.random.PRNGKey(0)          # reused on purpose: protocol §4.6
    params = {"W": jax.random.normal(key, (16, 8)), "b": jnp.zeros(16),
              "v": jax.random.normal(key, (16,)), "c": jnp.zeros(())}
    X = jax.random.normal(key, (256, 8))
    batched = jax.vmap(predict_one, in_axes=(None, 0))(params, X)
    # rows taken through NumPy: iterating a jax.Array compiles one slice per index (~20 s)
    looped = jnp.stack([predict_one(params, jnp.asarray(x)) for x in np.asarray(X)])
    return float(jnp.max(jnp.abs(batched - looped))), batched.dtype, batched.shape


@pytest.mark.claim("JAX-06")
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_vmap_agrees_with_a_python_loop(claim, precision):
    with x64(precision == "float64"):
        diff, dtype, shape = _vmap_vs_loop()
    claim.record('dtype', str(dtype))
    assert str(dtype) == precision
    claim.record('shape', list(shape))
    if precision == "float64":
        claim.check('max_abs_diff', diff)
        assert diff <= 1e-14
    else:
        claim.record("max_abs_diff", diff, note="x64 off: float32")
        assert diff <= 1e-5
    assert shape == (256,) and str(dtype) == precision


@pytest.mark.claim("JAX-08")
def test_hessian_and_per_example_gradients_are_one_line(claim):
    # each transform jitted once: eager hessian/vmap dispatch compiles every primitive apart
    with x64():
        rng = np.random.default_rng(0)
        A = jnp.asarray(rng.normal(size=(4, 4)))
        f = lambda w: jnp.sum(jnp.tanh(A @ w) ** 2)
        w = jnp.asarray(rng.normal(size=4))
        H = jax.jit(jax.hessian(f))(w)
        # the long way: one gradient of each gradient component (rows of the Hessian)
        row = jax.jit(jax.grad(lambda w, e: jax.grad(f)(w) @ e))
        H_loop = jnp.stack([row(w, e) for e in np.eye(4)])
        Xn, yn = rng.normal(size=(5, 4)), rng.normal(size=5)
        loss = lambda w, x, y: (jnp.tanh(x @ w) - y) ** 2
        per_ex = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))(
            w, jnp.asarray(Xn), jnp.asarray(yn))
        one = jax.jit(jax.grad(loss))
        per_loop = jnp.stack([one(w, x, t) for x, t in zip(Xn, yn)])
    dh, dg = float(jnp.max(jnp.abs(H - H_loop))), float(jnp.max(jnp.abs(per_ex - per_loop)))
    claim.record('hessian_shape', list(H.shape))
    claim.record('per_example_shape', list(per_ex.shape))
    claim.check('hessian_vs_loop', dh)
    claim.check('per_example_vs_loop', dg)
    assert H.shape == (4, 4) and per_ex.shape == (5, 4)
    assert dh <= 1e-12 and dg <= 1e-12


def _f(w, x):
    return jnp.sin(w @ x) * jnp.sum(w ** 2)


@pytest.mark.claim("JAX-15")
def test_grad_vmap_and_jit_compose(claim):
    # the composition under test, and the one-example gradient it must equal (jitted alone so
    # the reference is not 240 eager differentiations), built once for all the examples
    batched = jax.jit(jax.vmap(jax.grad(_f), in_axes=(None, 0)))
    one = jax.jit(jax.grad(_f))

    @given(st.integers(0, 2**32 - 1))
    def prop(seed):
        rng = np.random.default_rng(seed)
        w, X = rng.normal(size=3), rng.normal(size=(6, 3))
        with x64():
            got = np.asarray(batched(w, X))
            want = np.stack([np.asarray(one(w, x)) for x in X])
        err = float(np.max(np.abs(got - want)))
        # grad f = cos(w.x) x sum(w^2) + sin(w.x) 2 w: each term by absolute value, with the
        # rounding w.x carries into sin and cos (support/spec/error_models.py)
        model = error_models.model("jax:vmap-grad-float64")
        wx, carried = X @ w, np.abs(X) @ np.abs(w)
        magnitude = (((np.abs(np.cos(wx)) + carried) * np.sum(w * w))[:, None] * np.abs(X)
                     + ((np.abs(np.sin(wx)) + carried)[:, None] * 2.0 * np.abs(w)[None, :]))
        share = model.share(got - want, magnitude, n=3)
        claim.record("max_abs_diff", err, reduce="max")
        claim.record("share_of_rounding_bound", share, reduce="max", note=model.describe(3))
        assert got.shape == (6, 3)
        assert share <= 1, f"vmap(grad) is {err:.3g} off the per-example grad, {share:.3g} of the bound"
    prop()
    claim.check('worst_abs_diff', claim.measurements['max_abs_diff']['value'])
    claim.check("share_of_rounding_bound", claim.measurements["share_of_rounding_bound"]["value"])


@control("JAX-06", "JAX-08", "JAX-15", what="jax.vmap hands back the examples' results in "
                                            "reverse order")
def vmap_reverses_the_batch(mp):
    real = jax.vmap
    mp.setattr(jax, "vmap", lambda fun, *a, **kw: (lambda *args: real(fun, *a, **kw)(*args)[::-1]))


@pytest.mark.claim("JAX-12")
def test_jax_places_arrays_on_its_default_device(claim):
    devs = jax.devices()
    a = jnp.ones(3)
    moved = jax.device_put(np.ones(3), devs[-1])
    claim.record("devices", [str(d) for d in devs])
    claim.record("array_device", str(next(iter(a.devices()))))
    assert devs and a.devices() == {devs[0]}
    assert moved.devices() == {devs[-1]}
    if any(d.platform == "gpu" for d in devs):
        assert devs[0].platform == "gpu"          # the first GPU when one is visible


@control("JAX-12", what="with two CPU devices, JAX places new arrays on the second one rather "
                        "than the first that jax.devices() lists", scope="process")
def arrays_land_on_the_second_device(mp):
    # the number of host devices is fixed when a backend starts (collection may have started
    # one already, asking for the device table): start it again with two
    import jax.extend.backend
    jax.extend.backend.clear_backends()
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_default_device", jax.devices()[1])


@pytest.mark.claim("JAX-13")
def test_block_until_ready_waits_for_the_result(claim):
    x = jnp.ones((1024, 1024))
    (x @ x).block_until_ready()                   # compiled once, outside what is observed
    y = x @ x                                     # dispatched: about 20 ms of work on a CPU
    at_dispatch = y.is_ready()
    out = y.block_until_ready()
    ready = y.is_ready()
    claim.record('returns_the_array', out is y)
    claim.record("ready_when_dispatched", at_dispatch)
    claim.record("ready_when_block_until_ready_returned", ready)
    assert out is y and ready, "block_until_ready returned before the result was ready"
    assert float(out[0, 0]) == 1024.0


@control("JAX-13", what="block_until_ready returns at once, without waiting for the result")
def block_until_ready_does_not_wait(mp):
    mp.setattr(type(jnp.zeros(())), "block_until_ready", lambda self: self)


@pytest.mark.claim("FW-07")
def test_torch_func_transforms_exist_and_match_autograd(claim):
    from torch import func
    names = ["grad", "vmap", "jvp", "vjp"]
    present = {n: hasattr(func, n) for n in names}
    present["torch.compile"] = hasattr(torch, "compile")
    claim.record("present", present)
    f = lambda x: (torch.sin(x) * x).sum()
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    f(xg).backward()
    diff = (func.grad(f)(x) - xg.grad).abs().max().item()
    claim.check('func_grad_vs_backward', diff)
    per_row = func.vmap(func.grad(f))(x.reshape(5, 1))
    assert all(present.values())
    assert diff <= 1e-12
    assert torch.allclose(per_row.reshape(-1), torch.sin(x) + x * torch.cos(x))


@control("FW-07", what="torch.func.grad differentiates in float32, so its gradient is no "
                       "longer the one autograd's backward() computes in float64")
def func_grad_in_float32(mp):
    from torch import func
    real = func.grad

    def grad(f, *args, **kwargs):
        g = real(f, *args, **kwargs)
        return lambda x, *rest, **kw: g(x.float(), *rest, **kw).to(x.dtype)
    mp.setattr(func, "grad", grad)


class _ChainModel(torch.nn.Module):
    """A model with a chain of elementwise ops between its two layers (JIT-17's chain as the
    activation): what a compiler can fuse."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = torch.nn.Linear(8, 64), torch.nn.Linear(64, 1)

    def forward(self, x):
        h = self.inp(x)
        h = torch.tanh(h) * torch.exp(-h ** 2) + torch.sin(h) - torch.sqrt(torch.abs(h))
        return self.out(h)


def _compiled_kernels(model, x):
    """(eager output, compiled output, Inductor's generated kernels, the aten operators an
    eager forward dispatches): torch.compile's CPU backend writes C++ kernels named
    ``cpp_fused_<ops>_<n>``, read from the code it generated."""
    import re

    from torch._inductor.utils import run_and_get_code
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))
    torch._dynamo.reset()
    compiled, code = run_and_get_code(torch.compile(model), x)
    with Ops() as ops:
        eager = model(x)
    kernels = sorted({k for c in code for k in re.findall(r"\bcpp_fused_\w+", c)})
    return eager, compiled, kernels, ops.names


@pytest.mark.slow
@pytest.mark.claim("FW-07")
def test_torch_compile_compiles_a_model_into_fused_kernels(claim):
    """"torch.compile compiles a model into fused kernels": on a CPU its backend (Inductor)
    generates C++ and builds it with the system's compiler."""
    import shutil
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        pytest.skip("torch.compile's CPU backend (Inductor) builds C++: no C++ compiler on PATH")
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    with torch.no_grad():
        eager, compiled, kernels, ops = _compiled_kernels(_ChainModel(), x)
        # the other reading: the notes' own MLP, whose only elementwise ops are its two
        # ReLUs, each between two matrix products (which go to a BLAS call, not a kernel)
        _, _, mlp_kernels, _ = _compiled_kernels(mlp(), x)
    elementwise = [o for o in ops if o not in ("aten.addmm", "aten.mm", "aten.t", "aten.view")]
    claim.record("generated kernels", kernels)
    claim.record("eager elementwise operators", elementwise)
    assert kernels, "torch.compile generated no kernel"
    claim.check("eager ops per generated kernel", len(elementwise) / len(kernels),
                note="the model's elementwise operators, dispatched one by one eagerly, over "
                     "the kernels Inductor generated for them")
    claim.record("generated kernels, the notes' 8-64-64-1 MLP", mlp_kernels)
    torch.testing.assert_close(compiled, eager)


@control("FW-07", what="torch.compile only traces the model and runs its operators one by "
                       "one (the aot_eager backend): it generates no kernel, fuses nothing")
def compile_runs_op_by_op(mp):
    real = torch.compile

    def compile(model=None, **kwargs):
        return real(model, **{**kwargs, "backend": "aot_eager"})
    mp.setattr(torch, "compile", compile)
