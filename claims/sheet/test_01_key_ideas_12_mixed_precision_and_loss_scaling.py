"""Summary sheet, "Key ideas", "Mixed precision and loss scaling" (S:20).

"in float16, gradients below about 6e-8 flush to zero and their updates are lost" (AMP-01).
"Multiplying the loss by a factor S multiplies every gradient by S" (AMP-02), "which lifts them
into range" (AMP-03); "the gradients are divided by S again before the optimizer step, so the
learning rate is unchanged" (AMP-04). "An S that is too large makes gradients overflow
(float16's maximum is 65504), and the scaler then lowers S" (AMP-05). "PyTorch's float16 recipe
pairs autocasting with a GradScaler" (AMP-06), "while its bfloat16 mixed precision (e.g. on
CPU) uses autocasting alone" (AMP-07); "bfloat16 keeps float32's 8 exponent bits and hence its
range" (AMP-08 in torch, DTYPE-16 with JAX's exponent bits). The Formulas line "Loss scaling:
grad(S * L) = S * grad(L), so the unscaled step is theta <- theta - eta * (1/S) grad(S * L)"
(S:26) is AMP-02's and AMP-04's too; the lecture's "In PyTorch that is torch.autocast, plus a
GradScaler for float16" (L:495) is AMP-06's.

The float16 parts run on the CPU in float16 arithmetic; `torch.amp.GradScaler("cpu")` is used
where this torch has it (otherwise not-applicable). AMP-06's CUDA half runs in the gpu tier and
skips without a card. AMP-02 is a Hypothesis property: a power of two scales every gradient exactly, any
other S up to the float32 error model (support/rules/error_models.py).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn

from support.rules.controls import control
from support.lab.precision import (
    BF16,
    F16,
    cpu_grad_scaler,
    float16_underflow_grad,
    scaler_vs_plain,
)
from support.harness import device_marks
from support.rules import error_models, tolerances


def _grads(seed: int, scale: float) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    (F.mse_loss(model(x), y) * scale).backward()
    return [p.grad.clone() for p in model.parameters()]


def _backward_magnitudes(seed: int) -> list[torch.Tensor]:
    """For each gradient of ``_grads(seed, 1)``, the size rounding acts on (float64): the
    same backward with every factor replaced by its absolute value. A weight gradient is a
    sum over the 16 rows whose terms may cancel, so its rounding is relative to this, not
    to the gradient (support/rules/error_models.py)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torch.no_grad():
        h = model[1](model[0](x)).double()
        r = model(x).double() - y.double()
        w2 = model[2].weight.double()
    g_out = 2.0 * r.abs() / r.numel()                     # |dL/dpred|, (16, 1)
    g_z = (g_out @ w2.abs()) * (1.0 - h * h).abs()        # through W2 and tanh, (16, 8)
    return [g_z.T @ x.double().abs(), g_z.sum(0), g_out.T @ h.abs(), g_out.sum(0)]


