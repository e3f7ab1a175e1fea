"""Summary sheet, "Key ideas", "GPUs run asynchronously" (S:17).

"Python queues GPU work and moves on" (DEV-05); "anything that needs a GPU value on the CPU
(print(t), t.item(), t.cpu()) forces a synchronization, so a per-step .item() stalls the
pipeline" (DEV-04). "With the default num_workers=0 the DataLoader loads batches in the main
process while the GPU waits; num_workers=k > 0 uses k worker processes that prepare batches in
parallel with training" (DATA-01...04). The lecture says the same (L:475, L:477: "A GPU runs
work asynchronously, so a call returns as soon as the work is queued"; L:393 names the
num_workers switch).

DEV-04 and DEV-05 need CUDA: they are skipped with the reason without it, and
``--require-device cuda`` (``python -m support gpu-run``) turns that into an error. Their times
come from :mod:`support.machine.timing`: when a call returns against when its work is done
(``torch.cuda.synchronize()``), and the loop with a per-step ``.item()`` against the same loop
queued. The workloads are functions of the device, so that ``support/tests/test_gpu_paths.py``
builds and runs each of them on the CPU (shapes, dtypes, the synchronisation each side is timed
with); what they measure needs the card.

The datasets report the pid that produced each item, so "which process loads" is observed, not
inferred. DATA-03's I/O-bound dataset sleeps in ``__getitem__`` (a stand-in for reading and
decoding files): sleeping overlaps across processes whatever the CPU load, so the throughput
ratio measures the parallelism of the workers, not the runner's cores. Timing goes through
:mod:`support.machine.timing` (warm-up epoch outside the clock: worker start-up and the first
fetches; persistent workers; configurations interleaved). DATA-04 ("the GPU waits") is not a
wall-clock ratio: it reads the GPU's idle time from CUDA events around each step of an epoch
whose every step needs its batch (:class:`DeviceClock`, :func:`idle_share`).
"""
from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data import dataloader as loaders
from torch.utils.data._utils import fetch

from support.rules.controls import control
from support.lab import perturb
from support.harness import device_marks, timed
from support.machine import devices, timing

# what the sentence names, applied to one element of a queued result
SYNCING = {
    "print(t)": lambda t: print(t, file=io.StringIO()),
    "t.item()": lambda t: t.item(),
    "t.cpu()": lambda t: t.cpu(),
}


def queued_product(device: str, n: int = 8192):
    """One n x n float32 product queued on the device (tens of ms on a data-centre card);
    returns one element of it, a view: reading that element is what waits."""
    torch.manual_seed(0)
    a = torch.randn(n, n, device=device) / n ** 0.5
    return lambda: (a @ a)[0, 0]


def host_work(n: int = 1 << 16):
    """The host's share of a training step (preparing the next batch): a sort of n float64
    on the CPU, which touches no device."""
    data = np.random.default_rng(0).standard_normal(n)
    return lambda: np.sort(data)


def stall_loop(device: str, steps: int, products: int, host, item: bool, width: int = 1024):
    """A training-like loop: per step the host's work, then ``products`` matrix products
    with tanh queued on the device, and the step's sum; with ``item`` read back every step
    (``.item()``), else kept on the device."""
    torch.manual_seed(0)
    w = torch.randn(width, width, device=device) / width ** 0.5
    x0 = torch.randn(width, width, device=device)

    def run():
        total = torch.zeros((), device=device)
        for _ in range(steps):
            host()
            y = x0
            for _ in range(products):
                y = torch.tanh(y @ w)
            s = y.sum()
            total = total + (s.item() if item else s)
        return total
    return run


def balance(device: str, host, width: int = 1024) -> tuple[int, float, float]:
    """How many products make the device's work per step about as long as the host's
    (there serialising costs most: the loop takes about twice as long); with the host's
    and one product's time (s, minima of single synchronised trials)."""
    sync = devices.sync(device)
    one = stall_loop(device, 1, 1, lambda: None, item=False, width=width)
    t_host = min(timing.time_call(host) for _ in range(7))
    t_one = min(timing.time_call(one, sync) for _ in range(7))
    return max(1, min(500, round(t_host / t_one))), t_host, t_one


# DataLoader workers are forked (the Linux default the sheet describes). JAX, imported by
# other modules of the run, warns that forking a process with its threads may deadlock; the
# workers here run only torch indexing and time.sleep, never JAX, so the DATA tests ignore
# that warning.
SLEEP_S = 0.005


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


