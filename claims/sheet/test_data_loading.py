"""Sheet, "Key ideas": "With the default num_workers=0 the DataLoader loads batches in the
main process while the GPU waits; num_workers=k > 0 uses k worker processes that prepare
batches in parallel with training" (DATA-01...04; lecture L:393 names the same switch).

The datasets report the pid that produced each item, so "which process loads" is observed,
not inferred. DATA-03's I/O-bound dataset sleeps in ``__getitem__`` (a stand-in for reading
and decoding files): sleeping overlaps across processes whatever the CPU load, so the
throughput ratio measures the parallelism of the workers, not the runner's cores. Timing
goes through :mod:`support.timing` (warm-up epoch outside the clock: worker start-up and
the first fetches; persistent workers; configurations interleaved).
"""
from __future__ import annotations

import os
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from support import devices, timing

SLEEP_S = 0.005

# DataLoader workers are forked (the Linux default the sheet describes). JAX, imported by
# other modules of the run, warns that forking a process with its threads may deadlock; the
# workers here run only torch indexing and time.sleep, never JAX, so the warning does not
# apply to them.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


class PidDataset(Dataset):
    """Item i is (i, pid of the process that loaded it)."""

    def __init__(self, n: int = 32, sleep: float = 0.0):
        self.n, self.sleep = n, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        return torch.tensor([float(i), float(os.getpid())])


def _pids(loader) -> set[int]:
    return {int(p) for batch in loader for p in batch[:, 1].tolist()}


@pytest.mark.claim("DATA-01")
def test_default_loader_has_no_workers_and_loads_in_the_main_process(claim):
    loader = DataLoader(PidDataset(), batch_size=8)
    claim.check('default num_workers', loader.num_workers)
    pids = _pids(loader)
    claim.record("loading processes", len(pids))
    assert loader.num_workers == 0
    assert pids == {os.getpid()}


@pytest.mark.claim("DATA-02")
def test_k_workers_are_k_separate_processes(claim):
    k = 2
    loader = DataLoader(PidDataset(n=64, sleep=0.002), batch_size=4, num_workers=k)
    pids = _pids(loader)
    claim.record('distinct loading pids', len(pids))
    claim.record('main process among them', os.getpid() in pids)
    assert len(pids) == k and os.getpid() not in pids


def _epoch(loader):
    def run():
        n = 0
        for batch in loader:
            n += len(batch)
        return n
    return run


@pytest.mark.claim("DATA-03")
def test_workers_pay_when_loading_is_the_bottleneck(claim):
    n, batch = 64, 8
    slow0 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=0)
    slow2 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=2,
                       persistent_workers=True)
    # the negative control: items that cost nothing to load gain nothing from workers (the
    # batches only pay the extra inter-process hand-off)
    fast0 = DataLoader(PidDataset(n), batch_size=batch, num_workers=0)
    fast2 = DataLoader(PidDataset(n), batch_size=batch, num_workers=2, persistent_workers=True)
    cmp = timing.compare({"I/O-bound, 0 workers": _epoch(slow0),
                          "I/O-bound, 2 workers": _epoch(slow2),
                          "free items, 0 workers": _epoch(fast0),
                          "free items, 2 workers": _epoch(fast2)},
                         repeats=5, max_seconds=2.5, min_repeats=3)
    # two workers sleep in parallel: the ideal throughput ratio is 2
    timing.check_ratio(claim, "I/O-bound speedup with 2 workers", cmp, "I/O-bound, 0 workers",
                       "I/O-bound, 2 workers", budget_s=3.0)
    # the control: workers do not speed up loading that costs nothing
    timing.check_ratio(claim, "free-item speedup with 2 workers", cmp, "free items, 0 workers",
                       "free items, 2 workers", budget_s=3.0)
    timing.record_times(claim, cmp)


@pytest.mark.claim("DATA-04")
@devices.needs("cuda")
def test_without_workers_the_gpu_waits_for_the_main_process(claim):
    # a training step whose GPU work (~ms) overlaps with loading only when workers load
    n, batch = 96, 8
    w = torch.randn(2048, 2048, device="cuda")

    def train_epoch(loader):
        def run():
            for xb in loader:
                xb = xb.to("cuda", non_blocking=True)
                y = w
                for _ in range(20):
                    y = torch.tanh(y @ w)
            torch.cuda.synchronize()
        return run

    l0 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=0)
    l2 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=2,
                    persistent_workers=True)
    cmp = timing.compare({"0 workers": train_epoch(l0), "2 workers": train_epoch(l2)},
                         repeats=5, sync=timing.torch_cuda_sync, max_seconds=6.0, min_repeats=3)
    timing.check_ratio(claim, "epoch time 0 workers / 2 workers", cmp, "0 workers",
                       "2 workers", budget_s=6.0)
    timing.record_times(claim, cmp)
