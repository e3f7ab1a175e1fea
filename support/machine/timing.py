"""The one timing method of the suite: trials and comparisons. Every timing claim and every
benchmark goes through it.

The notes time things the way microbenchmarks are usually timed (protocol §4.7, §11; DEV-11):
warm up, then take the **minimum over repeated trials**, because interference from the rest
of the machine can only slow a trial down. This module fixes the rest of the method:

* **Warm-up outside the timed region.** Each side is called ``warmup`` times before any
  trial; that is where ``jax.jit`` compiles and where caches, allocators and thread pools
  settle.
* **Synchronisation inside the timed region.** A trial stops the clock only after the work
  is done: ``jax.block_until_ready`` on a JAX result, ``torch.cuda.synchronize()`` for CUDA,
  ``torch.mps.synchronize()`` for MPS (:func:`support.machine.devices.sync` picks the one of
  a device). Without it a GPU trial measures how fast work was queued (DEV-05).
* **The sides interleaved.** Trials go round-robin over the sides (A B A B ..., the order
  reversed every other round) so that a burst of load from other processes hits every side
  alike instead of one side's block of trials.
* **The ratio is the measured value.** ``min(A) / min(B)`` is what a claim records and
  compares; absolute times are recorded (seconds, with the per-trial lists) and never
  asserted, since they belong to the machine.

Other work on the machine
-------------------------
Interference can only slow a trial down, so the minimum over trials is the right statistic on
a quiet machine; on a busy one every trial may have been slowed, and by a different factor on
each side of a comparison, so even the minima move, one way or the other. Each trial therefore
also records the machine's **load** meanwhile (:mod:`support.machine.load`: how many cores
other work kept busy), and a round is **quiet** when every trial of it ran under
:data:`QUIET_LOAD`. Then:

* **Quiet rounds decide alone** where there are enough of them (:data:`MIN_QUIET`, or every
  round the comparison planned): a burst of other work (a package install, a browser tab)
  costs the rounds it hit, not the verdict; :func:`wait_for_quiet` waits for a quiet moment.
* **Busy rounds** decide where too few were quiet (a steady neighbour): the figure is then
  estimated from all of them and flagged busy, with the load they measured, for its interval
  to be widened by what that load was measured to do to it (:mod:`support.machine.sensitivity`).

A statistic of a comparison with its interval is :mod:`support.machine.estimates`'; a claim
test lets it decide, adding rounds while it is undecided, through
:mod:`support.harness.timed`, the wing that knows pytest and the recorder::

    from support.harness import timed
    from support.machine import timing
    cmp = timing.compare({"loop": loop, "vmap": vmap}, repeats=10, sync=timing.jax_sync)
    timed.check_ratio(claim, "loop/vmap", cmp, "loop", "vmap", budget_s=3)
"""
from __future__ import annotations

import contextlib
import statistics
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from support.machine.estimates import Estimate, median_interval, resample_index, safe_div

# the calibration workload's time (minimum of its trials, seconds) on the 2-core x86-64
# machine the budgets were set on, idle: 0.0090 to 0.0142 s in five fresh processes (15
# trials each), the smallest kept; slowness() compares this machine with it
CALIBRATION_S = 0.009
# a round is quiet when other work kept fewer cores than this busy during each of its trials
# (an idle 2-core machine reads a few thousandths, with rare spikes to a tenth; one CPU-bound
# process beside a one-threaded trial reads about 1)
QUIET_LOAD = 0.25
# quiet rounds decide alone when there are this many of them (or every round the comparison
# planned, for comparisons of a few long rounds)
MIN_QUIET = 10
# a budget grows with the machine's slowness up to this factor: beyond it a machine is too
# slow or too busy to decide timing claims in the suite's time, and they stay inconclusive
SLOWNESS_CAP = 4.0
# the machine's load is read over windows of consecutive rounds at least this long: the
# CPU-time counters advance a scheduler tick (1 to 4 ms) at a time, and a window of many
# ticks reads the load to a few percent where a trial of microseconds reads nothing
WINDOW_S = 0.05
# wait_for_quiet() looks for a quiet moment this often
WAIT_POLL_S = 0.05


# --------------------------------------------------------------------------- synchronisation
def no_sync(result=None) -> None:
    """CPU work (NumPy, torch on CPU) is finished when the call returns."""


def jax_sync(result) -> None:
    """Wait for every array in ``result`` (JAX dispatches asynchronously, CPU included)."""
    import jax
    jax.block_until_ready(result)


def torch_cuda_sync(result=None) -> None:
    import torch
    torch.cuda.synchronize()


