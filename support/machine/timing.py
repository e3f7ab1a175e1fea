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
a quiet machine; on a busy one every trial may have waited, and by different amounts on each
side (a side that uses two threads loses more than one that uses one), so even the minima
move. Each trial therefore also records how much other processes can at most have delayed it
(:mod:`support.machine.load`: the run-queue waits of this process's threads, bounded by the
CPU time the rest of the machine used meanwhile). Its undisturbed time lies between the
trial's time less that delay and the trial's time, and a side's undisturbed minimum between
the smallest of the former and the smallest of the latter. The interval of a ratio spans both
ends, so on a busy machine it widens by what the load can have cost, the figure stays
undecided while that matters, and the claim becomes **inconclusive** rather than wrong. On a
quiet machine the delays are zero and nothing changes.

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
# a trial counts as delayed by other work beyond this share of its time; the delayed rounds
# are set aside when at least CLEAN_SHARE of the rounds, and MIN_CLEAN of them, are clean
DELAYED = 0.01
CLEAN_SHARE = 0.5
MIN_CLEAN = 10
# a budget grows with the machine's slowness up to this factor: beyond it a machine is too
# slow or too busy to decide timing claims in the suite's time, and they stay inconclusive
SLOWNESS_CAP = 4.0


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


def time_call(fn: Callable, sync: Callable = no_sync) -> float:
    """One trial: seconds from the call to the end of the work ``fn`` started."""
    t0 = time.perf_counter()
    out = fn()
    sync(out)
    return time.perf_counter() - t0


_probe = None


def probe():
    """The process's load probe (support.machine.load.Probe), made on first use."""
    global _probe
    if _probe is None:
        from support.machine.load import Probe
        _probe = Probe()
    return _probe


def measure(fn: Callable, sync: Callable = no_sync) -> tuple[float, float]:
    """One trial and how much other work can at most have delayed it: (seconds, seconds)."""
    p = probe()
    p.start()
    t = time_call(fn, sync)
    return t, min(t, p.delay())


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
    """The trials of one side, in seconds, and by how much other work can at most have
    delayed each (zeros where nothing was measured)."""

    name: str
    times: list[float]
    delays: list[float] = field(default_factory=list)
    # calls made in each trial; ``times`` and ``delays`` are per call (the trial's / calls)
    calls: int = 1

    @property
    def min(self) -> float:
        return min(self.times)

    def lower(self) -> np.ndarray:
        """Each trial's time less its delay: a lower bound of its undisturbed time."""
        t = np.asarray(self.times, dtype=float)
        d = np.zeros_like(t)
        d[:len(self.delays)] = self.delays[:len(t)]
        return np.maximum(t - d, 0.0)

    @property
    def delayed(self) -> int:
        """How many trials other work can have delayed by more than 1 %."""
        return sum(1 for t, d in zip(self.times, self.delays) if d > DELAYED * t)

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
        if self.delays:
            out["delayed_by_other_work"] = self.delayed
            out["min_undisturbed_lower_s"] = float(self.lower().min())
        return out


@dataclass
class Estimate:
    """A timing statistic with its bootstrap replicates and 95 % interval. ``boot`` holds the
    replicates' upper ends, ``boot_lo`` their lower ends where other work can have delayed
    trials (the same array otherwise)."""

    label: str
    value: float
    boot: np.ndarray
    rounds: int
    boot_lo: np.ndarray | None = None
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

    @property
    def lows(self) -> np.ndarray:
        return self.boot if self.boot_lo is None else self.boot_lo

    @property
    def interval(self) -> tuple[float, float]:
        tail = (1 - self.level) / 2 * 100
        # order statistics, not interpolation: an end may be infinite (a trial whose whole
        # time other work can have taken leaves no bound), and inf - inf is no number
        lo = np.percentile(self.lows, tail, method="lower")
        hi = np.percentile(self.boot, 100 - tail, method="higher")
        if self.paired is not None:
            lo, hi = min(lo, self.paired[0]), max(hi, self.paired[1])
        return float(min(lo, self.value)), float(max(hi, self.value))

    @property
    def text(self) -> str:
        lo, hi = self.interval
        return f"{self.value:.3g} [{lo:.3g}, {hi:.3g}]"

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
            with np.errstate(divide="ignore", invalid="ignore"):
                paired = (float(_safe_div(np.array(self.paired[0]), np.array(other.paired[1]))),
                          float(_safe_div(np.array(self.paired[1]), np.array(other.paired[0]))))
        with np.errstate(divide="ignore", invalid="ignore"):
            return Estimate(f"({self.label}) / ({other.label})", self.value / other.value,
                            _safe_div(self.boot, other.lows), min(self.rounds, other.rounds),
                            _safe_div(self.lows, other.boot), paired, per_round, source,
                            kind=self.kind if self.kind == other.kind else Estimate.kind)

    def inverse(self) -> "Estimate":
        one = np.ones_like(self.boot)
        paired = None
        if self.paired is not None:
            paired = (float(_safe_div(np.array(1.0), np.array(self.paired[1]))),
                      float(_safe_div(np.array(1.0), np.array(self.paired[0]))))
        per_round = None
        if self.per_round is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                per_round = 1.0 / self.per_round
        return Estimate(f"1 / ({self.label})", 1 / self.value, _safe_div(one, self.lows),
                        self.rounds, _safe_div(one, self.boot), paired, per_round, self.source,
                        kind=self.kind)


