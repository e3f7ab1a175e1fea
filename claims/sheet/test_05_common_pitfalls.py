"""Summary sheet, "Common pitfalls" (S:53-63).

".grad accumulates across backward() calls; forgetting zero_grad() adds old gradients to new
ones" (S:55, TAPE-21). "data-dependent if statements need framework control-flow primitives"
(S:57, JIT-23). "Summing micro-batch mean losses without dividing by their number multiplies
the gradient by that number" (S:59, ACC-09). "Loss scaling fights underflow of small float16
gradients, not overflow, and it does not raise the effective learning rate, because the
gradients are unscaled before the step" (S:60, AMP-09). "The same seed and code can still drift
apart on a GPU: torch.manual_seed seeds CPU and CUDA alike, but some kernels add with atomic
operations in a varying order, floating-point addition is not associative, and cuDNN's
benchmark mode may pick a different convolution algorithm in each run" (S:61, RNG-06, RNG-09,
RNG-10, RNG-11). "A state_dict holds tensors only; you need the model class to rebuild the
network before load_state_dict" (S:62, SAVE-05).

The pitfalls that repeat a key idea are tested with it: S:56 (MODE-03) in
test_01_key_ideas_07_modes.py, S:57 (JIT-05, JIT-08) in test_01_key_ideas_03_tracing.py, S:58
(RNG-02) in test_01_key_ideas_04_random_numbers_in_jax.py, S:60 (AMP-04) in
test_01_key_ideas_12_mixed_precision_and_loss_scaling.py.
MODE-05 (inference needs both eval() and no_grad()) is not testable.

AMP-09's float16 parts run on the CPU in float16 arithmetic, with torch.amp.GradScaler("cpu")
where this torch has it (otherwise not-applicable). RNG-06 has a CPU half (torch.manual_seed
calls torch.cuda.manual_seed_all, observed by wrapping it) that runs everywhere, and a CUDA half
(same seed, same draws on the card); RNG-09 and RNG-11 need CUDA and are skipped with the
reason without it. Non-determinism can only be shown, never refuted: runs that all agree leave
RNG-09 and RNG-11 inconclusive, not failed.

TAPE-21 and SAVE-05 are also checked on a realistic model (support.lab.nested: blocks inside an
nn.ModuleList and an nn.ModuleDict, batch norm buffers and a buffer of its own at depth; TAPE-21
with three optimizer parameter groups), variant ``model=nested`` beside ``model=notes``.
"""
from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict

import jax
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from torch import nn

from support.rules.controls import control
from support.lab import perturb, toy
from support.lab.accumulation import (
    ACC_MODEL,
    full_batch_grad,
    micro_batch_grads,
)
from support.lab.jaxutil import attempt
from support.lab.nested import D_IN, nested_model, param_groups
from support.lab.nondeterminism import distinct, index_add_outputs
from support.lab.precision import (
    F16,
    float16_underflow_grad,
    scaler_vs_plain,
)
from support.harness import device_marks
from support.machine import devices
from support.rules import error_models


@pytest.fixture
def rng_restored():
    state = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if devices.available("cuda") else None
    yield
    torch.set_rng_state(state)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


_CONV = """
import hashlib, torch
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
x = torch.randn(32, 64, 56, 56, device="cuda")
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
with torch.no_grad():
    y = conv(x)
torch.cuda.synchronize()
print(hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest())
"""


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)

each_model = pytest.mark.parametrize("model", ["notes", "nested"],
                                     ids=["model=notes", "model=nested"])


def notes_bn_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))