def torch_mps_sync(result=None) -> None:
    import torch
    torch.mps.synchronize()


def time_call(fn: Callable, sync: Callable = no_sync, clock: Callable | None = None) -> float:
    """One trial: seconds of ``clock`` (default the wall clock, ``time.perf_counter``) from
    the call to the end of the work ``fn`` started."""
    clock = clock or time.perf_counter
    t0 = clock()
    out = fn()
    sync(out)
    return clock() - t0


_probe = None


def probe():
    """The process's load probe (support.machine.load.Probe), made on first use."""
    global _probe
    if _probe is None:
        from support.machine.load import Probe
        _probe = Probe()
    return _probe


_window_probe = None


def window_probe():
    """A second probe, read around windows of rounds (the first reads single trials)."""
    global _window_probe
    if _window_probe is None:
        from support.machine.load import Probe
        _window_probe = Probe()
    return _window_probe


def wait_for_quiet(seconds: float) -> float:
    """Wait up to ``seconds`` for a moment when other work keeps fewer than QUIET_LOAD cores
    busy; returns the seconds waited (0 on a quiet machine, ``seconds`` or a little more when
    the load never paused)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if probe().load_now(WAIT_POLL_S / 2) < QUIET_LOAD:
            break
        time.sleep(WAIT_POLL_S / 2)
    return time.perf_counter() - t0


def _calibration() -> None:
    # pure Python and a small BLAS product: what the timed sides of the claims spend on
    a = np.full((128, 128), 0.5)
    sum(i * i for i in range(100_000))
    for _ in range(10):
        a = np.tanh(a @ a) * 0.1


_slowness = None


def slowness() -> float:
    """How many times slower than the machine the budgets were set on this one runs the
    calibration workload now (at least 1, at most SLOWNESS_CAP); measured once per process,
    the minimum of 7 trials."""
    global _slowness
    if _slowness is None:
        _calibration()
        trials = []
        for _ in range(7):
            t0 = time.perf_counter()
            _calibration()
            trials.append(time.perf_counter() - t0)
        # the plain minimum: a busy machine counts as slow too, since more rounds give its
        # trials more chances to run undisturbed
        _slowness = min(SLOWNESS_CAP, max(1.0, min(trials) / CALIBRATION_S))
    return _slowness


# --------------------------------------------------------------------------- results
@dataclass
class Side:
    """The trials of one side, in seconds, and the machine's load during each (cores other
    work kept busy; zeros where nothing was measured)."""

    name: str
    times: list[float]
    loads: list[float] = field(default_factory=list)
    # calls made in each trial; ``times`` are per call (the trial's / calls)
    calls: int = 1

    @property
    def min(self) -> float:
        return min(self.times)

    def load_array(self) -> np.ndarray:
        out = np.zeros(len(self.times))
        out[:len(self.loads)] = self.loads[:len(self.times)]
        return out

    @property
    def busy(self) -> int:
        """How many trials ran while other work kept QUIET_LOAD cores or more busy."""
        return int((self.load_array() >= QUIET_LOAD).sum())

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def cv(self) -> float:
        """Coefficient of variation of the trials (DEV-10: timings are not reproducible)."""
        if len(self.times) < 2:
            return 0.0
        return statistics.stdev(self.times) / statistics.mean(self.times)

    def summary(self) -> dict:
        out = {"min_s": self.min, "median_s": self.median, "n": len(self.times),
               "cv": round(self.cv, 4)}
        if self.calls > 1:
            out["calls_per_trial"] = self.calls
        if self.loads:
            out["busy_trials"] = self.busy
            out["mean_load_cores"] = round(float(self.load_array().mean()), 3)
        return out


@dataclass
class Comparison:
    """Interleaved trials of several sides; :meth:`extend` adds rounds to the same sides."""

    sides: dict[str, Side]
    rounds: int
    fns: dict = field(default_factory=dict, repr=False)
    syncs: dict = field(default_factory=dict, repr=False)
    seed: int = 0
    # the rounds it was asked for: a comparison of a few long rounds decides from quiet ones
    # when all of those are quiet
    planned: int = MIN_QUIET
    # seconds spent waiting for quiet moments (settle)
    waited_s: float = 0.0
    # per side, what runs before and after each of its trials, outside the clock
    around: dict = field(default_factory=dict, repr=False)
    # what the trials are timed by (None: the wall clock)
    clock: Callable | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> Side:
        return self.sides[name]

    def _selected(self, *names: str):
        """The rounds a statistic of ``names`` comes from: the quiet ones where there are
        enough of them, else all. Returns (mask of the rounds used, busy, their mean load,
        the number of quiet rounds)."""
        n = min(len(self.sides[k].times) for k in names)
        loads = np.max([self.sides[k].load_array()[:n] for k in names], axis=0)
        quiet = loads < QUIET_LOAD
        if quiet.sum() >= max(1, min(MIN_QUIET, self.planned)):
            # how long another process held a core has nothing to do with how long the
            # trial's own work takes, so the quiet rounds are a fair sample of the idle
            # times; a burst costs the rounds it hit
            return quiet, False, float(loads[quiet].mean()), int(quiet.sum())
        return np.ones(n, bool), True, float(loads.mean()) if n else 0.0, int(quiet.sum())

    def _group(self, names, n: int) -> np.ndarray:
        """A side's trials, or a group's summed round by round (a program of several
        workloads run once each: JIT-01's 'usually'), over the first ``n`` rounds."""
        names = (names,) if isinstance(names, str) else tuple(names)
        return np.sum([np.asarray(self.sides[k].times[:n]) for k in names], axis=0)

    def _rounds_of(self, a, b):
        """The two sides' (or groups') trials in the rounds used, each round's ratio (NaN
        where the round was set aside) and what :meth:`_selected` says of them."""
        names = [a] if isinstance(a, str) else list(a)
        names += [b] if isinstance(b, str) else list(b)
        used, busy, load, quiet = self._selected(*names)
        n = len(used)
        ta, tb = self._group(a, n), self._group(b, n)
        per_round = np.where(used, safe_div(ta, tb), np.nan)
        return ta[used], tb[used], per_round, (busy, load, quiet)

    @staticmethod
    def _members(group) -> tuple:
        return (group,) if isinstance(group, str) else tuple(group)

    def ratio(self, a, b) -> Estimate:
        """How many times slower ``a`` is than ``b`` (>1: ``b`` is faster), ``min(a)/min(b)``,
        with the rounds resampled in pairs (a round's trials saw the same load). ``a`` and
        ``b`` may be groups of sides (tuples: a program that runs each once): the sum of
        their minima, each round's sums paired."""
        _, _, per_round, (busy, load, quiet) = self._rounds_of(a, b)
        used = ~np.isnan(per_round)
        n = int(used.sum())
        idx = resample_index(n, self.seed + n)

        def minima(group):
            trials = [np.asarray(self.sides[k].times[:len(used)])[used]
                      for k in self._members(group)]
            return sum(t.min() for t in trials), sum(t[idx].min(axis=1) for t in trials)
        (va, ba), (vb, bb) = minima(a), minima(b)
        name = " + ".join
        return Estimate(f"min({name(self._members(a))})/min({name(self._members(b))})",
                        float(va / vb), safe_div(ba, bb), n,
                        median_interval(per_round[used]), per_round, id(self),
                        busy=busy, load=load, quiet=quiet)

    def median_ratio(self, a: str, b: str) -> Estimate:
        """The median of the rounds' ratios ``a/b`` with the 95 % interval of that median
        alone, for a claim whose protocol is a median, not a minimum (TAPE-23). A gain of a
        few percent moves the minima's bootstrap by as much as the gain (a few lucky trials
        decide each end), while every round's pair of back-to-back trials measures it."""
        ta, tb, per_round, (busy, load, quiet) = self._rounds_of(a, b)
        kept = per_round[~np.isnan(per_round)]
        value = float(np.median(kept))
        return Estimate(f"median of {a}/{b} per round", value, np.array([value]), len(ta),
                        median_interval(kept), per_round, id(self),
                        kind="interval of the median (order statistics)", busy=busy,
                        load=load, quiet=quiet)

    def minimum(self, a: str) -> Estimate:
        """The fastest trial of one side (an absolute time, seconds), with its bootstrap."""
        used, busy, load, quiet = self._selected(a)
        t = np.asarray(self.sides[a].times[:len(used)])[used]
        idx = resample_index(len(t), self.seed + len(t))
        return Estimate(f"min({a})", float(t.min()), t[idx].min(axis=1), len(t), busy=busy,
                        load=load, quiet=quiet)

    def loads(self) -> dict[str, float]:
        """Per side, the mean load (cores) during its trials."""
        return {k: float(s.load_array().mean()) if s.times else 0.0
                for k, s in self.sides.items()}

    def extend(self, rounds: int, wait_s: float = 0.0) -> None:
        """Run ``rounds`` more interleaved rounds (the sides are warm already); with
        ``wait_s``, first wait up to that long for a quiet moment."""
        if not self.fns:
            raise ValueError("this comparison was built from recorded trials; it cannot be extended")
        if wait_s > 0:
            self.waited_s += wait_for_quiet(wait_s)
        _rounds(self.fns, self.syncs, self.sides, rounds, start=self.rounds, around=self.around,
                clock=self.clock)
        self.rounds += rounds

    def times(self) -> dict:
        return {k: s.summary() for k, s in self.sides.items()}


def _rounds(fns, syncs, out: dict[str, Side], repeats: int, start: int = 0,
            max_seconds: float | None = None, min_repeats: int = 5, around=None,
            clock=None) -> int:
    """Run the rounds; every trial of a window of rounds (WINDOW_S at least) gets the load
    the window measured."""
    names = list(fns)
    spent, done = 0.0, 0
    wp, window, w0 = window_probe(), 0, None
    for r in range(start, start + repeats):
        if w0 is None:
            wp.start()
            w0, window = time.perf_counter(), 0
        for n in (names if r % 2 == 0 else names[::-1]):
            with (around or {}).get(n, _nothing)():
                t = time_call(fns[n], syncs[n], clock) if clock else time_call(fns[n], syncs[n])
            out[n].times.append(t / out[n].calls)
            spent += t
        done += 1
        window += 1
        last = r == start + repeats - 1 or (max_seconds is not None and spent > max_seconds
                                            and done >= min_repeats)
        if last or time.perf_counter() - w0 >= WINDOW_S:
            elapsed = time.perf_counter() - w0
            load = wp.others() / elapsed if elapsed > 0 else 0.0
            for n in names:
                out[n].loads += [load] * window
            w0 = None
        if last:
            break
    return done


@contextlib.contextmanager
def _nothing():
    yield


def compare(sides: Mapping[str, Callable], *, repeats: int, warmup: int = 1,
            sync: Callable | Mapping[str, Callable] = no_sync,
            max_seconds: float | None = None, min_repeats: int = 5,
            calls: int = 1, around: Mapping[str, Callable] | None = None,
            clock: Callable | None = None) -> Comparison:
    """Time every side ``repeats`` times, interleaved, after ``warmup`` untimed calls each.

    ``sync`` is one function for all sides or one per side. With ``max_seconds`` the rounds
    stop early once that much time was spent on trials (never before ``min_repeats``
    rounds); :func:`support.harness.timed.settle` adds rounds later where a figure needs them.

    With ``calls`` > 1 a trial calls its side that many times back to back and then waits
    for all the results at once, and its time is recorded per call. For calls of a few
    microseconds of dispatch whose results come back through another thread (JAX on CPU),
    the wait for a result is a fixed latency of tens of microseconds that varies from
    trial to trial and is the same whatever the call did; one call per trial would measure
    mostly that wait. (``timeit`` loops inside a trial for the same reason.)

    ``around`` gives a side a context manager (a function that makes one) entered before each
    of its trials and left after it, outside the clock: the conditions that side is timed
    under (DEV-10's competing processes, started and stopped around each trial).

    ``clock`` times the trials by another clock than the wall's: ``time.process_time`` for a
    figure that is CPU time (SPLIT-10's cost of training, which other work on the machine
    stretches far less than the wall time)."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    names = list(sides)
    syncs = {n: (sync[n] if isinstance(sync, Mapping) else sync) for n in names}
    fns = dict(sides) if calls == 1 else {
        n: (lambda fn=sides[n]: [fn() for _ in range(calls)]) for n in names}
    for _ in range(warmup):
        for n in names:
            syncs[n](fns[n]())
    out = {n: Side(n, [], calls=calls) for n in names}
    around = dict(around or {})
    done = _rounds(fns, syncs, out, repeats, max_seconds=max_seconds,
                   min_repeats=min_repeats, around=around, clock=clock)
    return Comparison(out, done, fns, syncs, zlib.crc32("|".join(names).encode()),
                      planned=min(repeats, max(min_repeats, done)), around=around, clock=clock)


def dispatch_vs_done(fn: Callable, sync: Callable, *, repeats: int, warmup: int = 1
                     ) -> Comparison:
    """Asynchronous dispatch (DEV-05): per trial, the time for ``fn`` to *return*
    ("returned") and the time until its work is *done* ("done", after ``sync``). The queue is
    drained before each trial, outside the clock, so trials do not overlap."""
    for _ in range(warmup):
        sync(fn())
    ret, done = Side("returned", []), Side("done", [])
    for _ in range(repeats):
        sync(None)
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        sync(out)
        t2 = time.perf_counter()
        ret.times.append(t1 - t0)
        done.times.append(t2 - t0)
    return Comparison({"returned": ret, "done": done}, repeats)
