"""Lecture, "Automatic differentiation", "The graph, forward and backward" and "Forward mode
and reverse mode": what a gradient costs.

* AD-01: "the gradient of a scalar loss ... for roughly the cost of two forward passes".
* AD-06: "Its cost is a small constant multiple of the forward pass, whether the model has
  nineteen parameters or nineteen million."
* AD-09: "Forward mode ... costs one pass per input. Reverse mode ... one pass per output ...
  A simulator with three design variables and a thousand outputs is the opposite case, and
  forward mode is then the right tool."

Timed with :mod:`support.machine.timing` (min over interleaved trials, ``block_until_ready`` for
JAX); torch runs on one intra-op thread so that a shared runner's load does not change the
work split between forward and backward.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

from support.harness.controls import control
from support.lab import toy
from support.lab.train_torch import mlp, torch_threads
from support.machine import timing


def _waiting(x, seconds: float):
    """``x`` passed through a host callback that sleeps ``seconds`` whenever the compiled
    program computing it runs (a sleep, not work: it stays the same on a busy machine)."""
    def wait(v):
        time.sleep(seconds)
        return v
    return jax.pure_callback(wait, jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), x)


def _torch_sides(width: int, batch: int = 256, d_in: int = 8):
    """Forward (tape on, as in training) and forward + backward of an MSE loss."""
    torch.manual_seed(0)
    model = mlp(d_in=d_in, hidden=width)
    X, y = torch.randn(batch, d_in), torch.randn(batch, 1)
    params = list(model.parameters())
    loss_fn = nn.MSELoss()

    def fwd():
        return loss_fn(model(X), y)

    def fwd_bwd():
        return torch.autograd.grad(loss_fn(model(X), y), params)

    n_params = sum(p.numel() for p in params)
    return {"forward": fwd, "forward+backward": fwd_bwd}, n_params


def _normal(rng, *shape, scale=1.0):
    # NumPy draws: each jax.random shape would compile a kernel of its own, seconds on a
    # loaded runner, for numbers whose generator does not matter here
    return jnp.asarray(rng.standard_normal(shape) * scale, dtype=jnp.float32)


def _jax_sides(width: int, batch: int = 256, d_in: int = 8):
    rng = np.random.default_rng(0)
    params = {"W1": _normal(rng, d_in, width, scale=d_in ** -0.5),
              "W2": _normal(rng, width, width, scale=width ** -0.5),
              "w3": _normal(rng, width, 1, scale=width ** -0.5)}
    X = _normal(rng, batch, d_in)
    y = jnp.zeros((batch, 1))

    def loss(p):
        h = jax.nn.relu(X @ p["W1"])
        h = jax.nn.relu(h @ p["W2"])
        return jnp.mean((h @ p["w3"] - y) ** 2)

    f, g = jax.jit(loss), jax.jit(jax.value_and_grad(loss))
    return {"forward": lambda: f(params), "forward+backward": lambda: g(params)}


@pytest.mark.claim("AD-01")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_full_gradient_costs_about_two_forward_passes(claim, framework):
    with torch_threads(1):
        if framework == "torch":
            sides, _ = _torch_sides(256, batch=2048)
            sync = timing.no_sync
        else:
            sides, sync = _jax_sides(256, batch=2048), timing.jax_sync
        # millisecond trials: many of them, so that the minimum escapes a loaded runner
        cmp = timing.compare(sides, repeats=40, sync=sync, max_seconds=1.5)
        # "roughly two forward passes": stated 2 within timing:ratio (1-4); contradicted if
        # at or below one forward pass, or beyond the catalogue's failure bound of 6
        timing.check_ratio(claim, "(forward+backward)/forward", cmp, "forward+backward",
                           "forward", budget_s=3.0)
    timing.record_times(claim, cmp)


@control("AD-01", "AD-06", what="every backward pass costs a tenth of a second more: "
                                "torch.autograd.grad and jax.value_and_grad's compiled gradient "
                                "each wait 0.1 s, far more than the forward passes timed here")
def backward_pays_a_tenth_of_a_second(mp):
    real_grad, real_vg = torch.autograd.grad, jax.value_and_grad

    def grad(*args, **kwargs):
        time.sleep(0.1)
        return real_grad(*args, **kwargs)

    def value_and_grad(fun, *args, **kwargs):
        vg = real_vg(fun, *args, **kwargs)

        def waiting(*a, **k):
            value, g = vg(*a, **k)
            return _waiting(value, 0.1), g
        return waiting
    mp.setattr(torch.autograd, "grad", grad)
    mp.setattr(jax, "value_and_grad", value_and_grad)


def _toy_sides():
    """The notes' nineteen-parameter network itself (support/lab/toy.py, float64, one
    example): forward with the tape on, and forward + backward."""
    t = toy.draw()

    def fwd():
        return toy.torch_loss(t)[0]

    def fwd_bwd():
        loss, leaves = toy.torch_loss(t)
        return torch.autograd.grad(loss, [leaves[k] for k in toy.PARAM_NAMES])
    return {"forward": fwd, "forward+backward": fwd_bwd}, t.n_params


# 8-w-w-1 MLPs of w^2 + 11 w + 1 parameters: 1,951, 189,631 and 18,996,493, beside the toy's 19
AD06_WIDTHS = (39, 430, 4353)


@pytest.mark.claim("AD-06")
def test_gradient_cost_ratio_is_constant_from_nineteen_to_nineteen_million_parameters(claim):
    cmps, counts = {}, {}

    def spread() -> timing.Estimate:
        ratios = {k: c.ratio("forward+backward", "forward") for k, c in cmps.items()}
        hi = max(ratios, key=lambda k: ratios[k].value)
        lo = min(ratios, key=lambda k: ratios[k].value)
        return ratios[hi] / ratios[lo]

    with torch_threads(1):
        sides, counts["toy"] = _toy_sides()
        cmps["toy"] = timing.compare(sides, repeats=60, max_seconds=1.0)
        for w in AD06_WIDTHS:
            sides, counts[w] = _torch_sides(w, batch=128)
            # the largest model's trials take a third of a second: a few of them
            cmps[w] = timing.compare(sides, repeats=60, max_seconds=1.0, min_repeats=3)
        # "a small constant multiple whatever the size": the largest ratio over the smallest
        # stays below 2, from the notes' nineteen parameters to about nineteen million
        timing.settle(claim, "max/min gradient-cost ratio over model sizes", spread,
                      list(cmps.values()), budget_s=4.0)
    claim.record("parameters", list(counts.values()))
    claim.record("(forward+backward)/forward per model",
                 [round(c.ratio("forward+backward", "forward").value, 2) for c in cmps.values()])
    assert counts["toy"] == 19 and 1.8e7 <= counts[AD06_WIDTHS[-1]] <= 2.0e7


def _three_to_thousand():
    rng = np.random.default_rng(0)
    A, M = _normal(rng, 100, 3), _normal(rng, 1000, 100, scale=0.1)
    return lambda x: jnp.tanh(M @ jnp.tanh(A @ x)), jnp.ones(3)


def _thousand_to_one():
    M = _normal(np.random.default_rng(1), 100, 1000, scale=1000 ** -0.5)
    return lambda x: jnp.sum(jnp.tanh(M @ x)), jnp.ones(1000)


def _passes(f, x):
    """The sentence's cost model for R^n -> R: n forward passes (one jit(jvp) call per basis
    direction) against one reverse pass (one jit(vjp) call)."""
    n = x.shape[0]
    jvp = jax.jit(lambda t: jax.jvp(f, (x,), (t,))[1])
    vjp = jax.jit(lambda: jax.vjp(f, x)[1](jnp.ones(()))[0])
    basis = list(jnp.eye(n, dtype=x.dtype))
    return {"n forward passes": lambda: [jvp(t) for t in basis], "one reverse pass": vjp}


@pytest.mark.claim("AD-09")
@pytest.mark.parametrize("shape", ["3 in, 1000 out", "1000 in, 1 out"])
def test_forward_mode_wins_for_few_inputs_reverse_for_few_outputs(claim, shape):
    f, x = _three_to_thousand() if shape.startswith("3") else _thousand_to_one()
    jf, jr = jax.jit(jax.jacfwd(f)), jax.jit(jax.jacrev(f))
    np.testing.assert_allclose(np.asarray(jf(x)), np.asarray(jr(x)), rtol=1e-4, atol=1e-5)
    cmp = timing.compare({"jacfwd": lambda: jf(x), "jacrev": lambda: jr(x)}, repeats=15,
                         sync=timing.jax_sync, max_seconds=1.0)
    if shape.startswith("3"):
        # "forward mode is then the right tool": it is faster beyond the catalogue's 1.2x
        timing.check_ratio(claim, "jacrev/jacfwd", cmp, "jacrev", "jacfwd", budget_s=3.0)
        claim.record("passes: 1000 reverse against 3 forward", 1000 / 3,
                     note="the sentence's cost model: one pass per output against one per input")
    else:
        # "reverse mode wins by a factor of the parameter count": the factor is the figure
        # (stated: this loss's 1,000 inputs), faster beyond 1.2x the bound
        timing.check_ratio(claim, "jacfwd/jacrev", cmp, "jacfwd", "jacrev", budget_s=3.0)
        passes = timing.compare(_passes(f, x), repeats=5, sync=timing.jax_sync,
                                max_seconds=1.0, min_repeats=3)
        timing.record_estimate(claim, "1000 jvp passes / one vjp pass",
                               passes.ratio("n forward passes", "one reverse pass"))
        claim.note("jacfwd evaluates the 1,000 forward passes as one batched (vmapped) pass; "
                   "the pass count is the sentence's cost model, timed as 1,000 separate "
                   "jit(jvp) calls against one jit(vjp)")
    timing.record_times(claim, cmp)


@control("AD-09", what="forward mode costs a tenth of a second more per Jacobian: jax.jacfwd's "
                       "compiled Jacobian waits 0.1 s on every call")
def jacfwd_pays_a_tenth_of_a_second(mp):
    real = jax.jacfwd
    mp.setattr(jax, "jacfwd", lambda *args, **kwargs: (
        lambda jac: lambda *a, **k: _waiting(jac(*a, **k), 0.1))(real(*args, **kwargs)))