@pytest.mark.claim("TAPE-21")
@each_model
def test_forgetting_zero_grad_adds_old_gradients(claim, model):
    nested = model == "nested"
    torch.manual_seed(0)
    x = torch.randn(16, D_IN if nested else 3)
    y = torch.randn(16, 1)
    grads = {}
    for zero in (True, False):
        if nested:
            # eval: the same forward every step; three groups, every lr 0
            net = nested_model(seed=1).eval()
            opt = torch.optim.SGD(param_groups(net, lr=0.0, head_lr=0.0), lr=0.0)
        else:
            torch.manual_seed(1)
            net = torch.nn.Linear(3, 1)
            opt = torch.optim.SGD(net.parameters(), lr=0.0)   # lr 0: same point every step
        for _ in range(3):
            if zero:
                opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        grads[zero] = {n: p.grad.clone() for n, p in net.named_parameters()}
    cleared, kept = (torch.cat([g.flatten() for g in grads[z].values()]) for z in (True, False))
    ratio = (kept.abs().sum() / cleared.abs().sum()).item()
    claim.check('grad_ratio_after_3_steps', ratio)
    tripled = {n: torch.allclose(grads[False][n], 3 * grads[True][n], rtol=1e-6)
               for n in grads[True]}
    claim.record("parameters_holding_three_gradients", sum(tripled.values()))
    assert all(tripled.values()), f"not three gradients: {[n for n, t in tripled.items() if not t]}"


@control("TAPE-21", what="backward() replaces each leaf's .grad instead of adding to it, so a "
                         "forgotten zero_grad() costs nothing")
def backward_replaces_old_gradients(mp):
    real = torch.Tensor.backward

    def replace(self, *args, **kwargs):
        for node in toy.tape_nodes(self):
            if hasattr(node, "variable"):          # AccumulateGrad: a leaf's .grad
                node.variable.grad = None
        return real(self, *args, **kwargs)
    mp.setattr(torch.Tensor, "backward", replace)


@control("TAPE-21", what="optimizer.zero_grad() clears the gradients of its first parameter "
                         "group only")
def zero_grad_clears_the_first_group_only(mp):
    perturb.first_group_only(mp, torch.optim.Optimizer, "zero_grad")


@pytest.mark.claim("JIT-23")
@pytest.mark.parametrize("how", ["lax.cond", "python_if"])
def test_data_dependent_branches_need_framework_control_flow(claim, how):
    if how == "lax.cond":
        f = jax.jit(lambda x: jax.lax.cond(x > 0, lambda v: v * 2, lambda v: -v, x))
        got = [float(f(3.0)), float(f(-3.0))]
        claim.record('results', got)
        assert got == [6.0, 3.0]
    else:
        value, err = attempt(jax.jit(lambda x: x * 2 if x > 0 else -x), 3.0)
        claim.record("python_if_under_jit", type(err).__name__ if err else f"returned {value}")
        assert isinstance(err, jax.errors.ConcretizationTypeError), \
            f"a Python if on a traced value returned {value} instead of raising"


@control("JIT-23", what="jax.lax.cond ignores its predicate and always takes the false branch")
def lax_cond_always_false(mp):
    mp.setattr(jax.lax, "cond", lambda pred, true_fun, false_fun, *operands, **kwargs:
               false_fun(*operands))


@pytest.mark.claim("ACC-09")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 8), st.integers(1, 4), st.floats(0.1, 5))
def test_summing_micro_batch_means_multiplies_the_gradient_by_k(claim, k, per, w0):
    rng = np.random.default_rng(k * 31 + per)
    x = rng.normal(size=k * per).tolist()
    ratio = micro_batch_grads(x, w0, k, divide=False)[-1] / full_batch_grad(x, w0)
    # the ratio of two results each within the model's bound of its value (+1 rounding)
    share = ACC_MODEL.share(ratio - k, k, n=k * per + k + 1)
    claim.record("max |ratio - k|", abs(ratio - k), reduce="max")
    claim.check("share_of_rounding_bound", share, reduce="max",
                note=ACC_MODEL.describe(k * per + k + 1), halt=True)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("AMP-09")
