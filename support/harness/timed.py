"""Timing figures as a claim test records and decides them, and the benchmarks: the half of
the timing method that knows pytest and the recorder.

The trials are :mod:`support.machine.timing`'s (:func:`~support.machine.timing.compare`: the
sides warmed up, synchronised and interleaved), a statistic with its interval
:mod:`support.machine.estimates`'. Here a figure meets the claim's entry:

* :func:`settle` checks the entry's figure against a statistic and its interval
  (``claim.check``), and while the figure is **undecided** repeats rounds within the claim's
  time budget, so that repeats are spent where the interval needs them, not everywhere; it
  first waits for quiet moments where bursts of other work were seen. A budget is seconds on
  the machine the suite is tuned on; on a slower or busier one it grows by the factor
  :func:`support.machine.timing.slowness` measures (up to ``SLOWNESS_CAP``), so that a slow
  machine can buy the same rounds. :func:`check_ratio` is :func:`settle` for one ratio.
* A figure estimated from **busy rounds** is judged by its interval widened by what that
  load was measured to do to that very figure (:func:`judged_interval`,
  :mod:`support.machine.sensitivity`): it still decides where the load cannot have moved it
  across a bound, and stays undecided (inconclusive) where it can. On a quiet machine nothing
  changes.
* :func:`record_times` and :func:`record_estimate` record what the notes do not state
  (absolute times, statistics with their intervals): shown, never asserted.
* :func:`bench` runs the same method under pytest-benchmark (tier ``bench``).

Usage in a claim test::

    from support.harness import timed
    from support.machine import timing
    cmp = timing.compare({"loop": loop, "vmap": vmap}, repeats=10, sync=timing.jax_sync)
    timed.check_ratio(claim, "loop/vmap", cmp, "loop", "vmap", budget_s=3)

and in a benchmark (same trials, same warm-up, same synchronisation)::

    timed.bench(benchmark, {"eager": f, "jit": g}, measured="jit", repeats=20,
                sync=timing.jax_sync, extra_info={"claim": "JIT-16", "device": "cpu"})
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from support.machine import estimates
from support.machine.estimates import LEVEL, Estimate
from support.machine.timing import (WAIT_POLL_S, Comparison, Side, no_sync, slowness,
                                    time_call)

# settle() stops adding rounds here: past a thousand rounds the minima no longer move, and
# the bootstrap's cost grows with the rounds
MAX_ROUNDS = 1000
# settle() spends at most this share of a figure's budget waiting for quiet moments
WAIT_SHARE = 0.5


# --------------------------------------------------------------------------- figures
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
            estimates.set_look(look)
            est = estimate()
            interval, widened = judged_interval(claim, name, est)
    finally:
        estimates.set_look(0)
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
