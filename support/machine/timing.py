"""The one timing method of the suite. Every timing claim and every benchmark goes through it.

The notes time things the way microbenchmarks are usually timed (protocol §4.7, §11; DEV-11):
warm up, then take the **minimum over repeated trials**, because interference from the rest
of the machine can only slow a trial down. This module fixes the rest of the method:

* **Warm-up outside the timed region.** Each side is called ``warmup`` times before any
  trial; that is where ``jax.jit`` compiles and where caches, allocators and thread pools
  settle.
* **Synchronisation inside the timed region.** A trial stops the clock only after the work
  is done: ``jax.block_until_ready`` on a JAX result, ``torch.cuda.synchronize()`` for CUDA,
  ``torch.mps.synchronize()`` for MPS (:func:`support.machine.devices.sync` picks the one of a device). Without it a GPU trial measures
  how fast work was queued (DEV-05).
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
  costs the rounds it hit, not the verdict. While a figure is undecided, :func:`settle` waits
  for quiet moments before its extra rounds, within the claim's time budget.
* **Busy rounds are widened by what load was measured to do to that very figure**
  (:mod:`support.machine.sensitivity`): where too few rounds were quiet (a steady neighbour),
  the figure is estimated from all of them and its interval widened by the figure's own
  measured response at the load its rounds measured, so that it still decides where the load
  cannot have moved it across a bound, and stays undecided (inconclusive) where it can. On a
  quiet machine nothing changes.

Intervals, not bands
--------------------
A ratio ``min(A) / min(B)`` comes with a 95 % bootstrap interval: the rounds (a round holds
one trial of every side, run back to back, so they saw the same load) are resampled with
replacement, and the ratio of the minima is recomputed on each resample (:class:`Estimate`).
The interval is how well the run pinned the minima down: on a quiet machine the smallest
trials agree and it is narrow; under bursts of load it widens. It also spans the 95 %
interval of the median of the rounds' own ratios (:func:`median_interval`): load that
no probe sees (a neighbour on the other hyperthread, a shared cache filled) slows the trials
of a round by a different amount in each round, and where the rounds disagree the figure
must not be decided by the luckiest trials. A figure in the registry
("eager/jit", with the bound of the qualitative claim and the notes' stated value) is then

* **decided** when the whole interval lies on one side of each bound and of each edge of the
  stated figure's tolerance: holds, drift (stated figure missed) or fails (bound contradicted);
* **undecided** otherwise: the claim is **inconclusive**, which never fails a run and never
  counts as holds.

:func:`settle` repeats rounds while the figure is undecided and the claim's time budget
lasts, so repeats are spent where the interval needs them, not everywhere. A budget is
seconds on the machine the suite is tuned on; on a slower or busier one it grows by the
factor :func:`slowness` measures (a fixed calibration workload against its time there), up to
:data:`SLOWNESS_CAP`, so that a slow machine can buy the same rounds.

Usage in a claim test::

    from support.machine import timing
    cmp = timing.compare({"loop": loop, "vmap": vmap}, repeats=10, sync=timing.jax_sync)
    timing.check_ratio(claim, "loop/vmap", cmp, "loop", "vmap", budget_s=3)

and in a benchmark (tier ``bench``; same trials, same warm-up, same synchronisation)::

    timing.bench(benchmark, {"eager": f, "jit": g}, measured="jit", repeats=20,
                 sync=timing.jax_sync, extra_info={"claim": "JIT-16", "device": "cpu"})
"""
from __future__ import annotations

import contextlib
import statistics
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

# the bootstrap: resamples per interval and its coverage
RESAMPLES = 2000
LEVEL = 0.95
# settle() looks at a figure again after every extension, and a figure that truly sits on its
# bound would sooner or later step over it by chance if every look used LEVEL (a median of
# paired rounds on a ratio of exactly 1: "holds" in 12 % of simulated runs of 12 looks). The
# first look keeps LEVEL; look j >= 1 spends 1 - LEVEL over j (j + 1) of it, so that all the
# looks together err at most twice as often as one (support/tests/test_timing.py simulates it)
_level = LEVEL


def look_level(look: int) -> float:
    """The confidence level of settle()'s ``look``-th look at a figure (0: the first)."""
    return LEVEL if look == 0 else 1 - (1 - LEVEL) / (look * (look + 1))


def _z(level: float) -> float:
    return statistics.NormalDist().inv_cdf(1 - (1 - level) / 2)