def test_loss_scaling_fights_underflow_not_overflow_and_keeps_the_learning_rate(claim):
    _, recovered = float16_underflow_grad(2.0 ** 15)
    raw, _ = float16_underflow_grad(1.0)
    # a gradient of 4 is fine in float16; scaled by 2^15 it overflows: scaling causes overflow
    w = torch.tensor(1.0, requires_grad=True)
    for scale in (1.0, 2.0 ** 15):
        w.grad = None
        ((w.to(F16) * torch.tensor(4.0, dtype=F16)) * scale).backward()
        claim.record(f"grad_of_4_with_S={scale:g}", w.grad.item())
    overflowed = not np.isfinite(w.grad.item())
    r = scaler_vs_plain(claim, lambda ps: torch.optim.SGD(ps, lr=0.1))
    same_step = all(torch.equal(a, b) for a, b in zip(r["weights_plain"], r["weights_scaler"]))
    claim.record('underflow_fixed', raw == 0.0 and recovered > 0)
    claim.record('scaling_overflows_a_normal_gradient', overflowed)
    claim.record('effective_step_unchanged', same_step)
    assert raw == 0.0 and recovered > 0 and overflowed and same_step


@pytest.mark.claim("RNG-06")
def test_manual_seed_also_seeds_cuda(claim, monkeypatch, rng_restored):
    calls = []
    real = torch.cuda.manual_seed_all
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda s: (calls.append(s), real(s)))
    torch.manual_seed(1234)
    claim.check('torch.cuda.manual_seed_all called with', calls)
    # the control: seeding only the CPU generator does not reach CUDA, so the wrapper does
    # see the difference
    calls.clear()
    torch.default_generator.manual_seed(99)
    claim.check('calls from default_generator.manual_seed', len(calls))


@pytest.mark.gpu          # the CUDA half runs in the GPU tier (python -m support gpu-run)
@pytest.mark.claim("RNG-06")
@device_marks.needs("cuda")
def test_manual_seed_gives_the_same_cuda_draws(claim, rng_restored):
    def draw(seed):
        torch.manual_seed(seed)
        return torch.randn(1000, device="cuda").cpu()

    same = torch.equal(draw(0), draw(0))
    other = torch.equal(draw(0), draw(1))
    claim.record('same seed, same CUDA draws', same)
    claim.record('different seed, same CUDA draws', other)
    assert same and not other


@control("RNG-06", what="torch.manual_seed seeds only the CPU generator: CUDA's generators "
                        "keep their state")
def manual_seed_leaves_cuda_unseeded(mp):
    mp.setattr(torch, "manual_seed", lambda seed: torch.default_generator.manual_seed(int(seed)))


@pytest.mark.claim("RNG-09")
@device_marks.needs("cuda")
def test_atomic_adds_make_repeated_gpu_sums_differ(claim):
    assert not torch.are_deterministic_algorithms_enabled()
    outs, _ = index_add_outputs(20)
    k = distinct(outs)
    # more than one distinct result shows the varying order; 20 agreeing runs cannot refute
    # it ("can drift"), so their interval spans every count 20 runs could show: undecided
    claim.check("distinct results of 20 identical index_add_ calls", k,
                interval=None if k > 1 else (1, len(outs)),
                note="" if k > 1 else "all 20 runs agreed bitwise on this card and version; "
                                        "agreement does not refute 'can drift'")
    spread = float(torch.stack(outs).std(0).max())
    claim.record("largest std across runs of one output", spread)


@pytest.mark.claim("RNG-10")
def test_float_addition_is_not_associative(claim):
    a, b, c = 0.1, 0.2, 0.3
    claim.record("(0.1+0.2)+0.3", (a + b) + c)
    claim.record("0.1+(0.2+0.3)", a + (b + c))
    assert (a + b) + c != a + (b + c)
    found = find(st.tuples(finite, finite, finite),
                 lambda t: (t[0] + t[1]) + t[2] != t[0] + (t[1] + t[2]))
    claim.record("counterexample_found_by_hypothesis", list(found))
    assert (found[0] + found[1]) + found[2] != found[0] + (found[1] + found[2])

    # in float32 too, the case of a GPU reduction
    @given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=3, max_size=50))
    def order_changes_sum_by_rounding_only(xs):
        arr = np.array(xs, dtype=np.float32)
        fwd, rev = np.float32(0), np.float32(0)
        for v in arr:
            fwd = np.float32(fwd + v)
        for v in arr[::-1]:
            rev = np.float32(rev + v)
        # each order within gamma_(n-1) sum |x| of the exact sum (the error model)
        model = error_models.model("sum:two-orders")
        magnitude = float(np.abs(arr.astype(np.float64)).sum())
        share = model.share(float(fwd) - float(rev), magnitude, n=len(arr) - 1)
        claim.check("share_of_rounding_bound", share, reduce="max",
                    note=model.describe(len(arr) - 1), halt=True)
    order_changes_sum_by_rounding_only()