def _train_float16_recipe(device, scaler, steps: int = 100):
    """The float16 recipe: autocast to float16 for the forward pass, the loss scaled before
    backward(), the step and the scale's update through the scaler."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    x = torch.randn(1024, 8, device=device)
    y = x @ torch.randn(8, 1, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, scaled = [], []
    for _ in range(steps):
        with torch.autocast(str(device).split(":")[0], dtype=F16):
            pred = model(x)
            loss = F.mse_loss(pred.float(), y)
        opt.zero_grad()
        big = scaler.scale(loss)
        scaled.append(float(big / loss))
        big.backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return pred, losses, scaled


# ------------------------------------------------------------------ float16's small end
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-01")
def test_float16_flushes_tiny_gradients_to_zero_and_loses_their_update(claim):
    # every float32 within 2^16 ulps of float16's rounding boundary 2^-25, and 10^5 values
    # spread log-uniformly over 1e-10..1e-6, cast to float16
    edge = np.float32(2.0 ** -25).view(np.int32)
    window = np.arange(edge - 2**16, edge + 2**16, dtype=np.int32).view(np.float32)
    spread = np.exp(np.random.default_rng(0).uniform(np.log(1e-10), np.log(1e-6), 10**5))
    x = torch.from_numpy(np.concatenate([window, spread.astype(np.float32)]))
    y = x.to(F16).float()
    n_flushed, n_kept = int((y == 0).sum()), int((y > 0).sum())
    claim.record("values_flushed_and_kept", [n_flushed, n_kept],
                 note=f"of {len(x)} from 1e-10 to 1e-6")
    # some of these values must flush and some survive, or there is no threshold among them
    assert n_flushed and n_kept, \
        f"float16 flushed {n_flushed} and kept {n_kept} of {len(x)} values"
    largest_flushed = x[y == 0].max().item()
    smallest_kept = x[y > 0].min().item()
    subnormal = float(np.finfo(np.float16).smallest_subnormal)
    claim.check('flush_to_zero_threshold', largest_flushed, note='the largest float32 that becomes 0 in float16 (= 2^-25, a tie to even)')
    claim.record("smallest_value_kept", smallest_kept)
    claim.record("smallest_subnormal", subnormal, note="2^-24 = 5.96e-8: the notes' '6e-8'")
    claim.record("smallest_normal", torch.finfo(F16).smallest_normal,
                 note="below 6.1e-5 float16 has fewer than 11 significant bits")
    between = {v: torch.tensor(v).to(F16).item() for v in (3.5e-8, 5e-8, 5.9e-8)}
    claim.record("values_between_3e-8_and_6e-8_become", sorted(set(between.values())),
                 note="rounded UP to the smallest subnormal, not flushed")

    # "their updates are lost": a float32 master weight stepped with the float16 gradient
    def step(g: float) -> float:
        w = torch.tensor(0.0)
        w -= 1.0 * torch.tensor(g).to(F16).float()
        return w.item()
    lost, kept = step(2e-8), step(1e-7)
    claim.record("update_from_2e-8_gradient", lost)
    claim.record("threshold is 2^-25", largest_flushed == 2.0 ** -25,
                 note="round to nearest, ties to even: 2^-25 itself rounds down to 0")
    # one threshold: everything at or below it flushes, everything above survives (its value
    # against the notes' 6e-8 is the figure's: its stated value and its bounds)
    assert smallest_kept > largest_flushed
    claim.check("one threshold: at or below it 0, above it kept",
                bool((y[x <= largest_flushed] == 0).all() and (y[x > largest_flushed] > 0).all()))
    claim.check("a 2e-8 gradient's update is lost", lost == 0.0)
    claim.check("a 1e-7 gradient's update is kept", kept != 0.0)


@control("AMP-01", what="float16 flushes every subnormal to zero (as hardware in flush-to-zero "
                        "mode does): gradients below float16's smallest normal, 2^-14, far above "
                        "the notes' 6e-8, become 0")
def float16_flushes_subnormals(mp):
    to = torch.Tensor.to

    def flushing(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if out.dtype == F16 and self.dtype != F16:
            out = torch.where(out.abs() < torch.finfo(F16).smallest_normal,
                              torch.zeros_like(out), out)
        return out
    mp.setattr(torch.Tensor, "to", flushing)


@control("AMP-01", expect="holds",
         what="the cast to float16 rounds toward zero instead of to nearest: every float32 "
              "below the smallest subnormal 2^-24 (the notes' 6e-8) becomes 0, so gradients below "
              "about 6e-8 flush to zero and their updates are lost")
def float16_cast_rounds_toward_zero(mp):
    to = torch.Tensor.to

    def truncating(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if out.dtype == F16 and self.dtype != F16 and self.is_floating_point():
            # rounded to nearest away from zero: step one float16 back toward it
            up = to(out, self.dtype).abs() > self.abs()
            out = torch.where(up, torch.nextafter(out, torch.zeros_like(out)), out)
        return out
    mp.setattr(torch.Tensor, "to", truncating)


# ------------------------------------------------------------------ scaling the loss
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), k=st.integers(-12, 20))
def test_scaling_the_loss_by_a_power_of_two_scales_every_gradient_exactly(claim, seed, k):
    s = 2.0 ** k
    g, gs = _grads(seed, 1.0), _grads(seed, s)
    mismatches = sum(int((b != s * a).sum()) for a, b in zip(g, gs))
    unscaled_equal = all(torch.equal(b / s, a) for a, b in zip(g, gs))
    # a power of two is exact in binary: not one element may differ (the entry's bound 0)
    claim.check("elements_where_grad_SL_differs_from_S_grad_L", mismatches, reduce="max",
                note=f"S = 2^{k}", halt=True)
    # unscaled, the gradients are bitwise those of the unscaled loss: any optimizer step
    # taken from them is the unscaled-loss step
    assert unscaled_equal


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), s=st.floats(1.0, 1e4))
@example(seed=16493, s=7278.625)     # just past the old tolerance (1e-5 of the largest entry)
@example(seed=0, s=3.0)
def test_scaling_the_loss_by_any_factor_scales_the_gradients_up_to_rounding(claim, seed, s):
    g, gs = _grads(seed, 1.0), _grads(seed, s)
    model = error_models.model("amp02:scaled-backward")
    # every element against the float32 error model: two backward passes, each within
    # gamma_24 of S times the backward's magnitude (a batch of 16 rows)
    errors = [(b.double() - (s * a).double()).abs() for a, b in zip(g, gs)]
    mags = _backward_magnitudes(seed)
    share = max(model.share(e, s * m, n=16) for e, m in zip(errors, mags))
    worst = max(float(e.max()) / s for e in errors)
    claim.check("share_of_rounding_bound", share, reduce="max",
                note=model.describe(16), halt=True)
    claim.record("worst_abs_diff_over_S", worst, reduce="max")
    claim.record("worst_rel_diff_to_largest_entry",
                 max(float(e.max() / (s * a).abs().max()) for e, a in zip(errors, g)),
                 reduce="max", note="the old measure (relative to each tensor's largest entry)")


@control("AMP-02", "AMP-03", "AMP-09",
         what="multiplying a loss by a number S scales its value but not its gradient: "
              "backward() passes the unscaled gradient through loss * S")
def scaling_leaves_the_gradient_alone(mp):
    mul = torch.Tensor.__mul__

    def value_only(self, other):
        if self.requires_grad and isinstance(other, (int, float)) \
                and not isinstance(other, bool):
            return mul(self.detach(), other) + (self - self.detach())
        return mul(self, other)
    mp.setattr(torch.Tensor, "__mul__", value_only)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-03")
def test_scaling_lifts_a_gradient_that_underflows_in_float16(claim):
    exact = (torch.tensor(1e-4, dtype=F16).double() ** 2).item()   # product of the fp16 values
    raw, _ = float16_underflow_grad(1.0)
    scaled, recovered = float16_underflow_grad(2.0 ** 15)
    rel = abs(recovered - exact) / exact
    claim.check('unscaled_float16_gradient', raw)
    claim.record("gradient_with_S_2^15", scaled)
    claim.record("recovered_after_dividing_by_S", recovered)
    claim.check('relative_error', rel)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-04")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("model", ["small", "nested"], ids=lambda m: f"model={m}")
def test_unscaled_step_equals_the_unscaled_loss_step(claim, optimizer, model):
    """A small network of one parameter group, and the realistic nested model in three
    groups (decay, no decay, the head at its own lr): 'the optimizer' as recipes build it."""
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
            "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2)}[optimizer]
    r = scaler_vs_plain(claim, make, which=model)
    pairs = list(zip(r["weights_scaler"], r["weights_plain"]))
    # "unchanged" up to float32's rounding of an elementwise step, from the one table
    tol = tolerances.resolve("float32:elementwise")
    claim.check("scaler step is the plain step, within float32:elementwise",
                all(torch.allclose(a, b, rtol=tol.rtol, atol=tol.atol) for a, b in pairs),
                note=tol.describe())
    claim.record("max weight gap, scaler step vs plain step",
                 max((a - b).abs().max().item() for a, b in pairs))
    claim.record("step_with_scaler_bitwise_plain_step",
                 all(torch.equal(a, b) for a, b in pairs))
    move = lambda w: sum((a - s).abs().sum().item() for a, s in zip(w, r["start"]))  # noqa: E731
    ratio = move(r["weights_not_unscaled"]) / move(r["weights_plain"])
    claim.record("step_ratio_if_not_unscaled", ratio,
                 note="SGD: S times the step; Adam: ~1 (Adam is scale-invariant up to eps)")
    if optimizer == "sgd":
        assert ratio == pytest.approx(2.0 ** 10, rel=1e-4)


@control("AMP-04", what="GradScaler.unscale_ divides the gradients of the optimizer's first "
                        "parameter group only: the other groups step on gradients S times too "
                        "large")
def unscale_reaches_the_first_group_only(mp):
    # the sentence's own scale, 'the optimizer' as recipes build it: one group cannot show it
    import importlib
    scaler = importlib.import_module("torch.amp").GradScaler
    real = scaler.unscale_

    def unscale_(self, optimizer):
        groups = optimizer.param_groups
        optimizer.param_groups = groups[:1]
        try:
            return real(self, optimizer)
        finally:
            optimizer.param_groups = groups
    mp.setattr(scaler, "unscale_", unscale_)


# ------------------------------------------------------------------ float16's large end
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-05")
def test_float16_max_is_65504_and_the_scaler_skips_the_step_and_lowers_s_on_overflow(claim):
    fmax = torch.finfo(F16).max
    claim.check('float16_max', fmax)
    scaler = cpu_grad_scaler(claim, init_scale=2.0 ** 16, growth_interval=3)
    w = nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    history = []
    for _ in range(5):
        opt.zero_grad()
        loss = (w.to(F16) * torch.tensor([1.0], dtype=F16)).sum()   # float16 loss
        before = w.item()
        scaler.scale(loss).backward()       # d(S*loss)/d(loss) = S, rounded to float16
        overflow = not torch.isfinite(w.grad).all().item()
        scaler.step(opt)
        scaler.update()
        history.append((overflow, w.item() != before, scaler.get_scale()))
    claim.record("steps_(overflow, stepped, scale_after)", history)
    assert torch.tensor(65504.0).to(F16).isfinite() and torch.tensor(65520.0).to(F16).isinf()
    # S = 65536 > 65504 overflows: the step is skipped and S halves
    assert history[0] == (True, False, 2.0 ** 15)
    # a run of 3 good steps (growth_interval) doubles S, which overflows again
    assert [h[:2] for h in history[1:4]] == [(False, True)] * 3 and history[3][2] == 2.0 ** 16
    assert history[4] == (True, False, 2.0 ** 15)


@control("AMP-05", what="the scaler keeps S when the gradients overflow (torch's scale "
                        "update backs off by a factor 1 instead of halving)")
def scale_kept_on_overflow(mp):
    update = torch._amp_update_scale_
    mp.setattr(torch, "_amp_update_scale_",
               lambda scale, tracker, found_inf, growth, backoff, interval: update(
                   scale, tracker, found_inf, growth, 1.0, interval))


# ------------------------------------------------------------------ the float16 recipe
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.fast
@pytest.mark.claim("AMP-06")
def test_float16_autocast_with_grad_scaler_trains_on_the_cpu(claim):
    """The CPU half of AMP-06: the same recipe, float16 autocast with torch.amp.GradScaler,
    on the CPU (the claim holds once its CUDA variant has run too)."""
    scaler = cpu_grad_scaler(claim)
    pred, losses, scaled = _train_float16_recipe(torch.device("cpu"), scaler)
    claim.check('prediction_dtype', str(pred.dtype))
    claim.record("loss_first_last", [losses[0], losses[-1]])
    claim.record("loss multiplied by, first and last step", [scaled[0], scaled[-1]])
    claim.record("final_scale", scaler.get_scale())
    assert all(np.isfinite(losses)) and losses[-1] < 0.1 * losses[0]
    # the scaler is in the loop: the loss backward() saw was the scaled one
    assert scaled[0] > 1


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.gpu
@device_marks.needs("cuda")
@pytest.mark.claim("AMP-06")
def test_float16_autocast_with_grad_scaler_trains_on_cuda(claim, cuda):
    dev = cuda
    model = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
    x = torch.randn(1024, 8, device=dev)
    y = x @ torch.randn(8, 1, device=dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    losses = []
    for _ in range(100):
        with torch.autocast("cuda", dtype=F16):
            pred = model(x)
            loss = F.mse_loss(pred.float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    claim.check('prediction_dtype', str(pred.dtype))
    claim.record("loss_first_last", [losses[0], losses[-1]])
    claim.record("final_scale", scaler.get_scale())
    assert all(np.isfinite(losses)) and losses[-1] < 0.1 * losses[0]


@control("AMP-06", "AMP-07", "AMP-10", moves=("prediction_dtype",),
         what="torch.autocast does nothing: the forward pass stays float32 whatever dtype "
              "it is given")
def autocast_does_nothing(mp):
    autocast = torch.autocast
    mp.setattr(torch, "autocast", lambda device_type, dtype=None, enabled=True, cache_enabled=None:
               autocast(device_type, dtype=dtype, enabled=False, cache_enabled=cache_enabled))


# ------------------------------------------------------------------ bfloat16
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-07")
def test_bfloat16_autocast_on_cpu_trains_without_a_scaler(claim):
    # torch.get_autocast_dtype(device) arrived in 2.4; older releases name it per device
    get = getattr(torch, "get_autocast_dtype", None)
    cpu_dtype = get("cpu") if get else torch.get_autocast_cpu_dtype()
    claim.check('cpu_autocast_dtype', str(cpu_dtype))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        with torch.autocast("cpu"):
            pred = model(x)
            loss = F.mse_loss(pred.float(), y)
        opt.zero_grad()
        loss.backward()     # no scaler anywhere
        opt.step()
        losses.append(loss.item())
    claim.check('matmul_dtype_under_autocast', str(pred.dtype))
    claim.record("loss_first_last", [losses[0], losses[-1]])
    # bfloat16's range: the gradient that float16 flushes survives without any scaling
    w = torch.tensor(1.0, requires_grad=True)
    a = torch.tensor(1e-4, dtype=BF16)
    ((w.to(BF16) * a) * a).backward()
    claim.record("bf16_gradient_of_1e-8", w.grad.item())
    assert pred.dtype == BF16 and all(p.dtype == torch.float32 for p in model.parameters())
    assert all(np.isfinite(losses)) and losses[-1] < 0.1 * losses[0]
    assert w.grad.item() == pytest.approx(1e-8, rel=1e-2)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-08")
def test_bfloat16_has_float32s_8_exponent_bits_and_range(claim):
    def exponent_bits(dtype):
        fi = torch.finfo(dtype)
        return fi.bits - 1 - round(-np.log2(fi.eps))   # sign + exponent + stored mantissa
    bf, f32 = torch.finfo(BF16), torch.finfo(torch.float32)
    claim.check('bfloat16_exponent_bits', exponent_bits(BF16))
    claim.check('float32_exponent_bits', exponent_bits(torch.float32))
    claim.record("float16_exponent_bits", exponent_bits(F16))
    claim.check('bfloat16_max_over_float32_max', bf.max / f32.max)
    claim.record('bfloat16_smallest_normal', bf.smallest_normal)
    assert exponent_bits(BF16) == exponent_bits(torch.float32) > exponent_bits(F16)
    assert bf.smallest_normal == f32.smallest_normal
    assert torch.tensor(1e38).to(BF16).isfinite() and torch.tensor(1e38).to(F16).isinf()


@control("AMP-08", what="torch's bfloat16 has float16's layout: 5 exponent bits, a maximum "
                        "of 65504, so a value near float32's maximum overflows")
def bfloat16_laid_out_as_float16(mp):
    finfo, to = torch.finfo, torch.Tensor.to
    mp.setattr(torch, "finfo", lambda dtype=None: finfo(F16 if dtype == BF16 else dtype)
               if dtype is not None else finfo())
    mp.setattr(torch.Tensor, "to", lambda self, *a, **k: to(to(self, F16), BF16)
               if a and isinstance(a[0], torch.dtype) and a[0] == BF16 else to(self, *a, **k))


@pytest.mark.claim("DTYPE-16")
def test_bfloat16_keeps_float32_exponent_and_range(claim):
    bf, f32, f16 = torch.finfo(torch.bfloat16), torch.finfo(torch.float32), torch.finfo(torch.float16)
    nexp = int(jnp.finfo(jnp.bfloat16).nexp)
    claim.check('bfloat16_exponent_bits', nexp)
    claim.record('bfloat16_max', bf.max)
    claim.check('float16_max', f16.max)               # contrast: float16's 5 bits give no such range
    claim.check("bfloat16_max_over_float32_max", bf.max / f32.max)
    assert nexp == int(jnp.finfo(jnp.float32).nexp)
    assert bf.smallest_normal == f32.smallest_normal


@control("DTYPE-16", what="bfloat16 is float16 in both frameworks: 5 exponent bits and a "
                          "maximum of 65504")
def bfloat16_is_float16(mp):
    mp.setattr(torch, "bfloat16", torch.float16)
    mp.setattr(jnp, "bfloat16", jnp.float16)
