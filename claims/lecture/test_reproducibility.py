"""Lecture, "Reproducibility and random seeds" (and the randomness row of "Side by side").

"In PyTorch, seeding torch, NumPy and Python's random covers the first three [initialization,
shuffling, dropout masks]." "JAX has no global random state at all. Every random function takes
a key as an argument, and you derive new keys with jax.random.split ... Reusing a key gives the
same numbers again ... randomness that is an explicit value can be reproduced exactly,
including inside jit and vmap." GPU non-determinism (RNG-06/08/09/11) is the GPU block's.
"""
import itertools
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from support.harness.controls import control


@pytest.mark.claim("RNG-01")
def test_jax_random_has_no_global_generator(claim):
    try:
        drawn = jax.random.normal(shape=(3,))
        refused = ""
    except TypeError as err:
        drawn, refused = None, str(err)
    has_seed = hasattr(jax.random, "seed")
    claim.record("call_without_key", refused or f"drew {drawn}")
    claim.record('module_has_seed', has_seed)
    assert refused, "jax.random.normal drew numbers without a key"
    assert "key" in refused and not has_seed


@control("RNG-01", what="jax.random keeps a hidden global generator: normal() without a key "
                        "draws from it, and jax.random.seed() seeds it")
def jax_random_has_a_global_generator(mp):
    real = jax.random.normal
    state = {"key": jax.random.key(0)}

    def seed(s):
        state["key"] = jax.random.key(s)

    def normal(key=None, shape=(), dtype=None, **kw):
        if key is None:
            state["key"], key = jax.random.split(state["key"])
        return real(key, shape, dtype, **kw)
    mp.setattr(jax.random, "normal", normal)
    mp.setattr(jax.random, "seed", seed, raising=False)


@pytest.mark.claim("RNG-02")
def test_same_key_same_numbers(claim):
    key = jax.random.key(42)
    a, b = jax.random.normal(key, (5,)), jax.random.normal(key, (5,))
    same = bool(jnp.array_equal(a, b))
    claim.record('bitwise_equal', same)
    assert same


@control("RNG-02", what="jax.random.normal advances a hidden counter on every call, so the "
                        "same key gives new numbers each time")
def a_key_draws_new_numbers_each_call(mp):
    real, calls = jax.random.normal, itertools.count()
    mp.setattr(jax.random, "normal",
               lambda key, *a, **kw: real(jax.random.fold_in(key, next(calls)), *a, **kw))


@pytest.mark.claim("RNG-03")
def test_split_keys_give_new_numbers(claim):
    key = jax.random.key(42)
    key2, sub = jax.random.split(key)
    draws = [jax.random.normal(k, (5,)) for k in (key, key2, sub)]
    distinct = not any(bool(jnp.array_equal(draws[i], draws[j]))
                       for i in range(3) for j in range(i + 1, 3))
    claim.record('draws_distinct', distinct)
    assert distinct


@control("RNG-03", what="jax.random.split hands back copies of the key it is given, not new keys")
def split_copies_the_key(mp):
    mp.setattr(jax.random, "split",
               lambda key, num=2: jnp.stack([key] * (num if isinstance(num, int) else num[0])))


@pytest.mark.claim("RNG-04")
def test_explicit_keys_reproduce_inside_jit_and_vmap(claim):
    f = lambda k: jax.random.normal(k, (4,)) * 2.0 + jax.random.uniform(k, (4,))
    key = jax.random.key(7)
    same_jit = bool(jnp.array_equal(jax.jit(f)(key), f(key)))
    keys = jax.random.split(key, 5)
    batched = jax.vmap(f)(keys)
    looped = jnp.stack([f(k) for k in keys])
    same_vmap = bool(jnp.array_equal(batched, looped))
    claim.record('jit_equals_eager', same_jit)
    claim.record('vmap_equals_loop', same_vmap)
    assert same_jit and same_vmap


@control("RNG-04", what="traced under jit or vmap, jax.random.normal draws from another stream "
                        "than the same call run eagerly")
def traced_draws_differ_from_eager_ones(mp):
    real = jax.random.normal

    def normal(key, *a, **kw):
        if isinstance(key, jax.core.Tracer):
            key = jax.random.fold_in(key, 1)
        return real(key, *a, **kw)
    mp.setattr(jax.random, "normal", normal)


@pytest.mark.claim("RNG-05")
def test_torch_uses_a_global_generator_seeded_by_manual_seed(claim):
    torch.manual_seed(3)
    a = torch.randn(5)
    b = torch.randn(5)                   # the hidden global state moved on
    torch.manual_seed(3)
    c = torch.randn(5)
    claim.record('reseed_repeats', bool(torch.equal(a, c)))
    assert torch.equal(a, c) and not torch.equal(a, b)


@control("RNG-05", what="torch.manual_seed does not reset torch's global generator")
def manual_seed_does_not_reseed(mp):
    mp.setattr(torch, "manual_seed", lambda seed: torch.default_generator)


def _seeded_run(seed):
    """Initialisation, DataLoader shuffling and dropout masks, all from the seeded generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    X = torch.from_numpy(np.random.normal(size=(96, 8)).astype(np.float32))
    y = X.sum(1, keepdim=True) + float(random.random())
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=16,
                                         shuffle=True)
    for _ in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.claim("RNG-07")
def test_seeding_torch_numpy_and_random_reproduces_a_run(claim):
    a, b, c = _seeded_run(0), _seeded_run(0), _seeded_run(1)
    claim.record('same_seed_bitwise_equal', bool(torch.equal(a, b)))
    claim.record("other_seed_differs", not torch.equal(a, c))
    assert torch.equal(a, b) and not torch.equal(a, c)


@control("RNG-07", what="the DataLoader shuffles from fresh operating-system entropy, which no "
                        "seed reaches")
def shuffling_ignores_the_seeds(mp):
    sampler = torch.utils.data.RandomSampler
    real = sampler.__iter__

    def unseeded(self):
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        return real(self)
    mp.setattr(sampler, "__iter__", unseeded)
