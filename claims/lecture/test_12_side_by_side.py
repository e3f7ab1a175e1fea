"""Lecture, "Side by side" (L:187-260).

"The exception is Apple's MPS backend, which has no float64 at all and raises an error if you
move a float64 tensor onto it" (DTYPE-05: L:281, and the table's "but not on Apple MPS").
Needs Apple MPS; skipped with the reason on other machines.

JAX's x64 flag is process-global: the claims about its default (here DTYPE-13) assert it is
off (DTYPE-01 measures JAX's dtype first and names the flag when it is on), the claims that
need it use ``support.lab.jaxutil.x64()``, and
``test_x64_does_not_leak_between_tests_in_either_order`` runs both groups in both orders.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from support.rules.controls import control
from support.lab.jaxutil import assert_default_precision, x64_enabled
from support.lab.modes import N, P, binomial_ok
from support.lab.perturb import python_floats_become
from support.harness import device_marks


class _Setting:
    """A process-wide library setting seen as a one-key mapping, so that a control's
    ``MonkeyPatch.setitem`` puts the old value back after the test."""

    def __init__(self, read, write):
        self.read, self.write = read, write

    def get(self, key, default=None):
        return self.read()

    def __setitem__(self, key, value):
        self.write(value)


@pytest.mark.claim("DTYPE-01")
@pytest.mark.parametrize("framework", ["torch", "jax", "numpy"])
def test_default_float_dtypes(claim, framework):
    dtype = {"torch": lambda: torch.tensor(1.0).dtype, "jax": lambda: jnp.array(1.0).dtype,
             "numpy": lambda: np.array(1.0).dtype}[framework]()
    name = str(dtype).replace("torch.", "")
    claim.check("default_dtype", name)
    # JAX's default is the process's x64 setting: say so when it is not JAX's own default
    assert name == claim.figure("default_dtype").stated, \
        "JAX x64 is on in this process" if framework == "jax" and x64_enabled() else name


@control("DTYPE-01", what="every default flipped: torch.tensor and jnp.array (64-bit JAX) make "
                          "a Python float float64, np.array makes it float32")
def default_float_dtypes_flipped(mp):
    mp.setattr(torch, "tensor", python_floats_become(torch.tensor, torch.float64))
    mp.setattr(np, "array", python_floats_become(np.array, np.float32))
    mp.setitem(_Setting(lambda: jax.config.jax_enable_x64,
                        lambda on: jax.config.update("jax_enable_x64", on)),
               "jax_enable_x64", True)


@pytest.mark.claim("DTYPE-05")
@device_marks.needs("mps")
def test_mps_refuses_float64(claim):
    # the control: float32 moves fine, so the error is about the dtype, not the device
    assert torch.ones(3).to("mps").dtype == torch.float32
    with pytest.raises((TypeError, RuntimeError)) as err:
        torch.ones(3, dtype=torch.float64).to("mps")
    # "raises an error": the kind is the sentence; its wording the notes do not quote
    claim.record("error moving float64 to mps", f"{type(err.value).__name__}: {err.value}"[:200])


@control("DTYPE-05", what="MPS takes a float64 tensor without an error, storing it as float32")
def mps_stores_float64_as_float32(mp):
    to = torch.Tensor.to

    def to_float32_on_mps(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if self.dtype == torch.float64 and isinstance(target, (str, torch.device)) \
                and torch.device(target).type == "mps":
            return to(self.float(), *args, **kwargs)
        return to(self, *args, **kwargs)
    mp.setattr(torch.Tensor, "to", to_float32_on_mps)


@pytest.mark.claim("DTYPE-13")
@pytest.mark.parametrize("request_kind", ["zeros", "array", "asarray"])
def test_float64_requests_are_truncated_with_a_warning(claim, request_kind):
    """The table's float64 row, "on request": JAX's cell is a request made explicitly
    (dtype=jnp.float64), through each of the calls that take one. An implicit conversion, a
    float64 NumPy array given to jnp.asarray with no dtype, is no request: it is DTYPE-09's
    silent truncation."""
    assert_default_precision()
    make = {"zeros": lambda: jnp.zeros(3, dtype=jnp.float64),
            "array": lambda: jnp.array([1.0, 2.0], dtype=jnp.float64),
            "asarray": lambda: jnp.asarray(np.zeros(3), dtype=jnp.float64)}[request_kind]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = make()
    claim.check('dtype', str(a.dtype))
    claim.check('warnings', len(caught))
    claim.record("warning", [str(w.message)[:160] for w in caught])
    assert a.dtype == jnp.float32


@control("DTYPE-10", "DTYPE-13", what="JAX truncates explicit float64 requests to float32 "
                                      "silently, with no warning")
def float64_requests_truncated_silently(mp):
    for name in ("array", "zeros", "asarray"):
        def quiet(*args, _real=getattr(jnp, name), **kwargs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return _real(*args, **kwargs)
        mp.setattr(jnp, name, quiet)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("MODE-09")
@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_jax_layers_take_train_or_eval_behaviour_as_an_argument(claim, api):
    """Lecture, "Side by side" (L:231-235): train or eval behaviour is model.train()/model.eval()
    in PyTorch and "an explicit argument, such as deterministic=True" in JAX. JAX itself has
    no layers; its layer library is flax, whose two APIs are the variants."""
    try:
        import flax
    except ImportError:
        pytest.skip("flax is not installed: JAX's dropout layers live in flax "
                    "(pip install -e '.[frameworks]')")
    import jax
    import jax.numpy as jnp
    claim.record("flax", flax.__version__)
    x = jnp.ones((N,))
    if api == "linen":
        from flax import linen
        layer = linen.Dropout(rate=P)
        variables = layer.init({"dropout": jax.random.key(0)}, x, deterministic=True)
        kept = layer.apply(variables, x, deterministic=True)
        dropped = layer.apply(variables, x, deterministic=False,
                              rngs={"dropout": jax.random.key(1)})
        module = linen.Module
    else:
        from flax import nnx
        layer = nnx.Dropout(P, rngs=nnx.Rngs(0))
        kept = layer(x, deterministic=True)
        dropped = layer(x, deterministic=False)
        module = nnx.Module
    dropped_share = float(jnp.mean(dropped == 0))
    claim.record("zero fraction, deterministic=True", float(jnp.mean(kept == 0)))
    claim.record("zero fraction, deterministic=False", dropped_share)
    # the argument is the switch: the same layer object, both behaviours, per call
    assert bool(jnp.all(kept == x)), "deterministic=True did not pass the input through"
    assert binomial_ok(dropped_share), f"deterministic=False dropped {dropped_share:.3f}, not ~{P}"
    modes = [m for m in ("train", "eval") if callable(getattr(module, m, None))]
    claim.record("mode methods of the Module class", modes)
    if modes:
        # what such a method does: it sets the argument on the layer, which then keeps it
        layer.eval()
        claim.record("deterministic after layer.eval()", bool(layer.deterministic))
        claim.record("zero fraction after layer.eval(), no argument",
                     float(jnp.mean(layer(x) == 0)))
    claim.check("no train/eval mode on the Module class", not modes,
                note=f"flax {api}: Module.{'()/'.join(modes)}() sets deterministic (and "
                     "use_running_average) on every submodule, as model.eval() does in "
                     "PyTorch" if modes else "")


@control("MODE-09", what="JAX's dropout keeps every unit even with deterministic=False (its "
                         "random mask is all ones): the argument switches nothing")
def dropout_mask_keeps_everything(mp):
    import jax
    mp.setattr(jax.random, "bernoulli", lambda key, p=0.5, shape=None, **kwargs:
               jax.numpy.ones(shape if shape is not None else (), dtype=bool))


@control("MODE-09", expect="holds",
         what="flax.nnx.Module has no train() or eval() methods (as linen.Module has none), so "
              "deterministic=True passed per call is the only switch in either API")
def nnx_module_without_train_and_eval(mp):
    from flax import nnx
    for name in ("train", "eval"):
        mp.delattr(nnx.Module, name)


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
