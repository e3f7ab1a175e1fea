"""Lecture, "The dtype trap, measured" (L:277-294).

"torch.tensor(3.14) gives you a float32 tensor, and torch.tensor(np.float64(3.14)) gives you
float64." "When a float32 tensor meets a float64 one, the result is float64." "PyTorch
disagreed at 7.5e-8 ... Every tensor in the calculation reported float64." "The relative error
that produced was 1.25e-7, which is float32 epsilon to two figures." "jnp.asarray(np.ones(3))
returns float32 with no warning at all. JAX warns only when you explicitly ask for
dtype=jnp.float64." Protocol §5: the careless branch passes c and y as Python floats.

JAX's x64 flag is process-global: the claims about its default (here DTYPE-09/10) assert it is
off, the claims that need it use ``support.lab.jaxutil.x64()``, and
``test_x64_does_not_leak_between_tests_in_either_order`` runs both groups in both orders.
"""
import contextlib
import getpass
import math
import os
import tempfile
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from support.rules.controls import control
from support.lab import toy
from support.lab.jaxutil import assert_default_precision, run_fresh_python, x64_enabled
from support.lab.nested import D_IN, NestedNet, nested_model
from support.lab.perturb import python_floats_become
from support.lab.toy import careless_errors
from support.harness import device_marks

EPS64 = float(np.finfo(np.float64).eps)


def _float32_eps() -> float:
    """float32's epsilon as torch's float32 arithmetic shows it: the smallest power of two
    that still changes 1.0 when added to it (1 + eps/2 rounds back to 1)."""
    one, eps = torch.ones((), dtype=torch.float32), 1.0
    while (one + eps / 2).item() != 1.0:
        eps /= 2
    return eps


X64_IGNORED = """import jax
_update = jax.config.update
jax.config.update = lambda name, value: None if name == "jax_enable_x64" else _update(name, value)
"""


@pytest.mark.claim("DTYPE-02")
def test_python_float_gives_float32_numpy_float64_gives_float64(claim):
    a, b = torch.tensor(3.14), torch.tensor(np.float64(3.14))
    claim.check('torch.tensor(3.14)', str(a.dtype))
    claim.check('torch.tensor(np.float64(3.14))', str(b.dtype))
    assert a.dtype == torch.float32 and b.dtype == torch.float64


@control("DTYPE-02", "DTYPE-07", "DTYPE-08", "DTYPE-14",
         what="torch.tensor stores a Python float as float64, as NumPy does, so no float32 "
              "scalar hides in the calculation")
def torch_tensor_keeps_python_floats_float64(mp):
    mp.setattr(torch, "tensor", python_floats_become(torch.tensor, torch.float64))


@pytest.mark.claim("DTYPE-03")
@pytest.mark.parametrize("case", ["both_dimensioned", "both_0d", "dimensioned_f32_with_0d_f64"])
def test_float32_meeting_float64_gives_float64(claim, case):
    f32 = torch.ones(3) if case != "both_0d" else torch.tensor(1.0)
    f64 = {"both_dimensioned": torch.ones(3, dtype=torch.float64),
           "both_0d": torch.tensor(1.0, dtype=torch.float64),
           "dimensioned_f32_with_0d_f64": torch.tensor(1.0, dtype=torch.float64)}[case]
    out = (f32 + f64).dtype
    claim.check('result_dtype', str(out))
    claim.check("float64 wins", out == torch.float64)


@control("DTYPE-03", "DTYPE-07", what="when a float32 tensor meets a float64 one in + or -, the "
                                      "result is float32 (the lower precision wins)")
def float32_wins_over_float64(mp):
    def lower(a, b):
        if isinstance(b, torch.Tensor) and a.is_floating_point() and b.is_floating_point() \
                and a.dtype != b.dtype:
            low = min(a.dtype, b.dtype, key=lambda d: torch.finfo(d).bits)
            return a.to(low), b.to(low)
        return a, b
    for name in ("__add__", "__radd__", "__sub__", "__rsub__"):
        mp.setattr(torch.Tensor, name, lambda self, other, _real=getattr(torch.Tensor, name):
                   _real(*lower(self, other)))


