"""Sheet, "Key ideas" and "Common pitfalls": mixed precision and loss scaling (S:20, S:60);
lecture, "Devices, and when a GPU helps" (L:495).

"Mixed precision and loss scaling: in float16, gradients below about 6e-8 flush to zero and
their updates are lost. Multiplying the loss by a factor S multiplies every gradient by S,
which lifts them into range; the gradients are divided by S again before the optimizer step,
so the learning rate is unchanged. An S that is too large makes gradients overflow (float16's
maximum is 65504), and the scaler then lowers S. PyTorch's float16 recipe pairs autocasting
with a GradScaler, while its bfloat16 mixed precision (e.g. on CPU) uses autocasting alone;
bfloat16 keeps float32's 8 exponent bits and hence its range." (S:20)
"Loss scaling fights underflow of small float16 gradients, not overflow, and it does not raise
the effective learning rate, because the gradients are unscaled before the step." (S:60)
"[Mixed precision] runs the bulk of the arithmetic in float16 or bfloat16 while keeping a
float32 copy of the weights, roughly halving memory and often doubling throughput on hardware
with tensor cores. In PyTorch that is torch.autocast, plus a GradScaler for float16 [...]; the
scaler multiplies the loss up before the backward pass and divides the gradients down after."
(L:495)

The float16 parts run on the CPU in float16 arithmetic; `torch.amp.GradScaler("cpu")` is used
where this torch has it (otherwise not-applicable). The CUDA recipe and the tensor-core
memory/throughput figures run in the gpu tier and skip here.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings, strategies as st
from torch import nn

from support.harness.controls import control
from support.lab.train_torch import setting
from support.machine import devices, timing
from support.spec import error_models
from support.machine.memory import SavedTensors

F16 = torch.float16
BF16 = torch.bfloat16


# small tensors: a second intra-op thread only adds OpenMP hand-offs on a shared machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")



def _cpu_grad_scaler(claim, **kwargs):
    """A CPU GradScaler, or the claim is not-applicable in this torch."""
    # import the submodule explicitly: whether torch.amp is an attribute of torch depends on
    # what was imported before
    import importlib
    amp = importlib.import_module("torch.amp")
    if not hasattr(amp, "GradScaler"):
        claim.not_applicable("this torch has no torch.amp.GradScaler (CPU scaler added in 2.3)")
    try:
        return amp.GradScaler("cpu", **kwargs)
    except (RuntimeError, TypeError, ValueError) as exc:
        claim.not_applicable(f"torch.amp.GradScaler('cpu') is unavailable here: {exc}")


def _float16_underflow_grad(scale: float) -> tuple[float, float]:
    """d/dw of (w a) b computed in float16 as autocast would (float32 master weight w).

    Returns (gradient as stored in w.grad, float32), (gradient after dividing by scale).
    """
    w = torch.tensor(1.0, requires_grad=True)
    a = b = torch.tensor(1e-4, dtype=F16)
    loss = (w.to(F16) * a) * b
    (loss * scale).backward()
    return w.grad.item(), w.grad.item() / scale


# ------------------------------------------------------------------ float16's small end
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
    assert largest_flushed == 2.0 ** -25 and smallest_kept > largest_flushed
    assert (y[x <= largest_flushed] == 0).all() and (y[x > largest_flushed] > 0).all()
    # the sentence's figure, read as an order of magnitude: the threshold is within 3x of 6e-8
    assert 6e-8 / 3 <= largest_flushed <= 6e-8 * 3
    assert lost == 0.0 and kept != 0.0


@control("AMP-01", what="float16 flushes every subnormal to zero (as hardware in flush-to-zero "
                        "mode does): gradients up to 6.1e-5, not 6e-8, become 0")
def float16_flushes_subnormals(mp):
    to = torch.Tensor.to

    def flushing(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if out.dtype == F16 and self.dtype != F16:
            out = torch.where(out.abs() < torch.finfo(F16).smallest_normal,
                              torch.zeros_like(out), out)
        return out
    mp.setattr(torch.Tensor, "to", flushing)


# ------------------------------------------------------------------ scaling the loss
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
    to the gradient (support/spec/error_models.py)."""
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