def median_of(estimates: list[Estimate]) -> Estimate:
    """The median of statistics of independent comparisons ("most of the workloads": JIT-01),
    resampled as they are: each replicate the median of the statistics' own replicates."""
    lengths = {len(e.boot) for e in estimates}
    if len(lengths) != 1:
        raise ValueError(f"the estimates have different numbers of replicates: {lengths}")
    paired = None
    if all(e.paired is not None for e in estimates):
        paired = (float(np.median([e.paired[0] for e in estimates])),
                  float(np.median([e.paired[1] for e in estimates])))
    return Estimate("median of " + ", ".join(e.label for e in estimates),
                    float(np.median([e.value for e in estimates])),
                    np.median(np.stack([e.boot for e in estimates]), axis=0),
                    min(e.rounds for e in estimates),
                    np.median(np.stack([e.lows for e in estimates]), axis=0), paired,
                    kind=estimates[0].kind)


def median_interval(ratios: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of the median of the rounds' ratios (order statistics, the sign
    test's ranks; the whole range under 6 rounds).

    The minima's bootstrap sees how well the fastest trials agree, not what slowed them: a
    neighbour on the other hyperthread of a core, or one that fills the shared cache, slows
    trials without any run-queue wait the load probe could see, and by a different amount
    in each round. A round's two trials ran back to back under the same neighbours, so their
    ratio keeps most of what the sides differ by and loses most of what the load added; where
    the rounds' ratios spread, this interval is wide and the figure stays undecided instead
    of decided by the luckiest trials. On a quiet machine the rounds agree and it is narrow."""
    r = np.sort(np.asarray(ratios, dtype=float))
    n = len(r)
    if n < 6:
        return float(r[0]), float(r[-1])
    half = _z(_level) * np.sqrt(n) / 2
    j = max(int(np.floor(n / 2 - half)), 0)
    k = min(int(np.ceil(n / 2 + half)), n - 1)
    return float(r[j]), float(r[k])


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b with x / 0 = inf (a delay as long as the trial leaves no lower bound)."""
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

    def __getitem__(self, name: str) -> Side:
        return self.sides[name]

    def _rounds_of(self, a: str, b: str):
        """The two sides' trials round by round, their lower bounds and each round's ratio
        (NaN where the round was set aside)."""
        ta, tb = np.asarray(self.sides[a].times), np.asarray(self.sides[b].times)
        la, lb = self.sides[a].lower(), self.sides[b].lower()
        n = min(len(ta), len(tb))
        ta, tb, la, lb = ta[:n], tb[:n], la[:n], lb[:n]
        # Rounds other work can have delayed are set aside while most rounds are clean: how
        # long another process held the core has nothing to do with how long the trial's own
        # work takes, so the clean rounds are a fair sample of the undisturbed times, while
        # one delayed trial of a few microseconds, kept with its lower bound of zero, sends
        # every resample that draws it to [0, inf] (JIT-21's 5 us calls, 58 of 4,000 trials
        # delayed on an idle machine: never decided). Where most rounds were delayed (a busy
        # machine), they are kept with their lower bounds and the interval widens instead.
        clean = (ta - la <= DELAYED * ta) & (tb - lb <= DELAYED * tb)
        per_round = _safe_div(ta, tb)
        if not clean.all() and clean.sum() >= max(MIN_CLEAN, CLEAN_SHARE * n):
            per_round = np.where(clean, per_round, np.nan)
            ta, tb = ta[clean], tb[clean]
            la, lb = ta, tb
        return ta, tb, la, lb, per_round

    def ratio(self, a: str, b: str) -> Estimate:
        """How many times slower ``a`` is than ``b`` (>1: ``b`` is faster), ``min(a)/min(b)``,
        with the rounds resampled in pairs (a round's trials saw the same load)."""
        ta, tb, la, lb, per_round = self._rounds_of(a, b)
        n = len(ta)
        idx = _resample_index(n, self.seed + n)
        # the upper end: a's minimum as timed over b's undisturbed lower bound; the lower end
        # the other way round (equal to the plain ratio where no trial was delayed)
        hi = _safe_div(ta[idx].min(axis=1), lb[idx].min(axis=1))
        lo = _safe_div(la[idx].min(axis=1), tb[idx].min(axis=1))
        return Estimate(f"min({a})/min({b})", float(ta.min() / tb.min()), hi, n, lo,
                        median_interval(per_round[~np.isnan(per_round)]), per_round, id(self))

    def median_ratio(self, a: str, b: str) -> Estimate:
        """The median of the rounds' ratios ``a/b`` with the 95 % interval of that median
        alone, for a claim whose protocol is a median, not a minimum (TAPE-23). A gain of a
        few percent moves the minima's bootstrap by as much as the gain (a few lucky trials
        decide each end), while every round's pair of back-to-back trials measures it. Where
        rounds were delayed and kept, the lower end is taken from the rounds' lower bounds
        and the upper end from their upper bounds, so load widens it as it does the minima's."""
        ta, tb, la, lb, per_round = self._rounds_of(a, b)
        value = float(np.median(per_round[~np.isnan(per_round)]))
        lo = median_interval(_safe_div(la, tb))[0]
        hi = median_interval(_safe_div(ta, lb))[1]
        return Estimate(f"median of {a}/{b} per round", value, np.array([value]), len(ta),
                        None, (lo, hi), per_round, id(self),
                        kind="interval of the median (order statistics)")

    def delayed(self) -> dict[str, int]:
        """Per side, the trials other work can have delayed by more than 1 %."""
        return {k: s.delayed for k, s in self.sides.items()}

    def extend(self, rounds: int) -> None:
        """Run ``rounds`` more interleaved rounds (the sides are warm already)."""
        if not self.fns:
            raise ValueError("this comparison was built from recorded trials; it cannot be extended")
        _rounds(self.fns, self.syncs, self.sides, rounds, start=self.rounds)
        self.rounds += rounds

    def times(self) -> dict:
        return {k: s.summary() for k, s in self.sides.items()}


def _rounds(fns, syncs, out: dict[str, Side], repeats: int, start: int = 0,
            max_seconds: float | None = None, min_repeats: int = 5) -> int:
    names = list(fns)
    spent, done = 0.0, 0
    for r in range(start, start + repeats):
        for n in (names if r % 2 == 0 else names[::-1]):
            t, d = measure(fns[n], syncs[n])
            out[n].times.append(t / out[n].calls)
            out[n].delays.append(d / out[n].calls)
            spent += t
        done += 1
        if max_seconds is not None and spent > max_seconds and done >= min_repeats:
            break
    return done


def compare(sides: Mapping[str, Callable], *, repeats: int, warmup: int = 1,
            sync: Callable | Mapping[str, Callable] = no_sync,
            max_seconds: float | None = None, min_repeats: int = 5,
            calls: int = 1) -> Comparison:
    """Time every side ``repeats`` times, interleaved, after ``warmup`` untimed calls each.

    ``sync`` is one function for all sides or one per side. With ``max_seconds`` the rounds
    stop early once that much time was spent on trials (never before ``min_repeats``
    rounds); :func:`settle` adds rounds later where a figure needs them.

    With ``calls`` > 1 a trial calls its side that many times back to back and then waits
    for all the results at once, and its time is recorded per call. For calls of a few
    microseconds of dispatch whose results come back through another thread (JAX on CPU),
    the wait for a result is a fixed latency of tens of microseconds that varies from
    trial to trial and is the same whatever the call did; one call per trial would measure
    mostly that wait. (``timeit`` loops inside a trial for the same reason.)"""
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
    done = _rounds(fns, syncs, out, repeats, max_seconds=max_seconds,
                   min_repeats=min_repeats)
    return Comparison(out, done, fns, syncs, zlib.crc32("|".join(names).encode()))


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
def record_times(claim, cmp: Comparison, prefix: str = "") -> None:
    """Record the absolute times (seconds) of every side: reported, never asserted."""
    for name, side in cmp.sides.items():
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


def settle(claim, name: str, estimate: Callable[[], Estimate], comparisons, *,
           budget_s: float, step: int | None = None) -> Estimate:
    """Check the registry's figure ``name`` against a timing statistic and its interval,
    adding rounds to ``comparisons`` while the figure is undecided and ``budget_s`` seconds
    of extra rounds last. Returns the final estimate (recorded with ``claim.check``)."""
    def extendable():
        return [c for c in comparisons if c.fns and c.rounds < MAX_ROUNDS]

    # the budget is the tuned machine's seconds: a slower machine gets as many rounds (the
    # calibration, once per process, is not spent from the budget)
    budget = budget_s * (slowness() if budget_s and extendable() else 1.0)
    t0 = time.perf_counter()
    global _level
    look = 0
    try:
        est = estimate()
        while extendable() and not claim.decided(name, est.value, est.interval) \
                and time.perf_counter() - t0 < budget:
            for c in extendable():
                c.extend(min(step or max(5, c.rounds // 2), MAX_ROUNDS - c.rounds))
            look += 1
            _level = look_level(look)
            est = estimate()
    finally:
        _level = LEVEL
    lo, hi = est.interval
    delayed = sum(sum(c.delayed().values()) for c in comparisons)
    trials = sum(len(s.times) for c in comparisons for s in c.sides.values())
    load = (f"; {delayed} of {trials} trials delayed by other work (their rounds set aside "
            f"where most rounds were clean, else the interval widened by them)"
            if delayed else "")
    claim.check(name, est.value, interval=(lo, hi), timed=True,
                note=f"{est.label} over {est.rounds} interleaved rounds; {est.level * 100:.4g}% "
                     f"{est.kind} [{lo:.3g}, {hi:.3g}]{load}")
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