def _epoch(loader):
    def run():
        n = 0
        for batch in loader:
            n += len(batch)
        return n
    return run


class DeviceClock:
    """Marks on the timeline of the device that trains.

    On CUDA, an event recorded on the current stream holds the time at which the GPU reached
    it, so the gap between the end of one step's kernels and the start of the next step's is
    time the GPU sat idle, whatever the CPU did meanwhile (the CPU does not wait for the
    kernels it queued). On the CPU the work is done when the call returns, so the marks are
    ``perf_counter`` readings and the gap is the time the process spent fetching the batch."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, a, b) -> float:
        """Milliseconds from mark ``a`` to mark ``b`` (CUDA: synchronise first)."""
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def finish(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def idle_share(steps, ms) -> float:
    """The share of an epoch the device sat idle: ``steps`` are the (start, end) marks of
    each step's device work, in order; idle is every gap from one step's end to the next
    step's start, over the span from the first start to the last end."""
    idle = sum(max(0.0, ms(prev_end, start)) for (_, prev_end), (start, _) in zip(steps, steps[1:]))
    return idle / ms(steps[0][0], steps[-1][1])


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_idle_share_reads_the_gaps_between_steps():
    """The CPU-side logic of DATA-04's measure, on made-up timelines (milliseconds)."""
    ms = lambda a, b: b - a  # noqa: E731
    # back to back: no gap
    assert idle_share([(0, 10), (10, 20), (20, 30)], ms) == 0.0
    # 10 ms of work then 30 ms of waiting, three times: 60 of 90 ms idle
    assert idle_share([(0, 10), (40, 50), (80, 90)], ms) == pytest.approx(60 / 90)
    # a next step queued before the previous one finished overlaps it: no idle time
    assert idle_share([(0, 10), (5, 20)], ms) == 0.0


def _train_epoch(loader, device: str, clock: DeviceClock, w, inner: int):
    """One epoch whose device work needs each batch: every step reads the batch it was
    given (the product of w with a scale taken from the batch), then multiplies through
    ``inner`` matrix products. Returns the (start, end) marks of every step."""
    marks = []
    for xb in loader:
        start = clock.mark()
        xb = xb.to(device)
        y = w * (1 + xb.sum() * 1e-9)
        for _ in range(inner):
            y = torch.tanh(y @ w)
        marks.append((start, clock.mark()))
    clock.finish()
    return marks


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.claim("DATA-01")
def test_default_loader_has_no_workers_and_loads_in_the_main_process(claim):
    loader = DataLoader(PidDataset(), batch_size=8)
    claim.check('default num_workers', loader.num_workers)
    pids = _pids(loader)
    claim.record("loading processes", len(pids))
    assert pids == {os.getpid()}


@control("DATA-01", what="the DataLoader's default is num_workers=2: batches come from two "
                         "worker processes unless asked otherwise")
def two_workers_by_default(mp):
    real = DataLoader.__init__

    def init(self, dataset, *args, num_workers=2, **kwargs):
        real(self, dataset, *args, num_workers=num_workers, **kwargs)
    mp.setattr(DataLoader, "__init__", init)


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.claim("DATA-02")
def test_k_workers_are_k_separate_processes(claim):
    k = 2
    loader = DataLoader(PidDataset(n=64, sleep=0.002), batch_size=4, num_workers=k)
    pids = _pids(loader)
    claim.record('distinct loading pids', len(pids))
    claim.record('main process among them', os.getpid() in pids)
    assert len(pids) == k and os.getpid() not in pids


@control("DATA-02", "DATA-03", "DATA-04",
         what="num_workers=k starts no worker: the DataLoader loads every batch in the main "
              "process, between training steps")
def workers_load_in_the_main_process(mp):
    def in_main(self):
        workers, self.num_workers = self.num_workers, 0
        try:
            return loaders._SingleProcessDataLoaderIter(self)
        finally:
            self.num_workers = workers
    mp.setattr(DataLoader, "_get_iterator", in_main)


@control("DATA-03", expect="inconclusive",
         what="a DataLoader worker fetches its batches a third slower than the main process "
              "(each fetch, then a third of its time spent): two workers load 2 / (4/3) = 1.5 "
              "times as fast as none, the sentence's threshold")
