"""Summary sheet, "Key ideas", "Random numbers in JAX" (S:8).

"there is no hidden global generator; every jax.random function is a pure function of an
explicit key" (RNG-01), "so the same key always gives the same numbers" (RNG-02). "Derive new
keys with key, sub = jax.random.split(key) and never reuse a key unless you want identical
draws" (RNG-03). The lecture says the same (L:501): "JAX has no global random state at all.
Every random function takes a key as an argument ... Reusing a key gives the same numbers
again"; so does the pitfall S:58.
"""
import inspect
import itertools

import jax
import jax.numpy as jnp
import pytest

from support.rules.controls import control


@pytest.mark.claim("RNG-01")
def test_jax_random_has_no_global_generator(claim):
    try:
        drawn = jax.random.normal(shape=(3,))
        refused = ""
    except TypeError as err:
        drawn, refused = None, str(err)
    has_seed = hasattr(jax.random, "seed")
    # "a pure function of an explicit key": the key is a parameter with no default
    key = inspect.signature(jax.random.normal).parameters.get("key")
    key_required = key is not None and key.default is inspect.Parameter.empty
    claim.record("call_without_key", refused or f"drew {drawn}")
    claim.record("key_parameter_required", key_required)
    claim.record('module_has_seed', has_seed)
    assert refused, "jax.random.normal drew numbers without a key"
    assert key_required and not has_seed


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
