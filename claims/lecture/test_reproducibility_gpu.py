"""Lecture, "Reproducibility and random seeds" (L:499), and the sheet's pitfall (S:61): "The
same seed and code can still drift apart on a GPU: torch.manual_seed seeds CPU and CUDA
alike, but some kernels add with atomic operations in a varying order ... and cuDNN's
benchmark mode may pick a different convolution algorithm in each run"; "torch.
use_deterministic_algorithms(True) covers most of the fourth, at a speed cost".

RNG-06 has a CPU half (``torch.manual_seed`` calls ``torch.cuda.manual_seed_all``, observed
by wrapping it) that runs everywhere, and a CUDA half (same seed, same draws on the card).
The rest needs CUDA and is skipped with the reason elsewhere. Non-determinism can only be
shown, never refuted: a run where every repetition agrees is reported as drift, not as a
failure of the claim.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from support.harness.controls import control
from support.machine import devices, timing


@pytest.fixture
def rng_restored():
    state = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if devices.available("cuda") else None
    yield
    torch.set_rng_state(state)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


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
    assert calls == []
    torch.manual_seed(1234)
    assert calls == [1234]


@pytest.mark.gpu          # the CUDA half runs in the GPU tier (python -m support gpu-run)
@pytest.mark.claim("RNG-06")
@devices.needs("cuda")
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


def _index_add_outputs(runs: int, n: int = 1 << 20, slots: int = 64):
    torch.manual_seed(0)
    src = torch.randn(n, device="cuda")
    idx = torch.randint(0, slots, (n,), device="cuda")
    outs = [torch.zeros(slots, device="cuda").index_add_(0, idx, src).cpu() for _ in range(runs)]
    return outs, (src, idx, slots)


def _distinct(outs) -> int:
    return len({o.numpy().tobytes() for o in outs})


@pytest.mark.claim("RNG-09")
@devices.needs("cuda")
def test_atomic_adds_make_repeated_gpu_sums_differ(claim):
    assert not torch.are_deterministic_algorithms_enabled()
    outs, _ = _index_add_outputs(20)
    k = _distinct(outs)
    # more than one distinct result shows the varying order; 20 agreeing runs cannot refute
    # it ("can drift"), so their interval spans every count 20 runs could show: undecided
    claim.check("distinct results of 20 identical index_add_ calls", k,
                interval=None if k > 1 else (1, len(outs)),
                note="" if k > 1 else "all 20 runs agreed bitwise on this card and version; "
                                        "agreement does not refute 'can drift'")
    spread = float(torch.stack(outs).std(0).max())
    claim.record("largest std across runs of one output", spread)


@pytest.mark.timing
@pytest.mark.claim("RNG-08")
@devices.needs("cuda")
def test_deterministic_algorithms_make_gpu_sums_repeatable_at_a_cost(claim):
    runs = 10
    free, (src, idx, slots) = _index_add_outputs(runs)
    k_free = _distinct(free)
    # what the flag covers: results that differ without it (shown, or undecided: agreeing
    # runs cannot refute non-determinism)
    claim.check("distinct results without the flag", k_free,
                interval=None if k_free > 1 else (1, runs),
                note="" if k_free > 1 else f"all {runs} runs agreed without the flag on this "
                                             "card: nothing left for the flag to cover here")
    refused = ""
    torch.use_deterministic_algorithms(True)
    try:
        try:
            det = [torch.zeros(slots, device="cuda").index_add_(0, idx, src).cpu()
                   for _ in range(runs)]
        except RuntimeError as exc:
            refused, det = str(exc).splitlines()[0][:200], []
        if not refused:
            claim.check('distinct results with the flag', _distinct(det))
    finally:
        torch.use_deterministic_algorithms(False)
    # index_add_ on CUDA has a deterministic implementation: refusing it would cover the
    # non-determinism only by not running, and leave the cost unmeasurable
    assert not refused, f"index_add_ refused to run under use_deterministic_algorithms: {refused}"
    assert _distinct(det) == 1, f"{_distinct(det)} distinct results under the flag"

    def with_flag():
        torch.use_deterministic_algorithms(True)
        try:
            return torch.zeros(slots, device="cuda").index_add_(0, idx, src)
        finally:
            torch.use_deterministic_algorithms(False)

    def default():
        return torch.zeros(slots, device="cuda").index_add_(0, idx, src)

    cmp = timing.compare({"deterministic": with_flag, "default": default}, repeats=20,
                         sync=timing.torch_cuda_sync)
    # "at a cost": the deterministic kernel is slower beyond noise
    timing.check_ratio(claim, "deterministic/default time", cmp, "deterministic", "default")
    timing.record_times(claim, cmp)


@control("RNG-08", what="torch.use_deterministic_algorithms(True) does nothing: index_add_ "
                        "keeps adding with atomics in a varying order")
def deterministic_flag_ignored(mp):
    mp.setattr(torch, "use_deterministic_algorithms", lambda mode, *, warn_only=False: None)


@control("RNG-08", what="the deterministic setting costs nothing: it is index_add_'s default "
                        "atomic kernel that takes longer (each call keeps the card busy "
                        "~0.1 s more)")
def default_index_add_is_the_slow_one(mp):
    index_add_ = torch.Tensor.index_add_

    def slow_unless_deterministic(self, *args, **kwargs):
        out = index_add_(self, *args, **kwargs)
        if self.is_cuda and not torch.are_deterministic_algorithms_enabled():
            torch.cuda._sleep(200_000_000)    # GPU clock cycles: ~0.1 s at 2 GHz
        return out
    mp.setattr(torch.Tensor, "index_add_", slow_unless_deterministic)


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


@pytest.mark.claim("RNG-11")
@devices.needs("cuda")
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