def workers_fetch_a_third_slower(mp):
    # the sentence's own scale: the workers' gain brought to the bound, not taken away. The
    # extra cost is in torch's fetcher, which a forked worker inherits from this process
    real = fetch._MapDatasetFetcher.fetch
    dearer = perturb.dearer(real, 1 / 3)

    def dearer_in_workers(self, index):
        return real(self, index) if get_worker_info() is None else dearer(self, index)
    mp.setattr(fetch._MapDatasetFetcher, "fetch", dearer_in_workers)


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.claim("DATA-03")
def test_workers_pay_when_loading_is_the_bottleneck(claim):
    n, batch = 64, 8
    slow0 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=0)
    slow2 = DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=2,
                       persistent_workers=True)
    # the contrast: items that cost nothing to load gain nothing from workers (the
    # batches only pay the extra inter-process hand-off)
    fast0 = DataLoader(PidDataset(n), batch_size=batch, num_workers=0)
    fast2 = DataLoader(PidDataset(n), batch_size=batch, num_workers=2, persistent_workers=True)
    cmp = timing.compare({"I/O-bound, 0 workers": _epoch(slow0),
                          "I/O-bound, 2 workers": _epoch(slow2),
                          "free items, 0 workers": _epoch(fast0),
                          "free items, 2 workers": _epoch(fast2)},
                         repeats=5, max_seconds=2.5, min_repeats=3)
    # two workers sleep in parallel: the ideal throughput ratio is 2
    timed.check_ratio(claim, "I/O-bound speedup with 2 workers", cmp, "I/O-bound, 0 workers",
                       "I/O-bound, 2 workers", budget_s=3.0)
    # the control: workers do not speed up loading that costs nothing
    timed.check_ratio(claim, "free-item speedup with 2 workers", cmp, "free items, 0 workers",
                       "free items, 2 workers", budget_s=3.0)
    timed.record_times(claim, cmp)


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.claim("DATA-04")
@pytest.mark.timing           # its idle shares are times: it runs while no other test runs
@pytest.mark.usefixtures("one_torch_thread")
# the workers sleep (a stand-in for reading files), so more workers than cores cost nothing
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("device", [
    pytest.param("cpu", id="cpu", marks=[device_marks.needs("cpu"), pytest.mark.slow]),
    pytest.param("cuda", id="cuda", marks=device_marks.needs("cuda"))])
def test_without_workers_the_gpu_waits_for_the_main_process(claim, device):
    """Each batch takes 8 x 5 ms to load; the device's work per step is calibrated to about
    half of that. With num_workers=0 the main process loads the next batch while the device
    has nothing queued, so the device waits for a share of every step (on the CPU, which
    does the work itself, a larger one); with 4 workers the batches are ready and the wait
    goes."""
    n, batch, workers, epochs = 96, 8, 4, 5
    load_ms = batch * SLEEP_S * 1e3
    clock = DeviceClock(device)
    size = 2048 if device == "cuda" else 256
    w = torch.randn(size, size, device=device) / size ** 0.5
    # calibrate: the device time of one product (the minimum of 20 single trials), so that
    # a step's work is about load_ms / 2
    one = torch.randn(size, size, device=device)
    trials = []
    for _ in range(23):
        t0 = clock.mark()
        one = torch.tanh(one @ w)
        t1 = clock.mark()
        clock.finish()
        trials.append(clock.ms(t0, t1))
    inner = max(1, min(2000, round(load_ms / 2 / min(trials[3:]))))
    # named as a timing: it follows the machine's speed, and report diff sets it apart
    claim.record("matrix products per step (sized by measured time)", inner, note=f"{size} x {size}, float32")
    loaders = {k: DataLoader(PidDataset(n, sleep=SLEEP_S), batch_size=batch, num_workers=k,
                             persistent_workers=k > 0) for k in (0, workers)}
    for loader in loaders.values():          # warm-up: worker start-up, first fetches
        _train_epoch(loader, device, clock, w, inner)
    shares = {k: [] for k in loaders}
    work, disturbed = [], 0
    probe = timing.probe()
    # the configurations interleaved, an epoch pair at a time; a pair during which other work
    # kept the machine busy (support.machine.timing's quiet rounds) is set aside (the load
    # moves both shares), and pairs are added while fewer than `epochs` ran undisturbed
    for r in range(3 * epochs):
        if len(shares[0]) >= epochs:
            break
        pair, clean = {}, True
        for k in (loaders if r % 2 == 0 else list(loaders)[::-1]):
            probe.start()
            t0 = time.perf_counter()
            marks = _train_epoch(loaders[k], device, clock, w, inner)
            clean &= probe.others() / (time.perf_counter() - t0) < timing.QUIET_LOAD
            pair[k] = idle_share(marks, clock.ms)
            work.append(float(np.median([clock.ms(a, b) for a, b in marks])))
        if clean:
            for k, share in pair.items():
                shares[k].append(share)
        else:
            disturbed += 1
    claim.record("device work per step (median)", float(np.median(work)), unit="ms",
                 note=f"loading a batch in one process takes {load_ms:.0f} ms")
    for k, v in shares.items():
        claim.record(f"idle shares per epoch, {k} workers", [round(x, 3) for x in v])
    claim.record("epoch pairs set aside (the machine busy with other work)", disturbed)
    # the interval is the range over the undisturbed epochs: decided only when every epoch
    # agrees, and only with three of them at least (else the whole range: inconclusive)
    idle0 = shares[0] if len(shares[0]) >= 3 else [0.0, 1.0]
    claim.check("device idle share, 0 workers", float(np.median(idle0)),
                timed=True, interval=(min(idle0), max(idle0)))
    drop = ([a - b for a, b in zip(shares[0], shares[workers])] if len(shares[0]) >= 3
            else [-1.0, 1.0])
    claim.check(f"idle share, 0 workers minus {workers} workers", float(np.median(drop)),
                timed=True, interval=(min(drop), max(drop)),
                note="the control: with the loading in worker processes the wait goes away")