@pytest.mark.claim("AMP-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), k=st.integers(-12, 20))
def test_scaling_the_loss_by_a_power_of_two_scales_every_gradient_exactly(claim, seed, k):
    s = 2.0 ** k
    g, gs = _grads(seed, 1.0), _grads(seed, s)
    mismatches = sum(int((b != s * a).sum()) for a, b in zip(g, gs))
    unscaled_equal = all(torch.equal(b / s, a) for a, b in zip(g, gs))
    # a power of two is exact in binary: not one element may differ (the registry's bound 0)
    claim.check("elements_where_grad_SL_differs_from_S_grad_L", mismatches, reduce="max")
    assert mismatches == 0, f"{mismatches} elements of grad(S L) differ from S grad(L), S = 2^{k}"
    # unscaled, the gradients are bitwise those of the unscaled loss: any optimizer step
    # taken from them is the unscaled-loss step
    assert unscaled_equal


@pytest.mark.claim("AMP-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), s=st.floats(1.0, 1e4))
@example(seed=16493, s=7278.625)     # 1.0035e-5 of the largest entry: red under the old 1e-5
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
                note=model.describe(16))
    claim.record("worst_abs_diff_over_S", worst, reduce="max")
    claim.record("worst_rel_diff_to_largest_entry",
                 max(float(e.max() / (s * a).abs().max()) for e, a in zip(errors, g)),
                 reduce="max", note="the old measure (relative to each tensor's largest entry)")
    assert share <= 1, (f"grad(S L) and S grad(L) differ by {share:.3g} of the float32 "
                        f"rounding bound (seed {seed}, S = {s!r})")


@pytest.mark.claim("AMP-03")
def test_scaling_lifts_a_gradient_that_underflows_in_float16(claim):
    exact = (torch.tensor(1e-4, dtype=F16).double() ** 2).item()   # product of the fp16 values
    raw, _ = _float16_underflow_grad(1.0)
    scaled, recovered = _float16_underflow_grad(2.0 ** 15)
    rel = abs(recovered - exact) / exact
    claim.check('unscaled_float16_gradient', raw)
    claim.record("gradient_with_S_2^15", scaled)
    claim.record("recovered_after_dividing_by_S", recovered)
    claim.check('relative_error', rel)
    assert raw == 0.0 and rel < 1e-3


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


def _scaler_vs_plain(claim, make_opt, scale=2.0 ** 10):
    """The same SGD/Adam step with and without a GradScaler, and the scaler's intermediates."""
    out = {}
    for use_scaler in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        opt = make_opt(model.parameters())
        x, y = torch.randn(32, 4), torch.randn(32, 1)
        loss = F.mse_loss(model(x), y)
        params = list(model.parameters())
        if use_scaler:
            scaler = _cpu_grad_scaler(claim, init_scale=scale)
            scaled_loss = scaler.scale(loss)
            out["scaled_loss_ratio"] = (scaled_loss / loss).item()
            scaled_loss.backward()
            out["grads_scaled"] = [p.grad.clone() for p in params]
            scaler.unscale_(opt)
            out["grads_unscaled"] = [p.grad.clone() for p in params]
            scaler.step(opt)
            scaler.update()
            out["weights_scaler"] = [p.detach().clone() for p in params]
        else:
            start = [p.detach().clone() for p in params]
            loss.backward()
            out["grads"] = [p.grad.clone() for p in params]
            opt.step()
            out["weights_plain"] = [p.detach().clone() for p in params]
            # control: stepping on scaled gradients without unscaling moves S times further
            for p, s0 in zip(params, start):
                p.data.copy_(s0)
                p.grad.mul_(scale)
            opt.step()
            out["weights_not_unscaled"] = [p.detach().clone() for p in params]
            out["start"] = start
    return out


@pytest.mark.claim("AMP-04")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_unscaled_step_equals_the_unscaled_loss_step(claim, optimizer):
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
            "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2)}[optimizer]
    r = _scaler_vs_plain(claim, make)
    same = all(torch.equal(a, b) for a, b in zip(r["weights_plain"], r["weights_scaler"]))
    claim.record('step_with_scaler_equals_plain_step', same)
    move = lambda w: sum((a - s).abs().sum().item() for a, s in zip(w, r["start"]))  # noqa: E731
    ratio = move(r["weights_not_unscaled"]) / move(r["weights_plain"])
    claim.record("step_ratio_if_not_unscaled", ratio,
                 note="SGD: S times the step; Adam: ~1 (Adam is scale-invariant up to eps)")
    assert same
    if optimizer == "sgd":
        assert ratio == pytest.approx(2.0 ** 10, rel=1e-4)


@pytest.mark.claim("AMP-11")
def test_the_scaler_multiplies_the_loss_before_backward_and_divides_the_gradients_after(claim):
    s = 2.0 ** 10
    r = _scaler_vs_plain(claim, lambda ps: torch.optim.SGD(ps, lr=0.1), scale=s)
    claim.record('scaled_loss_over_loss', r['scaled_loss_ratio'])
    up = all(torch.equal(b, s * a) for a, b in zip(r["grads"], r["grads_scaled"]))
    down = all(torch.equal(b, a) for a, b in zip(r["grads"], r["grads_unscaled"]))
    claim.record('grads_after_backward_are_S_times', up)
    claim.record('grads_after_unscale_equal_unscaled', down)
    assert r["scaled_loss_ratio"] == s and up and down


@control("AMP-04", "AMP-09", "AMP-11",
         what="GradScaler.unscale_ checks the gradients for inf but does not divide them by "
              "S, so the optimizer steps on S times the gradient")
def unscale_leaves_the_gradients_scaled(mp):
    from torch.amp import GradScaler
    unscale = GradScaler._unscale_grads_
    mp.setattr(GradScaler, "_unscale_grads_",
               lambda self, optimizer, inv_scale, found_inf, allow_fp16: unscale(
                   self, optimizer, torch.ones_like(inv_scale), found_inf, allow_fp16))


# ------------------------------------------------------------------ float16's large end
@pytest.mark.claim("AMP-05")
def test_float16_max_is_65504_and_the_scaler_skips_the_step_and_lowers_s_on_overflow(claim):
    fmax = torch.finfo(F16).max
    claim.check('float16_max', fmax)
    scaler = _cpu_grad_scaler(claim, init_scale=2.0 ** 16, growth_interval=3)
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
                        "update backs off by a factor 1, not 0.5)")
