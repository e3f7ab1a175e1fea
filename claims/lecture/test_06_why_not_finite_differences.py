"""Lecture, "Why not finite differences" (L:65-74).

    z = Wx + b, a = tanh(z), yhat = v . a + c, L = (yhat - y)^2

"The best central difference, over forty step sizes, manages 1.4e-12 at h = 3e-7." The toy
network is protocol §4.1 (``support/lab/toy.py``).
"""
import numpy as np
import pytest
import torch

from support.rules.controls import control
from support.lab import toy
from support.lab.jaxutil import x64
from support.lab.properties import EPS64
from support.rules import tolerances


def _tanh_derivative_scaled(mp, factor: float) -> None:
    """torch.tanh and jnp.tanh whose derivative is ``factor`` (1 - tanh^2) (forward values
    unchanged)."""
    import jax
    import jax.numpy as jnp
    real = torch.tanh

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            a = real(z)
            ctx.save_for_backward(a)
            return a

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            return grad * (1 - a * a) * factor

    tanh = jax.custom_jvp(jax.lax.tanh)
    tanh.defjvps(lambda dx, a, x: dx * (1 - a * a) * factor)
    mp.setattr(torch, "tanh", Tanh.apply)
    mp.setattr(jnp, "tanh", tanh)


def _gradcheck_evaluations(t) -> int:
    """How many times torch.autograd.gradcheck evaluates the toy loss of ``t`` (float64) to
    check its gradient against central differences: the whole numerical Jacobian
    (fast_mode=False), without the undefined-gradient check, which evaluates it once more."""
    from torch.autograd import gradcheck
    x, y = torch.tensor(t.x), torch.tensor(t.y, dtype=torch.float64)
    calls = [0]

    def loss(W, b, v, c):
        calls[0] += 1
        return (v @ torch.tanh(W @ x + b) + c - y) ** 2
    leaves = tuple(torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
                   for a in (t.W, t.b, t.v, t.c))
    assert gradcheck(loss, leaves, fast_mode=False, check_undefined_grad=False)
    return calls[0]


def record_sum_orders(claim, net) -> None:
    """Which order each library's W @ x sums the four products of a row in, here, and the
    notes' three figures with torch's W x summed in NumPy's order: the figures are rounding
    of those sums, so they follow the CPU's kernels (AD-13)."""
    import jax.numpy as jnp
    W, x = np.asarray(net.W), np.asarray(net.x)
    with x64():
        orders = {"numpy": toy.sum_order(lambda W, x: W @ x, W, x),
                  "torch": toy.sum_order(lambda W, x: (torch.tensor(W) @ torch.tensor(x)).numpy(),
                                         W, x),
                  "jax": toy.sum_order(lambda W, x: np.asarray(jnp.asarray(W) @ jnp.asarray(x)),
                                       W, x)}
    claim.record("order each library sums W x in", orders)
    hand = toy.hand_gradient(net.params, net.x, net.y)
    g_t, g_j = toy.torch_gradient(net, sums="halving"), toy.jax_gradient(net)
    claim.record("torch's W x summed by halving: torch_vs_hand, jax_vs_hand, torch_vs_jax",
                 [toy.max_abs_diff(g_t, hand), toy.max_abs_diff(g_j, hand),
                  toy.max_abs_diff(g_t, g_j)],
                 note="the same products, added (p0 + p2) + (p1 + p3) by torch itself")