@pytest.mark.timing
@pytest.mark.claim("DEV-04")
@device_marks.needs("cuda")
def test_print_item_and_cpu_wait_for_the_gpu_and_a_per_step_item_stalls_the_loop(claim):
    # each call on a queued result returns only once the work is done (returned/done ~ 1);
    # the control, the same work with no call, returns as soon as it is queued
    product = queued_product("cuda")
    for name, op in {**SYNCING, "no call (control)": lambda t: t}.items():
        cmp = timing.dispatch_vs_done(lambda: op(product()), timing.torch_cuda_sync,
                                      repeats=5)
        timed.check_ratio(claim, f"{name}: returned/done", cmp, "returned", "done")
        timed.record_times(claim, cmp, prefix=f"{name}: ")
    # the stall: with the host's work and the device's per step of about equal length, a
    # queued loop overlaps them and a per-step .item() runs them one after the other
    host = host_work()
    products, t_host, t_one = balance("cuda", host)
    claim.record("matrix products per step (sized by measured time)", products,
                 note=f"host work {1e3 * t_host:.3g} ms per step, one 1024 x 1024 product "
                      f"and tanh {1e3 * t_one:.3g} ms")
    loops = {"per-step .item()": stall_loop("cuda", 30, products, host, item=True),
             "queued": stall_loop("cuda", 30, products, host, item=False)}
    cmp = timing.compare(loops, repeats=7, sync=timing.torch_cuda_sync, max_seconds=10.0)
    timed.check_ratio(claim, "with .item() / without", cmp, "per-step .item()", "queued",
                       budget_s=10.0)
    timed.record_times(claim, cmp)


@control("DEV-04", what="t.item() does not wait for the GPU: it returns at once, with a stale "
                        "value (0.0), so neither the call nor a per-step .item() stalls")
def item_does_not_wait(mp):
    item = torch.Tensor.item
    mp.setattr(torch.Tensor, "item", lambda self: 0.0 if self.is_cuda else item(self))


@pytest.mark.timing
@pytest.mark.claim("DEV-05")
@device_marks.needs("cuda")
def test_a_gpu_call_returns_before_its_work_is_done(claim):
    a = torch.randn(8192, 8192, device="cuda")
    cmp = timing.dispatch_vs_done(lambda: a @ a, timing.torch_cuda_sync, repeats=10)
    timed.record_times(claim, cmp)
    # the catalogue's margin: waiting for the result takes > 5x as long as queueing it
    timed.check_ratio(claim, "done/returned", cmp, "done", "returned")


@control("DEV-05", what="CUDA runs synchronously: a matrix product returns only once the card "
                        "has finished it (as under CUDA_LAUNCH_BLOCKING=1)")
def products_return_when_done(mp):
    matmul = torch.Tensor.__matmul__

    def blocking(self, other):
        out = matmul(self, other)
        if out.is_cuda:
            torch.cuda.synchronize()
        return out
    mp.setattr(torch.Tensor, "__matmul__", blocking)