def scale_kept_on_overflow(mp):
    update = torch._amp_update_scale_
    mp.setattr(torch, "_amp_update_scale_",
               lambda scale, tracker, found_inf, growth, backoff, interval: update(
                   scale, tracker, found_inf, growth, 1.0, interval))


@pytest.mark.claim("AMP-09")
def test_loss_scaling_fights_underflow_not_overflow_and_keeps_the_learning_rate(claim):
    _, recovered = _float16_underflow_grad(2.0 ** 15)
    raw, _ = _float16_underflow_grad(1.0)
    # a gradient of 4 is fine in float16; scaled by 2^15 it overflows: scaling causes overflow
    w = torch.tensor(1.0, requires_grad=True)
    for scale in (1.0, 2.0 ** 15):
        w.grad = None
        ((w.to(F16) * torch.tensor(4.0, dtype=F16)) * scale).backward()
        claim.record(f"grad_of_4_with_S={scale:g}", w.grad.item())
    overflowed = not np.isfinite(w.grad.item())
    r = _scaler_vs_plain(claim, lambda ps: torch.optim.SGD(ps, lr=0.1))
    same_step = all(torch.equal(a, b) for a, b in zip(r["weights_plain"], r["weights_scaler"]))
    claim.record('underflow_fixed', raw == 0.0 and recovered > 0)
    claim.record('scaling_overflows_a_normal_gradient', overflowed)
    claim.record('effective_step_unchanged', same_step)
    assert raw == 0.0 and recovered > 0 and overflowed and same_step


# ------------------------------------------------------------------ bfloat16 on the CPU
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


@control("AMP-06", "AMP-07", "AMP-10", moves=("prediction_dtype",),
         what="torch.autocast does nothing: the forward pass stays float32 whatever dtype "
              "it is given")
def autocast_does_nothing(mp):
    autocast = torch.autocast
    mp.setattr(torch, "autocast", lambda device_type, dtype=None, enabled=True, cache_enabled=None:
               autocast(device_type, dtype=dtype, enabled=False, cache_enabled=cache_enabled))


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
    assert exponent_bits(BF16) == exponent_bits(torch.float32) == 8 > exponent_bits(F16)
    assert bf.smallest_normal == f32.smallest_normal and bf.max / f32.max > 0.99
    assert torch.tensor(1e38).to(BF16).isfinite() and torch.tensor(1e38).to(F16).isinf()


@control("AMP-08", what="torch's bfloat16 has float16's layout: 5 exponent bits, a maximum "
                        "of 65504, so 1e38 overflows")
def bfloat16_laid_out_as_float16(mp):
    finfo, to = torch.finfo, torch.Tensor.to
    mp.setattr(torch, "finfo", lambda dtype=None: finfo(F16 if dtype == BF16 else dtype)
               if dtype is not None else finfo())
    mp.setattr(torch.Tensor, "to", lambda self, *a, **k: to(to(self, F16), BF16)
               if a and isinstance(a[0], torch.dtype) and a[0] == BF16 else to(self, *a, **k))