# settle() stops adding rounds here: past a thousand rounds the minima no longer move, and
# the bootstrap's cost grows with the rounds
MAX_ROUNDS = 1000
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
# settle() spends at most this share of a figure's budget waiting for quiet moments, and
# looks for one this often
WAIT_SHARE = 0.5
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
class Estimate:
    """A timing statistic with its bootstrap replicates and 95 % interval, and the rounds it
    came from: quiet ones alone, or (``busy``) all of them, which measured ``load`` cores of
    other work on average (support.machine.sensitivity then widens its interval)."""

    label: str
    value: float
    boot: np.ndarray
    rounds: int
    # the 95 % interval of the median of the rounds' paired ratios, where there is one
    paired: tuple[float, float] | None = None
    # each round's ratio (NaN where the round was set aside) and the comparison it came from:
    # a ratio of two ratios of one comparison is then paired round by round
    per_round: np.ndarray | None = None
    source: int | None = None
    # what the interval is, for the notes a claim records (a median's interval is no bootstrap)
    kind: str = "bootstrap interval"
    # its confidence level (settle()'s later looks ask for more: look_level)
    level: float = field(default_factory=lambda: _level)
    # decided from busy rounds (too few were quiet), and their mean load in cores
    busy: bool = False
    load: float = 0.0
    quiet: int | None = None

    @property
    def interval(self) -> tuple[float, float]:
        tail = (1 - self.level) / 2 * 100
        lo = np.percentile(self.boot, tail, method="lower")
        hi = np.percentile(self.boot, 100 - tail, method="higher")
        if self.paired is not None:
            lo, hi = min(lo, self.paired[0]), max(hi, self.paired[1])
        return float(min(lo, self.value)), float(max(hi, self.value))

    @property
    def text(self) -> str:
        lo, hi = self.interval
        return f"{self.value:.3g} [{lo:.3g}, {hi:.3g}]"

    def _with(self, label, value, boot, paired, per_round, source, other=None) -> "Estimate":
        others = [self] + ([other] if other is not None else [])
        return Estimate(label, value, boot, min(e.rounds for e in others), paired, per_round,
                        source, kind=self.kind if all(e.kind == self.kind for e in others)
                        else Estimate.kind, busy=any(e.busy for e in others),
                        load=max(e.load for e in others),
                        quiet=min((e.quiet for e in others if e.quiet is not None), default=None))

    def __truediv__(self, other: "Estimate") -> "Estimate":
        """A ratio of two statistics (a speed-up over a speed-up); resampled jointly when
        both come from the same rounds, independently otherwise."""
        paired, per_round, source = None, None, None
        if (self.per_round is not None and other.per_round is not None
                and self.source is not None and self.source == other.source
                and len(self.per_round) == len(other.per_round)):
            # both from the same rounds: each round's ratio of ratios, so what drifts between
            # rounds (the machine's state, a neighbour) cancels as it does within a round
            # (JIT-21's gain from 1 to 4 operations: the two speed-ups timed apart, combined
            # end against far end, read [0.51, 5.9] once in twenty idle runs)
            with np.errstate(divide="ignore", invalid="ignore"):
                per_round = self.per_round / other.per_round
            source = self.source
            kept = np.isfinite(per_round)
            if kept.any():
                paired = median_interval(per_round[kept])
        elif self.paired is not None and other.paired is not None:
            # each end against the other's far end: no narrower than either allows
            paired = (float(_safe_div(np.array(self.paired[0]), np.array(other.paired[1]))),
                      float(_safe_div(np.array(self.paired[1]), np.array(other.paired[0]))))
        return self._with(f"({self.label}) / ({other.label})", self.value / other.value,
                          _safe_div(self.boot, other.boot), paired, per_round, source, other)

    def inverse(self) -> "Estimate":
        paired = None
        if self.paired is not None:
            paired = (float(_safe_div(np.array(1.0), np.array(self.paired[1]))),
                      float(_safe_div(np.array(1.0), np.array(self.paired[0]))))
        per_round = None
        if self.per_round is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                per_round = 1.0 / self.per_round
        return self._with(f"1 / ({self.label})", 1 / self.value,
                          _safe_div(np.ones_like(self.boot), self.boot), paired, per_round,
                          self.source)

    def scaled(self, factor: float, label: str) -> "Estimate":
        """The statistic times a constant (a time per epoch scaled to a whole run)."""
        paired = None if self.paired is None else (self.paired[0] * factor,
                                                   self.paired[1] * factor)
        return self._with(label, self.value * factor, self.boot * factor, paired,
                          None if self.per_round is None else self.per_round * factor,
                          self.source)