def _torch_func_grad_cost(t) -> tuple[int, int, int]:
    """(loss evaluations, aten operators, aten operators of one forward) of one
    torch.func.grad of the toy loss of ``t``: the library decides how often it calls it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))
    x, y = torch.tensor(t.x), torch.tensor(t.y, dtype=torch.float64)
    calls = [0]

    def loss(W, b, v, c):
        calls[0] += 1
        return (v @ torch.tanh(W @ x + b) + c - y) ** 2
    params = tuple(torch.tensor(np.asarray(a, dtype=np.float64)) for a in (t.W, t.b, t.v, t.c))
    with Ops() as forward:
        loss(*params)
    calls[0] = 0
    with Ops() as gradient:
        torch.func.grad(loss, argnums=(0, 1, 2, 3))(*params)
    return calls[0], gradient.n, forward.n


def _jax_grad_cost(t) -> tuple[int, int, int]:
    """(loss evaluations, equations of the gradient's jaxpr, equations of the forward's) of
    jax.grad of the toy loss of ``t``."""
    import jax
    calls = [0]

    def loss(p, x, y):
        calls[0] += 1
        return toy.jax_loss(p, x, y)
    with x64():
        args = toy.jax_args(t)
        jax.grad(loss)(*args)
        n = calls[0]
        grad_eqns = len(jax.make_jaxpr(jax.grad(loss))(*args).jaxpr.eqns)
        fwd_eqns = len(jax.make_jaxpr(loss)(*args).jaxpr.eqns)
    return n, grad_eqns, fwd_eqns


class _TanhWrongDerivative(torch.autograd.Function):
    """tanh with a doubtful hand-written backward: 1 - a instead of 1 - a^2."""

    @staticmethod
    def forward(ctx, z):
        a = torch.tanh(z)
        ctx.save_for_backward(a)
        return a

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * (1 - a)


@pytest.mark.claim("AD-12")
def test_central_differences_need_two_forward_passes_per_parameter(claim):
    """"It needs two forward passes per parameter": what torch's central-difference Jacobian
    costs, counted as the number of parameters grows (3 and 10 hidden units)."""
    small, large = toy.draw(hidden=3), toy.draw(hidden=10)
    per_parameter = ((_gradcheck_evaluations(large) - _gradcheck_evaluations(small))
                     / (large.n_params - small.n_params))
    claim.check("evaluations per parameter", per_parameter,
                note=f"torch.autograd.gradcheck, from {small.n_params} to {large.n_params} "
                     "parameters")


@pytest.mark.claim("AD-12")
def test_central_difference_error_is_v_shaped_in_the_step(claim, net):
    """"It is not exact, because it trades two errors against each other": too large a step
    and truncation, too small and round-off; the error against the step is a V."""
    steps, errs = toy.fd_errors(net)
    i = int(np.argmin(errs))
    claim.record("steps", steps.tolist(), note="logspace(-1, -13, 40), central differences on W[0,0]")
    claim.record("errors", errs.tolist())
    claim.record("best step", float(steps[i]))
    claim.check("n_steps", len(steps))
    # from the minimum toward each end of the range (1 where the minimum is that end)
    claim.check("rise toward large steps (truncation)", float(errs[:i + 1].max() / errs[i]))
    claim.check("rise toward small steps (round-off)", float(errs[i:].max() / errs[i]))


@control("AD-12", "AD-17", what="torch's finite differences are one-sided, (f(x + h) - f(x)) / h: "
                                "one evaluation per parameter",
         moves=("evaluations per parameter",))
def one_sided_differences(mp):
    import importlib
    gc = importlib.import_module("torch.autograd.gradcheck")
    base = {}     # f(x), once per input tensor (entry is one element of it, a view)

    def forward_difference(fn, entry, v, norm_v, nbhd_checks_fn):
        key = entry.untyped_storage().data_ptr()
        if key not in base:         # the view is kept, so that no other input reuses the key
            base[key] = (entry, tuple(o.clone() for o in fn()))
        orig = entry.clone()
        entry.copy_(orig + v)
        outb = fn()
        entry.copy_(orig)
        return tuple(((b - a) / norm_v).detach().reshape(-1)
                     for a, b in zip(base[key][1], outb))
    mp.setattr(gc, "_compute_numerical_gradient", forward_difference)


@control("AD-12", what="NumPy's tanh is its tangent line at the toy network's point (the same "
                       "value and slope there): the loss is then quadratic in each weight, a "
                       "central difference has no truncation error, and only round-off is left")
def tanh_linear_at_the_point(mp):
    t = toy.draw()
    z0 = t.W @ t.x + t.b
    real = np.tanh
    a0 = real(z0)

    def tangent(z, *args, **kwargs):
        if args or kwargs or np.shape(z) != z0.shape:
            return real(z, *args, **kwargs)
        return a0 + (1 - a0 * a0) * (np.asarray(z) - z0)
    mp.setattr(np, "tanh", tangent)


@pytest.mark.claim("AD-15")
def test_stray_python_floats_lift_the_error_to_about_1e_7(claim, net):
    hand = toy.hand_gradient(net.params, net.x, net.y)
    clean = toy.max_abs_diff(toy.torch_gradient(net), hand)
    careless = toy.max_abs_diff(toy.torch_gradient(net, careless=True), hand)
    claim.check('autodiff_error', clean, note="PyTorch's autodiff line; the body says 1.7e-18")
    claim.check('jax_autodiff_error', toy.max_abs_diff(toy.jax_gradient(net), hand),
                note="JAX's autodiff line; the body says 4.4e-16")
    claim.check('careless_error', careless)
    claim.record("autodiff_error, torch's W x summed by halving",
                 toy.max_abs_diff(toy.torch_gradient(net, sums="halving"), hand),
                 note="NumPy's order on this machine (AD-13): the notes' 1.7e-18")


@control("AD-02", "AD-03", "AD-04", "AD-13", "AD-14", "AD-15",
         what="torch's and JAX's derivative of tanh is off by one part in a billion: autodiff "
              "is then a close approximation, not exact to rounding")
def tanh_derivative_approximate(mp):
    _tanh_derivative_scaled(mp, 1 + 1e-9)


def _exact_rows(W, x) -> np.ndarray:
    """W @ x (2-D by 1-D) with each row's sum of products rounded once, exactly (as a kernel
    with an exact accumulator returns it)."""
    from fractions import Fraction
    xs = [Fraction(float(v)) for v in np.asarray(x).tolist()]
    return np.array([float(sum(Fraction(float(w)) * v for w, v in zip(row, xs)))
                     for row in np.asarray(W).tolist()], dtype=np.float64)


class _CorrectlyRoundedMv(torch.autograd.Function):
    """torch's W @ x (float64) rounded once per row; backward as torch's mv: g x^T, W^T g."""

    @staticmethod
    def forward(ctx, W, x):
        ctx.save_for_backward(W, x)
        return torch.tensor(_exact_rows(W.detach().numpy(), x.detach().numpy()), dtype=W.dtype)

    @staticmethod
    def backward(ctx, grad):
        W, x = ctx.saved_tensors
        return torch.outer(grad, x), torch.mv(W.t(), grad)


def _jax_correctly_rounded_mv(mp) -> None:
    """JAX's float64 W @ x (on arrays and on tracers) rounded once per row, its derivative
    the product's (dW x + W dx)."""
    import jax
    import jax.numpy as jnp
    from jax._src import core
    from jax._src.array import ArrayImpl

    @jax.custom_jvp
    def mv(W, x):
        return jax.pure_callback(_exact_rows, jax.ShapeDtypeStruct((W.shape[0],), W.dtype), W, x)

    @mv.defjvp
    def _mv_jvp(primals, tangents):
        (W, x), (dW, dx) = primals, tangents
        return mv(W, x), jnp.matmul(dW, x) + jnp.matmul(W, dx)

    def exact(real):
        def matmul(self, other):
            if jnp.ndim(self) == 2 and jnp.ndim(other) == 1 \
                    and jnp.result_type(self) == jnp.result_type(other) == jnp.float64:
                return mv(self, other)
            return real(self, other)
        return matmul
    for owner in (core.Tracer, ArrayImpl):
        mp.setattr(owner, "__matmul__", exact(owner.__matmul__))


