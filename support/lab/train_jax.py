"""The notes' JAX/optax training loop (protocol §8.2), the counterpart of ``train_torch.train``.

Same data preparation as the PyTorch loop (:func:`support.lab.train_torch.prepare`: inputs
scaled on the training rows, target standardised with ddof 0), here kept 1-D with the
prediction taken as ``[..., 0]``. Parameters are a list of ``{"W": (d_in, d_out), "b"}``
for 8-64-64-1, each drawn uniform on ±1/√fan_in (biases too), the PyTorch default's
range, from ``key, kW, kb = split(key, 3)`` per layer; the init key is the subkey of one
split of ``PRNGKey(seed)``. ReLU hidden layers, loss ``mean((pred - y)**2)``,
``optax.adam(1e-3)``, a jitted ``value_and_grad`` -> ``update`` -> ``apply_updates``
step. Each epoch splits the carried key, permutes the 824 rows with the subkey and takes
batches of 64 (the last one has 56 rows). The final-epoch validation RMSE is in MPa.

The lecture ran this in the process that had turned ``jax_enable_x64`` on, with every
array explicitly float32; :func:`train_jax` does the same inside ``jax.enable_x64(x64)``,
so the setting does not leak into other tests. JAX's random streams depend on the
version, on x64 and on ``jax_threefry_partitionable``: compare seed means, not digits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from support.lab.data import Concrete, lecture_split
from support.lab.jaxutil import x64 as x64_mode
from support.lab.train_torch import BATCH, prepare, rmse_mpa

SIZES = (8, 64, 64, 1)


@dataclass
class JaxResult:
    rmse: float
    pred_std: float
    steps: int


def init_params(key, sizes=SIZES):
    import jax
    import jax.numpy as jnp
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        lim = 1.0 / math.sqrt(d_in)
        params.append({
            "W": jax.random.uniform(kw, (d_in, d_out), jnp.float32, -lim, lim),
            "b": jax.random.uniform(kb, (d_out,), jnp.float32, -lim, lim),
        })
    return params


def forward(params, x):
    import jax.numpy as jnp
    for layer in params[:-1]:
        x = jnp.maximum(x @ layer["W"] + layer["b"], 0.0)
    last = params[-1]
    return (x @ last["W"] + last["b"])[..., 0]


def train_jax(data: Concrete, *, fold: int = 0, seed: int = 0, epochs: int = 120,
              lr: float = 1e-3, x64: bool = True, train_idx=None, val_idx=None) -> JaxResult:
    """Train the notes' MLP once in JAX; final-epoch validation RMSE in MPa.

    The whole run is one jitted function (``lax.scan`` over epochs and over each epoch's
    full batches, the 56-row batch stepped after them): the same steps in the same order
    as a Python loop over a jitted step, without a dispatch per step.
    """
    import jax
    import jax.numpy as jnp

    if train_idx is None or val_idx is None:
        train_idx, val_idx = lecture_split(fold)
    p = prepare(data, train_idx, val_idx)
    with x64_mode(x64):
        run = _compiled_run(len(p.X_train), len(p.X_val), epochs, lr, x64)
        out = run(jax.random.PRNGKey(seed), jnp.asarray(p.X_train, dtype=jnp.float32),
                  jnp.asarray(p.y_train, dtype=jnp.float32),
                  jnp.asarray(p.X_val, dtype=jnp.float32))
        pred = np.asarray(out * p.y_std + p.y_mean, dtype=np.float32)
    n = len(p.X_train)
    return JaxResult(rmse=rmse_mpa(pred, p.y_val), pred_std=float(np.std(pred, ddof=1)),
                     steps=epochs * -(-n // BATCH))


_RUNS: dict = {}


def _compiled_run(n: int, n_val: int, epochs: int, lr: float, x64: bool):
    key = (n, n_val, epochs, lr, x64)
    if key not in _RUNS:
        _RUNS[key] = _build_run(n, epochs, lr)
    return _RUNS[key]


def _build_run(n: int, epochs: int, lr: float):
    import jax
    import jax.numpy as jnp
    import optax

    opt = optax.adam(lr)
    full = n // BATCH

    def loss_fn(params, xb, yb):
        return jnp.mean((forward(params, xb) - yb) ** 2)

    def step(params, state, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    @jax.jit
    def run(key, Xtr, ytr, Xva):
        key, init_key = jax.random.split(key)
        params = init_params(init_key)
        state = opt.init(params)

        def batch(carry, idx):
            return step(*carry, Xtr[idx], ytr[idx]), None

        def epoch(carry, _):
            params, state, key = carry
            key, sub = jax.random.split(key)
            perm = jax.random.permutation(sub, n)
            (params, state), _ = jax.lax.scan(
                batch, (params, state), perm[:full * BATCH].reshape(full, BATCH))
            if n % BATCH:
                idx = perm[full * BATCH:]
                params, state = step(params, state, Xtr[idx], ytr[idx])
            return (params, state, key), None

        (params, state, key), _ = jax.lax.scan(epoch, (params, state, key), None,
                                               length=epochs)
        return forward(params, Xva)

    return run