@control("DTYPE-03", expect="holds",
         what="torch's type promotion decides by dtype alone, as NumPy 2 does for 0-d arrays "
              "(NEP 50): a 0-dim float64 tensor raises a dimensioned float32 one to float64 in "
              "+ and -, so float64 wins whatever the dimensions")
def promotion_by_dtype_alone(mp):
    def promoted(a, b):
        if isinstance(b, torch.Tensor) and a.is_floating_point() and b.is_floating_point() \
                and a.dtype != b.dtype:
            wide = torch.promote_types(a.dtype, b.dtype)
            return a.to(wide), b.to(wide)
        return a, b
    for name in ("__add__", "__radd__", "__sub__", "__rsub__"):
        mp.setattr(torch.Tensor, name, lambda self, other, _real=getattr(torch.Tensor, name):
                   _real(*promoted(self, other)))


def _floating(model: torch.nn.Module) -> dict[str, str]:
    """The dtype of each floating-point parameter and buffer of ``model``, by name."""
    return {n: str(t.dtype) for n, t in (*model.named_parameters(), *model.named_buffers())
            if t.is_floating_point()}


@pytest.mark.claim("DTYPE-04")
@pytest.mark.parametrize("how", ["dtype_argument", "double_tensor", "double_model",
                                 "set_default_dtype"])
@pytest.mark.parametrize("device", device_marks.params("cpu", "cuda"))
def test_pytorch_supports_float64_on_cpu_and_cuda(claim, how, device):
    """"It supports float64 fully on the CPU and on CUDA GPUs: pass dtype=torch.float64, call
    .double() on a tensor or a model, or call torch.set_default_dtype(torch.float64) once":
    each way, on each device. A model is the realistic nested one, whose batch norms and stage
    keep floating-point buffers beside its parameters (a bare nn.Linear has none)."""
    if how == "dtype_argument":
        dt = torch.zeros(2, dtype=torch.float64, device=device).dtype
    elif how == "double_tensor":
        dt = torch.zeros(2, device=device).double().dtype
    elif how == "double_model":
        model = nested_model().double().to(device)
        held = _floating(model)
        kinds = sorted(set(held.values()))
        claim.record("floating parameters and buffers", len(held))
        claim.record("dtypes of the model's floating tensors", kinds)
        claim.record("left in another dtype", [n for n, d in held.items() if d != "torch.float64"])
        dt = kinds[0] if len(kinds) == 1 else f"mixed: {', '.join(kinds)}"
        if kinds == ["torch.float64"]:
            # full support: the model runs in float64 (train mode reads and moves its buffers)
            out = model(torch.randn(16, D_IN, dtype=torch.float64, device=device))
            assert out.dtype == torch.float64
    else:
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            kinds = sorted(set(_floating(NestedNet().to(device)).values()))
            claim.record("dtypes of a new model's floating tensors", kinds)
            assert kinds == ["torch.float64"], kinds
            dt = torch.tensor(1.0, device=device).dtype
        finally:
            torch.set_default_dtype(old)
    claim.check('dtype', str(dt))
    # full support: float64 arithmetic is float64-accurate, on the device
    assert (torch.tensor(1.0, dtype=torch.float64, device=device) + 1e-12).item() != 1.0


@control("DTYPE-04", what="nn.Module.double() casts a model's parameters and leaves its buffers "
                          "(batch norm's running statistics, a stage's gain) in float32")
def double_casts_parameters_only(mp):
    # the sentence's own scale, 'a model': a bare nn.Linear has no buffers and cannot show it
    def double(self):
        for p in self.parameters():
            p.data = p.data.double()
        return self
    mp.setattr(torch.nn.Module, "double", double)


@control("DTYPE-04", "DTYPE-08", what="PyTorch adds float64 tensors in float32 and casts the "
                                      "result back: float64 in name only")
def float64_added_in_float32(mp):
    real = torch.Tensor.__add__

    def add(self, other):
        if self.dtype != torch.float64:
            return real(self, other)
        low = other.float() if isinstance(other, torch.Tensor) else other
        return real(self.float(), low).double()
    mp.setattr(torch.Tensor, "__add__", add)