@control("AD-15", expect="holds",
         what="torch's and JAX's float64 matrix-vector products round each row's sum once, "
              "correctly (an exact accumulator), instead of after every addition: both float64 "
              "gradients then differ from the hand gradient by about an ulp of the smallest "
              "gradient, near 1e-17, while the stray floats' error stays near 1e-7")
def matvec_correctly_rounded(mp):
    real = torch.Tensor.__matmul__

    def matmul(self, other):
        if (isinstance(other, torch.Tensor) and self.dim() == 2 and other.dim() == 1
                and self.dtype == other.dtype == torch.float64):
            return _CorrectlyRoundedMv.apply(self, other)
        return real(self, other)
    mp.setattr(torch.Tensor, "__matmul__", matmul)
    _jax_correctly_rounded_mv(mp)


@pytest.mark.claim("AD-17")
def test_finite_differences_cost_2n_evaluations_backprop_one_forward(claim):
    """Fig. 66 right, counted in what the libraries do as the toy network grows (3, 10 and 30
    hidden units: 19, 61 and 181 parameters): the loss evaluations of torch's
    central-difference Jacobian (torch.autograd.gradcheck) against those of torch.func.grad
    and jax.grad, and the size of the gradient's program over the forward's."""
    rows = {}
    for hidden in (3, 10, 30):
        t = toy.draw(hidden=hidden)
        torch_calls, torch_ops, forward_ops = _torch_func_grad_cost(t)
        jax_calls, grad_eqns, forward_eqns = _jax_grad_cost(t)
        rows[t.n_params] = {"finite differences": _gradcheck_evaluations(t),
                            "torch.func.grad": torch_calls, "jax.grad": jax_calls,
                            "torch: gradient operators / forward operators":
                                torch_ops / forward_ops,
                            "jax: gradient equations / forward equations":
                                grad_eqns / forward_eqns}
    ns = sorted(rows)
    fd = [rows[n]["finite differences"] for n in ns]
    per_parameter = [(b - a) / (m - n) for a, b, n, m in zip(fd, fd[1:], ns, ns[1:])]
    claim.record("parameters", ns)
    for key in rows[ns[0]]:
        claim.record(key, [rows[n][key] for n in ns])
    claim.record("finite differences: evaluations per parameter", per_parameter)
    claim.record("finite differences: evaluations beyond 2n", [e - 2 * n for e, n in zip(fd, ns)],
                 note="gradcheck's one unperturbed evaluation")
    # finite differences grow linearly, two evaluations per parameter
    assert per_parameter == [2.0, 2.0], f"finite differences: {per_parameter} per parameter"
    assert len({e - 2 * n for e, n in zip(fd, ns)}) == 1
    # backprop stays flat: one forward evaluation whatever n, and a gradient program of the
    # same size relative to the forward
    for fw in ("torch.func.grad", "jax.grad"):
        assert [rows[n][fw] for n in ns] == [1] * len(ns), f"{fw} evaluated the loss " \
            f"{[rows[n][fw] for n in ns]} times"
    for key in ("torch: gradient operators / forward operators",
                "jax: gradient equations / forward equations"):
        assert len({rows[n][key] for n in ns}) == 1, f"{key} grows with n"