def median_of(estimates: list[Estimate]) -> Estimate:
    """The median of statistics of independent comparisons, resampled as they are: each
    replicate the median of the statistics' own replicates."""
    lengths = {len(e.boot) for e in estimates}
    if len(lengths) != 1:
        raise ValueError(f"the estimates have different numbers of replicates: {lengths}")
    paired = None
    if all(e.paired is not None for e in estimates):
        paired = (float(np.median([e.paired[0] for e in estimates])),
                  float(np.median([e.paired[1] for e in estimates])))
    out = Estimate("median of " + ", ".join(e.label for e in estimates),
                   float(np.median([e.value for e in estimates])),
                   np.median(np.stack([e.boot for e in estimates]), axis=0),
                   min(e.rounds for e in estimates), paired, kind=estimates[0].kind)
    out.busy = any(e.busy for e in estimates)
    out.load = max(e.load for e in estimates)
    return out


def median_interval(ratios: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of the median of the rounds' ratios (order statistics, the sign
    test's ranks; the whole range under 6 rounds).

    The minima's bootstrap sees how well the fastest trials agree, not what slowed them: a
    neighbour on the other hyperthread of a core, or one that fills the shared cache, slows
    trials without any CPU time the load probe could see, and by a different amount in each
    round. A round's two trials ran back to back under the same neighbours, so their ratio
    keeps most of what the sides differ by and loses most of what the load added; where the
    rounds' ratios spread, this interval is wide and the figure stays undecided instead of
    decided by the luckiest trials. On a quiet machine the rounds agree and it is narrow."""
    r = np.sort(np.asarray(ratios, dtype=float))
    n = len(r)
    if n < 6:
        return float(r[0]), float(r[-1])
    half = _z(_level) * np.sqrt(n) / 2
    j = max(int(np.floor(n / 2 - half)), 0)
    k = min(int(np.ceil(n / 2 + half)), n - 1)
    return float(r[j]), float(r[k])


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b with x / 0 = inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.divide(a, b)
    return np.where(np.isnan(out), np.inf, out)


def _resample_index(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(RESAMPLES, n))


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
        per_round = np.where(used, _safe_div(ta, tb), np.nan)
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
        idx = _resample_index(n, self.seed + n)

        def minima(group):
            trials = [np.asarray(self.sides[k].times[:len(used)])[used]
                      for k in self._members(group)]
            return sum(t.min() for t in trials), sum(t[idx].min(axis=1) for t in trials)
        (va, ba), (vb, bb) = minima(a), minima(b)
        name = " + ".join
        return Estimate(f"min({name(self._members(a))})/min({name(self._members(b))})",
                        float(va / vb), _safe_div(ba, bb), n,
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
        idx = _resample_index(len(t), self.seed + len(t))
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
    rounds); :func:`settle` adds rounds later where a figure needs them.

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


# --------------------------------------------------------------------------- verdicts
def record_times(claim, cmp: Comparison, prefix: str = "", names=None) -> None:
    """Record the absolute times (seconds) of every side (or of ``names``): reported, never
    asserted."""
    for name, side in cmp.sides.items():
        if names is not None and name not in names:
            continue
        per = f" of {side.calls} calls (times per call)" if side.calls > 1 else ""
        claim.record(f"{prefix}{name} min", side.min, unit="s",
                     note=f"median {side.median:.4g} s over {len(side.times)} interleaved "
                          f"trials{per}")


def record_estimate(claim, name: str, est: Estimate) -> float:
    """Record a timing statistic the notes do not state, with its interval."""
    lo, hi = est.interval
    claim.record(name, est.value, note=f"{est.label} over {est.rounds} rounds, "
                                       f"{LEVEL:.0%} {est.kind} [{lo:.3g}, {hi:.3g}]")
    return est.value


def judged_interval(claim, name: str, est: Estimate):
    """The interval a figure is judged by, and the widening applied (None from quiet
    rounds): a figure estimated from busy rounds widened by its measured sensitivity at the
    load its rounds measured (support.machine.sensitivity)."""
    if not est.busy:
        return est.interval, None
    from support.machine import sensitivity
    owner = claim.figure(name).claim
    w = sensitivity.widening(owner, name, claim.variant, est.load)
    return w.apply(est.interval), w


def settle(claim, name: str, estimate: Callable[[], Estimate], comparisons, *,
           budget_s: float, step: int | None = None, unit: str = "") -> Estimate:
    """Check the registry's figure ``name`` against a timing statistic and its interval,
    adding rounds to ``comparisons`` while the figure is undecided and ``budget_s`` seconds
    of extra rounds last (waiting for quiet moments before them, for at most WAIT_SHARE of
    the budget). Returns the final estimate (recorded with ``claim.check``)."""
    def extendable():
        return [c for c in comparisons if c.fns and c.rounds < MAX_ROUNDS]

    # the budget is the tuned machine's seconds: a slower machine gets as many rounds (the
    # calibration, once per process, is not spent from the budget)
    budget = budget_s * (slowness() if budget_s and extendable() else 1.0)
    t0 = time.perf_counter()
    waited, waiting = 0.0, True
    global _level
    look = 0
    try:
        est = estimate()
        interval, widened = judged_interval(claim, name, est)
        while extendable() and not claim.decided(name, est.value, interval) \
                and time.perf_counter() - t0 < budget:
            for c in extendable():
                wait = 0.0
                if waiting and est.busy:
                    # bursts seen (some rounds quiet): worth waiting for the next pause; a
                    # load that never paused gets a short look only
                    wait = min(WAIT_SHARE * budget - waited, budget - (time.perf_counter() - t0),
                               budget if est.quiet else 4 * WAIT_POLL_S)
                before = c.waited_s
                c.extend(min(step or max(5, c.rounds // 2), MAX_ROUNDS - c.rounds),
                         wait_s=max(0.0, wait))
                waited += c.waited_s - before
                if wait > 0 and c.waited_s - before >= wait:
                    waiting = False      # the load never paused: a steady neighbour
            look += 1
            _level = look_level(look)
            est = estimate()
            interval, widened = judged_interval(claim, name, est)
    finally:
        _level = LEVEL
    lo, hi = est.interval
    note = (f"{est.label} over {est.rounds} interleaved rounds; {est.level * 100:.4g}% "
            f"{est.kind} [{lo:.3g}, {hi:.3g}]")
    if widened is not None:
        note += (f"; decided from busy rounds ({est.quiet or 0} quiet, other work "
                 f"{est.load:.2f} cores on average), widened by the figure's load "
                 f"sensitivity ({widened.text}) to [{interval[0]:.3g}, {interval[1]:.3g}]")
    elif est.quiet is not None and est.quiet < est.rounds:
        note += f"; from the {est.quiet} quiet rounds"
    if waited > 0.05:
        note += f"; waited {waited:.1f} s for quiet moments"
    load = {"cores": round(est.load, 3), "busy": est.busy, "rounds": est.rounds,
            "quiet_rounds": est.quiet, "waited_s": round(waited, 2)}
    if widened is not None:
        load.update(widened=[widened.down, widened.up], source=widened.source,
                    interval_before=[lo, hi])
    claim.check(name, est.value, interval=interval, timed=True, load=load, note=note, unit=unit)
    return est


def check_ratio(claim, name: str, cmp: Comparison, a: str, b: str, *,
                budget_s: float = 2.0) -> Estimate:
    """:func:`settle` for the ratio ``min(a)/min(b)`` of one comparison."""
    return settle(claim, name, lambda: cmp.ratio(a, b), [cmp], budget_s=budget_s)


# --------------------------------------------------------------------------- benchmarks
def bench(benchmark, sides: Mapping[str, Callable], measured: str, *, repeats: int,
          warmup: int = 1, sync: Callable | Mapping[str, Callable] = no_sync,
          extra_info: Mapping | None = None) -> Comparison:
    """Run :func:`compare`'s method under pytest-benchmark.

    pytest-benchmark times ``measured`` (its timed target ends with the synchronisation);
    the other sides are timed by :func:`time_call` in the untimed ``setup`` before each
    round, so the sides stay interleaved and the trials are the ones the claim tests use.
    ``extra_info`` gains the claim ID and device given by the caller, the other sides' times
    and the ratios ``other/measured`` with their intervals. Returns the Comparison. (Where
    benchmarks are disabled the claims plugin skips the test before it gets here.)"""
    names = list(sides)
    syncs = {n: (sync[n] if isinstance(sync, Mapping) else sync) for n in names}
    others = [n for n in names if n != measured]
    for _ in range(warmup):
        for n in names:
            syncs[n](sides[n]())
    other_times: dict[str, list[float]] = {n: [] for n in others}
    rnd = [0]

    def setup():
        order = others if rnd[0] % 2 == 0 else others[::-1]
        for n in order:
            other_times[n].append(time_call(sides[n], syncs[n]))
        rnd[0] += 1

    fn, s = sides[measured], syncs[measured]
    benchmark.pedantic(lambda: s(fn()), setup=setup, rounds=repeats, warmup_rounds=0,
                       iterations=1)
    info = dict(extra_info or {})
    info["side"] = measured
    mine = list(benchmark.stats.stats.data)
    cmp = Comparison({measured: Side(measured, mine),
                      **{n: Side(n, t[:len(mine)]) for n, t in other_times.items()}},
                     len(mine))
    for n in others:
        r = cmp.ratio(n, measured)
        info[f"ratio {n}/{measured}"] = round(r.value, 4)
        info[f"ratio {n}/{measured} interval"] = [round(x, 4) for x in r.interval]
        info[f"{n} min_s"] = cmp[n].min
    benchmark.extra_info.update(info)
    return cmp