@pytest.mark.claim("DTYPE-06")
@pytest.mark.parametrize("figure", ["absolute", "relative", "fixed"])
def test_two_float32_scalars_cost_7_5e_8(claim, net, figure):
    # the entry's bounds hold the careless errors to float32's fingerprint and the fixed one
    # to float64's; the printed figures decide drift
    abs_err, rel = careless_errors(net)
    hand = toy.hand_gradient(net.params, net.x, net.y)
    if figure == "absolute":
        claim.check("careless_abs_error", abs_err)
        # "7.5e-8, eight orders of magnitude worse than it should be": than the machine
        # precision JAX reached on the same gradient ("JAX did")
        jax_err = toy.max_abs_diff(toy.jax_gradient(net), hand)
        claim.check("orders worse than machine precision", float(np.log10(abs_err / jax_err)),
                    note=f"log10(careless {abs_err:.3g} / JAX against the hand gradient "
                         f"{jax_err:.3g})")
        fixed = toy.max_abs_diff(toy.torch_gradient(net), hand)
        claim.record("orders worse than float64 epsilon", float(np.log10(abs_err / EPS64)))
        claim.record("orders worse than the fixed float64 run", float(np.log10(abs_err / fixed)),
                     note="the comparison the notes' own 7.5e-8 and 1.7e-18 make")
    elif figure == "relative":
        claim.check("careless_rel_error", rel,
                    note="protocol §5: no code prints 1.25e-7; every element errs by the "
                         "same relative amount, inflated by the loss's small residual")
        # "..., which is float32 epsilon to two figures": the clause about this figure
        claim.record("careless_rel_error in float32 eps", rel / _float32_eps())
    else:
        claim.check("fixed_abs_error", toy.max_abs_diff(toy.torch_gradient(net), hand))
        claim.record("fixed_abs_error, torch's W x summed by halving",
                     toy.max_abs_diff(toy.torch_gradient(net, sums="halving"), hand),
                     note="NumPy's order on this machine (AD-13): the notes' 1.7e-18")


@control("DTYPE-06", what="torch.tensor stores a Python float as float16, not float32: its 11 "
                          "significant bits against float32's 24 round the two careless "
                          "scalars up to 2^13 times as coarsely, orders of magnitude outside "
                          "the entry's band around 7.5e-8")
def python_floats_stored_as_float16(mp):
    mp.setattr(torch, "tensor", python_floats_become(torch.tensor, torch.float16))


@pytest.mark.claim("DTYPE-07")
def test_every_downstream_tensor_reports_float64(claim, net):
    loss, lv = toy.torch_loss(net, careless=True)
    z = lv["W"] @ lv["x"] + lv["b"]
    yhat = lv["v"] @ torch.tanh(z) + lv["c"]
    claim.check('loss_dtype', str(loss.dtype))
    claim.record("hidden_scalars", [str(lv["c"].dtype), str(lv["y"].dtype)])
    assert loss.dtype == yhat.dtype == z.dtype == torch.float64
    assert lv["c"].dtype == lv["y"].dtype == torch.float32    # where the precision went


@pytest.mark.claim("DTYPE-08")
def test_a_discrepancy_near_1e_7_is_float32s_fingerprint(claim, net):
    abs_err, rel = careless_errors(net)
    hand = toy.hand_gradient(net.params, net.x, net.y)
    claim.check("careless discrepancy", abs_err,
                note="the careless gradient's largest difference from the hand gradient")
    claim.check("fixed discrepancy", toy.max_abs_diff(toy.torch_gradient(net), hand),
                note="the same gradient with the two scalars float64")
    claim.record("float32_eps", _float32_eps(), note="the spacing of torch's float32 at 1.0: "
                 "an IEEE constant, recorded, not graded")
    claim.record("careless relative error", rel, note="DTYPE-06's figure, decided there")
    claim.record("largest |hand gradient|", max(float(np.max(np.abs(g))) for g in hand.values()),
                 note="the scale of the values the discrepancy is measured on")


@control("DTYPE-08", what="torch.tensor stores a Python float rounded to 22 significant bits, "
                          "two fewer than float32's 24: the careless scalars round four times "
                          "as coarsely, past the factor 3 that 'near 1e-7' allows")