@control("AD-17", what="torch.func.grad and jax.grad differentiate in forward mode, one "
                       "Jacobian-vector product per parameter")
def gradient_by_forward_mode(mp):
    import jax
    import jax.numpy as jnp
    from torch import func

    def torch_grad(f, argnums=0, **kwargs):
        nums = argnums if isinstance(argnums, tuple) else (argnums,)

        def grad(*args):
            out = []
            for i in nums:
                g = torch.zeros_like(args[i])
                for idx in np.ndindex(tuple(args[i].shape)):
                    e = torch.zeros_like(args[i])
                    e[idx] = 1
                    g[idx] = func.jvp(lambda p: f(*args[:i], p, *args[i + 1:]), (args[i],),
                                      (e,))[1]
                out.append(g)
            return tuple(out) if isinstance(argnums, tuple) else out[0]
        return grad

    def jax_grad(f, argnums=0, **kwargs):
        def grad(p, *rest):
            leaves, tree = jax.tree_util.tree_flatten(p)
            out = []
            for j, leaf in enumerate(leaves):
                g = []
                for idx in np.ndindex(np.shape(leaf)):
                    t = [jnp.zeros_like(a) for a in leaves]
                    t[j] = t[j].at[idx].set(1)
                    g.append(jax.jvp(lambda q: f(q, *rest), (p,),
                                     (jax.tree_util.tree_unflatten(tree, t),))[1])
                out.append(jnp.reshape(jnp.stack(g), np.shape(leaf)))
            return jax.tree_util.tree_unflatten(tree, out)
        return grad
    mp.setattr(func, "grad", torch_grad)
    mp.setattr(jax, "grad", jax_grad)


def _best_central_difference(net, loss) -> tuple[float, float]:
    """(error, step) of the best of the protocol's forty central differences on W[0,0] of
    ``loss(params)``, a float64 loss of the toy network ``net``, against the hand gradient."""
    exact = toy.hand_gradient(net.params, net.x, net.y)["W"][0, 0]
    errs = []
    for h in toy.FD_STEPS:
        plus = {k: np.array(v, dtype=np.float64, copy=True) for k, v in net.params.items()}
        minus = {k: np.array(v, dtype=np.float64, copy=True) for k, v in net.params.items()}
        plus["W"][0, 0] += h
        minus["W"][0, 0] -= h
        errs.append(abs((loss(plus) - loss(minus)) / (2 * h) - exact))
    i = int(np.argmin(errs))
    return float(errs[i]), float(toy.FD_STEPS[i])


