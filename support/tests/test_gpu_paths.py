"""The GPU tier's code paths on a CPU-only torch, as far as honesty allows.

What the device claims measure needs a card; how they get there does not. Here every workload
of the device and mixed-precision claims is built and run on the CPU (shapes, dtypes, what each
side returns), the synchronisation each timed side gets is the device's own, the timing method
calls it inside the clock, and the loop the device timings use keeps no per-step ``.item()``.
Nothing here times a GPU, compares a CPU with one or records a claim's figure."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import claims.lecture.test_24_devices_and_when_a_gpu_helps as dev
import claims.sheet.test_01_key_ideas_09_gpus_run_asynchronously as sync
from support.lab import perturb
from support.lab.train_torch import train
from support.machine import devices, timing


# --------------------------------------------------------------------------- synchronisation
def test_each_device_is_timed_with_its_own_synchronisation():
    assert devices.sync("cpu") is timing.no_sync
    assert devices.sync("cuda") is timing.torch_cuda_sync
    assert devices.sync("cuda:1") is timing.torch_cuda_sync
    assert devices.sync("mps") is timing.torch_mps_sync
    assert devices.sync("jax:gpu") is devices.sync("jax:cpu") is timing.jax_sync


def test_a_cpu_against_gpu_comparison_gives_each_side_its_synchronisation(monkeypatch):
    seen = {}
    monkeypatch.setattr(timing, "compare", lambda sides, **kw: seen.update(sides=sides, **kw))
    dev._cpu_vs("cuda", lambda d: (lambda: d), repeats=3)
    assert set(seen["sides"]) == {"cpu", "cuda"} and seen["sides"]["cuda"]() == "cuda"
    assert seen["sync"] == {"cpu": timing.no_sync, "cuda": timing.torch_cuda_sync}


def test_the_clock_stops_after_the_sides_synchronisation():
    events = []

    def fn():
        events.append("queued")
        return "result"

    def sync(result):
        assert result == "result"
        time.sleep(0.02)            # the device finishing its work
        events.append("done")

    cmp = timing.compare({"a": fn, "b": fn}, repeats=3, warmup=1, sync={"a": sync, "b": sync})
    assert events == ["queued", "done"] * 8           # warm-up and every trial synchronised
    assert cmp["a"].min >= 0.02 and cmp["b"].min >= 0.02


def test_dispatch_and_done_are_told_apart_with_the_queue_drained_first():
    calls = []
    cmp = timing.dispatch_vs_done(lambda: calls.append("fn"), lambda r: calls.append("sync"),
                                  repeats=2, warmup=1)
    # warm-up (fn, sync), then per trial: drain, fn, sync
    assert calls == ["fn", "sync"] + ["sync", "fn", "sync"] * 2
    assert set(cmp.sides) == {"returned", "done"}
    assert all(r <= d for r, d in zip(cmp["returned"].times, cmp["done"].times))


# --------------------------------------------------------------------------- the workloads
def test_the_width_sweeps_epoch_builds_and_trains_on_the_cpu():
    widths = [w for w, _ in dev.SWEEP]
    assert widths == sorted(widths) and {64, 256, 512} <= set(widths)
    for width, d_in in ((16, 8), (512, 8)):
        epoch = dev.sweep_epoch(width, d_in, "cpu")
        first, second = epoch(), epoch()
        assert first.shape == () and first.dtype == torch.float32
        assert first.device.type == "cpu" and torch.isfinite(second)


def test_the_devices_loop_keeps_no_per_step_item(concrete, monkeypatch):
    """The loop behind DEV-08/14: no .item() of a graph's tensor per step (each would wait
    for a GPU); the stories' loop, the control, reads the loss back every step. (Adam's own
    step counter is a CPU tensor that never waits for a device: not counted.)"""
    reads = []
    real = torch.Tensor.item

    def item(self):
        if self.grad_fn is not None:
            reads.append(self)
        return real(self)
    monkeypatch.setattr(torch.Tensor, "item", item)
    res = dev.real_model_trial(concrete, "cpu", epochs=2, threads=1)()
    assert reads == [] and res.train_loss == [] and res.steps == 26
    assert np.isfinite(res.rmse) and res.predictions.shape == (206,)
    control = train(concrete, fold=0, seed=0, epochs=2, threads=1)
    assert len(reads) == control.steps == 26
    # the same numbers either way: the switch changes what is kept, not what is computed
    assert control.rmse == res.rmse


def test_the_same_answer_criterion_tells_another_seed_apart(concrete):
    """DEV-15's one-epoch figure (<= 1e-3 MPa) separates rounding from another run: two
    seeds one epoch in differ by far more (on the CPU both, so this says nothing of a GPU)."""
    a, b = (train(concrete, fold=0, seed=s, epochs=1).predictions for s in (0, 1))
    assert float(np.abs(a - b).max()) > 0.1
    again = train(concrete, fold=0, seed=0, epochs=1).predictions
    assert float(np.abs(a - again).max()) == 0.0


def test_the_synchronising_calls_and_the_stall_loop_run_on_the_cpu():
    product = sync.queued_product("cpu", n=64)
    t = product()
    assert t.shape == () and t.dtype == torch.float32
    out = {name: op(product()) for name, op in sync.SYNCING.items()}
    assert out["print(t)"] is None and isinstance(out["t.item()"], float)
    assert out["t.cpu()"].device.type == "cpu" and out["t.cpu()"].shape == ()
    host = sync.host_work(1024)
    assert host().shape == (1024,)
    products, t_host, t_one = sync.balance("cpu", host, width=64)
    assert 1 <= products <= 500 and t_host > 0 and t_one > 0
    with_item = sync.stall_loop("cpu", 3, 2, host, item=True, width=64)()
    queued = sync.stall_loop("cpu", 3, 2, host, item=False, width=64)()
    assert with_item.shape == queued.shape == () and torch.isclose(with_item, queued)


def test_print_writes_nothing_to_the_test_output(capsys):
    sync.SYNCING["print(t)"](torch.tensor(1.0))
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_the_mixed_precision_sides_build_and_run_on_the_cpu(dtype, monkeypatch):
    step, _ = dev.amp_workload("cpu", dtype, width=32, rows=64, depth=2)
    assert step(True).dtype == dtype and step(False).dtype == torch.float32
    precision = []
    real_step = step

    def watched(enabled):
        precision.append(torch.get_float32_matmul_precision())
        return real_step(enabled)
    before = torch.get_float32_matmul_precision()
    sides = dev.throughput_sides(watched)
    assert set(sides) == {"autocast", "float32 (TF32)", "float32 (strict)"}
    out = {name: fn() for name, fn in sides.items()}
    assert out["autocast"].dtype == dtype and out["float32 (TF32)"].dtype == torch.float32
    # TF32 on for its side only, and put back after each side
    assert precision == [before, "high", "highest"]
    assert torch.get_float32_matmul_precision() == before


# --------------------------------------------------------------------------- the crossover
class _Est:
    def __init__(self, lo, hi):
        self.interval, self.value = (lo, hi), (lo + hi) / 2


@pytest.mark.parametrize("intervals,expected", [
    # CPU wins (the CPU/GPU interval below 1), a tie, then the GPU wins from 512 on
    ({16: (0.2, 0.5), 64: (0.4, 0.9), 256: (0.8, 1.3), 512: (1.1, 1.5), 1024: (2, 3)},
     (64, 512)),
    # a GPU win at 256 that does not last: the crossover is where the GPU keeps winning
    ({16: (0.2, 0.5), 64: (0.4, 0.9), 256: (1.1, 1.2), 512: (0.9, 1.05), 1024: (2, 3)},
     (64, 1024)),
    ({16: (1.1, 2), 64: (2, 3), 1024: (3, 4)}, None),          # the GPU wins everywhere
    ({16: (0.2, 0.5), 64: (0.4, 0.9), 1024: (0.9, 1.2)}, None),  # never beyond noise
])
def test_the_crossover_is_an_interval_of_the_sweeps_widths(intervals, expected):
    assert dev.crossover({w: _Est(*iv) for w, iv in intervals.items()}) == expected



# --------------------------------------------------------------------------- the level controls
def test_under_the_level_control_what_is_asked_of_the_card_runs_on_the_cpu(concrete):
    """the-card-is-the-cpu: every way the device claims put work on the card (a factory's
    device, Tensor.to/.cuda, Module.to) keeps it on the CPU, marked, so that both sides of a
    comparison do the same work; undone, torch is as it was. No card is needed to see that."""
    real = (torch.Tensor.to, torch.nn.Module.to, torch.randn)
    mp = pytest.MonkeyPatch()
    try:
        dev.the_card_is_the_cpu(mp)
        on_card = [torch.randn(16, device="cuda"), torch.zeros(2, device=torch.device("cuda")),
                   torch.ones(3).to("cuda:0"), torch.ones(3).to(0), torch.ones(3).cuda(),
                   torch.ones(3).to("cuda", torch.float64)]
        assert all(t.device.type == "cpu" and perturb.asked_for_the_card(t) for t in on_card)
        assert on_card[-1].dtype == torch.float64            # the rest of a .to() still applies
        model = dev.mlp().to("cuda")
        assert all(p.device.type == "cpu" and perturb.asked_for_the_card(p)
                   for p in model.parameters())
        # what is asked of the CPU is not marked: the two sides stay told apart
        assert not perturb.asked_for_the_card(torch.randn(2))
        assert not any(perturb.asked_for_the_card(p) for p in dev.mlp().to("cpu").parameters())
        assert dev.sweep_epoch(64, 8, "cuda")().device.type == "cpu"
        assert dev.large_model_step("cuda", width=64, depth=2)().device.type == "cpu"
        # the real model's epoch: the same arithmetic as the CPU's, to the bit
        card = dev.real_model_trial(concrete, "cuda", epochs=1, threads=1)()
        cpu = dev.real_model_trial(concrete, "cpu", epochs=1, threads=1)()
        assert card.rmse == cpu.rmse and np.isfinite(card.rmse)
    finally:
        mp.undo()
    assert (torch.Tensor.to, torch.nn.Module.to, torch.randn) == real


def test_dev12s_level_control_makes_the_cpu_sides_whole_step_dearer_and_only_it(monkeypatch):
    """the-card-is-the-cpu-nine-and-a-half-times-faster: after each Adam step of the CPU's
    own model it spins for 8.5 times the step, from the forward pass on (so CPU/GPU = 9.5
    of the same work); the side asked of the card spins for nothing."""
    spins = []
    monkeypatch.setattr(perturb, "spin", lambda seconds, clock=None: spins.append(seconds))
    mp = pytest.MonkeyPatch()
    try:
        dev.the_card_is_the_cpu_nine_and_a_half_times_faster(mp)
        card = dev.large_model_step("cuda", width=128, depth=2)
        cpu = dev.large_model_step("cpu", width=128, depth=2)
        card()
        assert spins == []
        t0 = time.perf_counter()
        cpu()
        wall = time.perf_counter() - t0
        assert len(spins) == 1
        # the forward pass to the step's end is most of the call (none of it after)
        assert 0.5 * wall <= spins[0] / dev.CPU_STEPS_DEARER <= wall
        card()
        assert len(spins) == 1
    finally:
        mp.undo()