def python_floats_rounded_to_22_bits(mp):
    # the sentence's own scale: float32's rounding made 4 times coarser (2^2), where a factor
    # 3 either way is what 'near' allows
    real = torch.tensor

    def tensor(data, *args, dtype=None, **kwargs):
        if dtype is None and isinstance(data, float) and data != 0:
            m, e = math.frexp(data)
            data = math.ldexp(round(m * 2 ** 22) / 2 ** 22, e)
        return real(data, *args, dtype=dtype, **kwargs)
    mp.setattr(torch, "tensor", tensor)


@pytest.mark.claim("DTYPE-09")
def test_jax_converts_float64_numpy_to_float32_silently(claim):
    assert_default_precision()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = jnp.asarray(np.ones(3))
    claim.check('dtype', str(a.dtype))
    claim.check('warnings', len(caught))
    assert a.dtype == jnp.float32 and not caught


@control("DTYPE-09", "DTYPE-15", what="jnp.asarray warns whenever it truncates float64 input to "
                                      "float32, as an explicit float64 request does")
def asarray_warns_when_it_truncates(mp):
    real = jnp.asarray

    def asarray(a, *args, **kwargs):
        if getattr(a, "dtype", None) == np.float64 and not x64_enabled():
            warnings.warn("float64 input truncated to float32", UserWarning, stacklevel=2)
        return real(a, *args, **kwargs)
    mp.setattr(jnp, "asarray", asarray)


@pytest.mark.claim("DTYPE-10")
def test_jax_warns_only_for_explicit_float64_and_truncates(claim):
    assert_default_precision()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = jnp.array([1.0, 2.0], dtype=jnp.float64)
    msgs = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    claim.check('dtype', str(a.dtype))
    claim.record("warning", msgs[0] if msgs else "")
    assert a.dtype == jnp.float32
    # "JAX warns": one warning from the call (its wording the notes do not quote)
    assert len(msgs) == 1


@pytest.mark.claim("DTYPE-11")
def test_enabling_x64_at_program_start_gives_float64(claim):
    code = ("import jax, numpy as np\n"
            "import jax.numpy as jnp\n"
            "before = jnp.asarray(np.ones(3))\n"
            "jax.config.update('jax_enable_x64', True)\n"
            "after = jnp.asarray(np.ones(3))\n"
            "print(before.dtype, after.dtype, before.dtype)\n")
    r = run_fresh_python(code)
    assert r.returncode == 0, r.stderr[-2000:]
    before, after, before_again = r.stdout.split()
    claim.check('after_update', after)
    claim.record("array_made_before_update", before_again)
    assert after == "float64"
    # "decide it before creating arrays": what was made before stays float32
    assert before == before_again == "float32"


@control("DTYPE-11", what="in a fresh interpreter, jax.config.update('jax_enable_x64', True) "
                          "is ignored: 64-bit types stay off")
def x64_update_ignored_in_a_fresh_interpreter(mp):
    # a sitecustomize on PYTHONPATH: the fresh interpreter runs it before the claim's code
    where = Path(tempfile.gettempdir()) / f"lecture11-control-x64-{getpass.getuser()}"
    where.mkdir(exist_ok=True)
    (where / "sitecustomize.py").write_text(X64_IGNORED)
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(where),
                                                           os.environ.get("PYTHONPATH")])))


@pytest.mark.claim("DTYPE-12")
@pytest.mark.parametrize("mode", ["x64_on", "x64_off"])
def test_jax_agrees_to_4_4e_16_only_with_x64(claim, net, mode):
    hand = toy.hand_gradient(net.params, net.x, net.y)
    err = toy.max_abs_diff(toy.jax_gradient(net, x64=(mode == "x64_on")), hand)
    claim.check('jax_vs_hand', err, note="" if mode == "x64_on" else "x64 off: float32 arithmetic")


@control("DTYPE-12", what="jax.enable_x64 does nothing: the x64 branch computes in float32")
def enable_x64_does_nothing(mp):
    mp.setattr(jax, "enable_x64", lambda enabled=True: contextlib.nullcontext())


@control("DTYPE-12", what="JAX computes in 64 bits whatever is asked: the x64-off branch agrees "
                          "to float64 precision too")
def x64_always_on(mp):
    real = jax.enable_x64
    mp.setattr(jax, "enable_x64", lambda enabled=True: real(True))
