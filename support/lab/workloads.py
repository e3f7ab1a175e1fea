"""Workloads the timing claims of several sections share: an MLP's forward and forward + backward
passes (:func:`forward_backward_sides`: AD-01, AD-06), float32 JAX inputs drawn by NumPy
(:func:`jnp_normal`: AD-01, AD-09), and the chain of small elementwise ops that jit collapses
(:func:`op_chain`, :func:`chain_input`) with the extra time a jit figure may take
(:data:`JIT_BUDGET_S`), for "Eager vs compiled" (JIT-01) and the lecture's jit table.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from torch import nn

from support.lab.train_torch import mlp


# ----------------------------------------------------------------------------- autodiff's cost
def forward_backward_sides(width: int, batch: int = 256, d_in: int = 8):
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


def jnp_normal(rng, *shape, scale=1.0):
    # NumPy draws: each jax.random shape would compile a kernel of its own, seconds on a
    # loaded runner, for numbers whose generator does not matter here
    return jnp.asarray(rng.standard_normal(shape) * scale, dtype=jnp.float32)


# ----------------------------------------------------------------------------- jit
# seconds of extra rounds a figure may take while its interval straddles a bound
JIT_BUDGET_S = 3.0


def op_chain(n_ops: int):
    """``n_ops`` tiny elementwise ops (alternately * 0.999 and + 0.001): so cheap per element
    that eager time is per-op dispatch, the thing compilation collapses."""
    def f(x):
        for k in range(n_ops):
            x = x * 0.999 if k % 2 == 0 else x + 0.001
        return x
    return f


def chain_input(n=1000):
    return jnp.asarray(np.random.default_rng(0).standard_normal(n), dtype=jnp.float32)