# ------------------------------------------------------------------ float32 weights, memory
@pytest.mark.fast  # the CPU half of a gpu-tier claim
@pytest.mark.claim("AMP-10")
def test_autocast_keeps_float32_weights_and_saves_half_size_activations_on_cpu(claim):
    torch.manual_seed(0)
    width, depth = 128, 8
    model = nn.Sequential(*[m for i in range(depth) for m in (nn.Linear(width, width),
                                                               nn.ReLU())], nn.Linear(width, 1))
    x = torch.randn(2048, width)
    held = {}
    for mode in ("float32", "bfloat16"):
        with torch.autocast("cpu", enabled=(mode == "bfloat16")), \
                SavedTensors(exclude=[model, x]) as graph:
            out = model(x)
        held[mode] = graph.held_bytes()
        out.float().sum().backward()
    ratio = held["bfloat16"] / held["float32"]
    claim.check('saved_bytes_ratio_bf16_vs_fp32', ratio, note='bytes autograd keeps for backward, bf16 copies of the weights and of the float32 input included (they keep the ratio above 0.5)')
    claim.record("weight_dtypes_after_training", sorted({str(p.dtype) for p in model.parameters()}))
    claim.note("throughput on tensor cores is the gpu-tier test's half of this claim")
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
               for p in model.parameters())
    assert ratio < 0.7


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


@pytest.mark.fast
@pytest.mark.claim("AMP-06")
def test_float16_autocast_with_grad_scaler_trains_on_the_cpu(claim):
    """The CPU half of AMP-06: the same recipe, float16 autocast with torch.amp.GradScaler,
    on the CPU (the claim holds once its CUDA variant has run too)."""
    scaler = _cpu_grad_scaler(claim)
    pred, losses, scaled = _train_float16_recipe(torch.device("cpu"), scaler)
    claim.check('prediction_dtype', str(pred.dtype))
    claim.record("loss_first_last", [losses[0], losses[-1]])
    claim.record("loss multiplied by, first and last step", [scaled[0], scaled[-1]])
    claim.record("final_scale", scaler.get_scale())
    assert all(np.isfinite(losses)) and losses[-1] < 0.1 * losses[0]
    # the scaler is in the loop: the loss backward() saw was the scaled one
    assert scaled[0] > 1


@pytest.mark.gpu
@devices.needs("cuda")
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


def matmul_precision(precision: str):
    """Run with torch's float32 matmul precision set ("highest": float32 throughout, torch's
    default; "high": TF32 on tensor cores), then put the previous one back."""
    return setting(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision,
                   precision)


def amp_workload(device, dtype, width: int = 2048, rows: int = 32768, depth: int = 8):
    """AMP-10's GPU half: an MLP of ``depth`` ``width``-wide ReLU layers on ``rows`` rows
    (rows >> width, so that activations, not the half-precision weight copies, dominate).
    Returns (one training step with autocast on or off, the bytes the forward leaves
    allocated with autocast on or off)."""
    model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width),
                                                               nn.ReLU())],
                          nn.Linear(width, 1)).to(device)
    x = torch.randn(rows, width, device=device)
    kind = torch.device(device).type

    def step(enabled: bool):
        with torch.autocast(kind, dtype=dtype, enabled=enabled):
            out = model(x)
        out.float().sum().backward()
        return out

    def activation_bytes(enabled: bool) -> int:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        with torch.autocast(kind, dtype=dtype, enabled=enabled):
            out = model(x)
        torch.cuda.synchronize()
        used = torch.cuda.memory_allocated() - base
        del out
        return used
    return step, activation_bytes


def throughput_sides(step) -> dict:
    """The sides AMP-10 times: autocast, and float32 as PyTorch users get it with
    set_float32_matmul_precision("high") (TF32 tensor cores) and without (torch's default)."""
    def fp32(precision):
        def run():
            with matmul_precision(precision):
                return step(False)
        return run
    return {"autocast": lambda: step(True), "float32 (TF32)": fp32("high"),
            "float32 (strict)": fp32("highest")}


@pytest.mark.timing
@pytest.mark.gpu
@devices.needs("cuda")
@pytest.mark.claim("AMP-10")
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_mixed_precision_halves_memory_and_speeds_up_on_tensor_cores(claim, dtype, cuda):
    step, activation_bytes = amp_workload(cuda, dtype)
    mem = activation_bytes(True) / activation_bytes(False)
    claim.check('memory_ratio', mem)
    # the suite's one timing method: warm-up, CUDA synchronised, interleaved, min of 10
    cmp = timing.compare(throughput_sides(step), repeats=10, sync=timing.torch_cuda_sync)
    # the reading: float32 as it runs on tensor cores (TF32) over autocast; float32 without
    # TF32 is recorded beside it (tensor-core hardware runs it many times slower still)
    timing.check_ratio(claim, "throughput_ratio", cmp, "float32 (TF32)", "autocast")
    timing.record_estimate(claim, "throughput ratio, strict float32 / autocast",
                           cmp.ratio("float32 (strict)", "autocast"))
    timing.record_times(claim, cmp)
    claim.note(f"float32 matmul precision outside the timed sides: "
               f"{torch.get_float32_matmul_precision()}")
    assert mem <= 0.7