@control("RNG-10", what="NumPy's float32 is half precision: the two orders of a float32 sum "
                        "differ by more than float32 rounding allows")
def float32_sums_round_to_half_precision(mp):
    mp.setattr(np, "float32", np.float16)


@pytest.mark.claim("RNG-11")
@device_marks.needs("cuda")
def test_cudnn_benchmark_mode_may_change_the_bits_between_runs(claim):
    hashes = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _CONV], capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, out.stderr[-2000:]
        hashes.append(out.stdout.strip().splitlines()[-1])
    # in-process: the algorithm choice itself changes the bits (benchmark vs deterministic)
    torch.manual_seed(0)
    x = torch.randn(32, 64, 56, 56, device="cuda")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    old = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    try:
        with torch.no_grad():
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
            a = conv(x).cpu()
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
            b = conv(x).cpu()
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = old
    claim.record("benchmark-mode output differs bitwise from the deterministic algorithm's",
                 not torch.equal(a, b))
    claim.record("max |benchmark - deterministic|", float((a - b).abs().max()))
    k = len(set(hashes))
    # distinct outputs show it; agreeing processes do not refute a 'may': undecided
    claim.check("distinct conv outputs over 3 fresh processes", k,
                interval=None if k > 1 else (1, len(hashes)),
                note="" if k > 1 else "3 fresh processes agreed; the claim says 'may', so "
                                        "agreement does not refute it")


@pytest.mark.claim("SAVE-05")
@each_model
def test_a_state_dict_holds_only_tensors_and_needs_the_class_to_rebuild(claim, tmp_path, model):
    nested = model == "nested"
    build = (lambda seed: nested_model(seed=seed)) if nested else (lambda seed: notes_bn_model())
    d_in = D_IN if nested else 3
    torch.manual_seed(0)
    model = build(0)
    model.train()
    model(torch.randn(16, d_in))        # move the running statistics off their defaults
    model.eval()
    path = tmp_path / "sd.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path)            # weights_only: no class is needed to read it
    types = sorted({type(v).__name__ for v in state.values()})
    claim.check('state_dict_type', type(state).__name__)
    claim.check('value_types', types)
    assert isinstance(state, OrderedDict) and types == ["Tensor"]
    assert not callable(state)          # no forward: the architecture is not in the file
    tensors = set(dict(model.named_parameters())) | set(dict(model.named_buffers()))
    claim.record("tensors_not_in_the_state_dict", sorted(tensors - set(state)))
    assert set(state) == tensors, "the state_dict does not hold every parameter and buffer"

    x = torch.randn(5, d_in)
    rebuilt = build(1)
    rebuilt.load_state_dict(state)
    rebuilt.eval()
    assert torch.equal(rebuilt(x), model(x))
    # control: the tensors alone do not say which class they belong to
    wrong = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    with pytest.raises(RuntimeError):
        wrong.load_state_dict(state)


@control("SAVE-05", what="a state_dict also carries the architecture (the module's description "
                         "beside its tensors)")
def state_dict_carries_the_architecture(mp):
    real = nn.Module.state_dict

    def state_dict(self, *args, **kwargs):
        state = real(self, *args, **kwargs)
        if not args and not kwargs:                # the top-level call, not a submodule's
            state["architecture"] = repr(self)
        return state
    mp.setattr(nn.Module, "state_dict", state_dict)