@pytest.mark.claim("AD-14")
def test_best_central_difference_is_four_orders_worse_than_autodiff(claim, net):
    steps, errs = toy.fd_errors(net)
    i = int(np.argmin(errs))
    hand = toy.hand_gradient(net.params, net.x, net.y)
    autodiff = max(toy.max_abs_diff(toy.torch_gradient(net), hand),
                   toy.max_abs_diff(toy.jax_gradient(net), hand))
    claim.record("steps", steps.tolist())
    claim.record("errors", errs.tolist())
    # the printed figures (drift), and the catalogue's failure: a best error below 1e-14 or
    # above 1e-9 (the entry's bounds)
    claim.check('best_error', float(errs[i]))
    claim.check('best_h', float(steps[i]))
    # the minimum is round-off: the same differences of torch's and JAX's float64 loss, which
    # differ from NumPy's only in rounding, bottom out elsewhere (the reach below)
    with x64():
        for name, loss in (
                ("torch", lambda p: toy.torch_loss(p, net.x, net.y)[0].item()),
                ("JAX", lambda p: float(toy.jax_loss(*toy.jax_args(p, net.x, net.y))))):
            error, h = _best_central_difference(net, loss)
            claim.record(f"best central difference of {name}'s float64 loss", error,
                         note=f"at h = {h:.3g}, {np.log10(error / errs[i]):+.2f} orders from "
                              f"NumPy's {errs[i]:.4g}")
    # "four orders of magnitude": a count of orders, log10 of the ratio, compared additively
    # (what rounds to it); at least three orders is the qualitative claim (bound); decided
    # only beyond how far rounding alone moves the best central difference
    orders = float(np.log10(errs[i] / autodiff))
    reach = tolerances.within_reach(orders, "orders:best central difference")
    claim.check('orders_worse_than_autodiff', orders, interval=reach["interval"],
                note=f"log10(best central difference {errs[i]:.4g} / autodiff error "
                     f"{autodiff:.4g}, the worse of torch and JAX against the hand gradient); "
                     + reach["note"])


@pytest.mark.claim("AD-13")
def test_autodiff_agrees_with_the_hand_gradient_in_float64(claim, net):
    hand = toy.hand_gradient(net.params, net.x, net.y)
    g_t, g_j = toy.torch_gradient(net), toy.jax_gradient(net)
    # each against the figure the notes print (drift) and the bound <= 1e-15 (fails)
    claim.check("torch_vs_hand", toy.max_abs_diff(g_t, hand))
    claim.check("jax_vs_hand", toy.max_abs_diff(g_j, hand))
    claim.check("torch_vs_jax", toy.max_abs_diff(g_t, g_j))
    # "4.4e-16, which is float64 epsilon"
    claim.check("float64 epsilon", float(EPS64))
    record_sum_orders(claim, net)
    # contrast: the same JAX gradient without x64 is nowhere near (DTYPE-12)
    claim.check("jax_vs_hand, x64 off", toy.max_abs_diff(toy.jax_gradient(net, x64=False), hand))


@pytest.mark.claim("AD-16")
def test_finite_differences_check_a_doubtful_gradient_at_a_handful_of_points(claim):
    """'Finite differences keep one job in practice: checking an autodiff gradient you do not
    trust, at a handful of points': torch.autograd.gradcheck (central differences against
    backward(), float64) on the toy network at five points."""
    from torch.autograd import gradcheck

    def loss(tanh):
        def f(W, b, v, c, x, y):
            return (v @ tanh(W @ x + b) + c - y) ** 2
        return f

    points = [toy.draw(seed=s) for s in range(5)]
    good, bad = [], []
    for p in points:
        leaves = tuple(torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True)
                       for a in (p.W, p.b, p.v, p.c))
        data = (torch.tensor(p.x, dtype=torch.float64), torch.tensor(p.y, dtype=torch.float64))
        good.append(gradcheck(lambda *w: loss(torch.tanh)(*w, *data), leaves,
                              raise_exception=False))
        bad.append(gradcheck(lambda *w: loss(_TanhWrongDerivative.apply)(*w, *data), leaves,
                             raise_exception=False))
    claim.record("points checked", len(points))
    claim.record("evaluations per point (2 per parameter)", 2 * points[0].n_params)
    claim.record("gradcheck passes: backward() of the toy network", good)
    claim.record("gradcheck passes: tanh's derivative written as 1 - a", bad)
    assert all(good), "gradcheck rejected autograd's gradient of the toy network"
    # the job: a wrong gradient is caught
    assert not any(bad), "gradcheck accepted a backward that uses 1 - a for tanh's derivative"


@control("AD-16", what="torch.autograd.gradcheck compares with an absolute tolerance of 1000: "
                       "it accepts any gradient of a reasonable size")
def gradcheck_accepts_anything(mp):
    real = torch.autograd.gradcheck
    mp.setattr(torch.autograd, "gradcheck", lambda *args, **kwargs: real(
        *args, **{**kwargs, "atol": 1e3}))
