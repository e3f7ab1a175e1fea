"""The one timing method of the suite. Every timing claim and every benchmark goes through it.

The notes time things the way microbenchmarks are usually timed (protocol §4.7, §11; DEV-11):
warm up, then take the **minimum over repeated trials**, because interference from the rest
of the machine can only slow a trial down. This module fixes the rest of the method:

* **Warm-up outside the timed region.** Each side is called ``warmup`` times before any
  trial; that is where ``jax.jit`` compiles and where caches, allocators and thread pools
  settle.
* **Synchronisation inside the timed region.** A trial stops the clock only after the work
  is done: ``jax.block_until_ready`` on a JAX result, ``torch.cuda.synchronize()`` for CUDA,
  ``torch.mps.synchronize()`` for MPS (see :func:`sync_for`). Without it a GPU trial measures
  how fast work was queued (DEV-05).
* **The sides interleaved.** Trials go round-robin over the sides (A B A B ..., the order
  reversed every other round) so that a burst of load from other processes hits every side
  alike instead of one side's block of trials.
* **The ratio is the measured value.** ``min(A) / min(B)`` is what a claim records and
  compares; absolute times are recorded (seconds, with the per-trial lists) and never
  asserted, since they belong to the machine.

Noise policy
------------
A ratio comes with a band, widened to include the min-ratio itself and to at least
``NOISE_FLOOR`` either side of it: with at least ten rounds, the range of ``min(A)/min(B)``
computed separately over five consecutive stretches of the rounds (how much the statistic
itself moves within one run); with fewer rounds, the interquartile range of the per-round
paired ratios ``A_i / B_i`` (the trials of one round ran back to back, so they saw the same
load). Bands of derived ratios (a speedup over a speedup) combine both ends. A claim
"A is more than t times slower than B" is then

* **decided yes** when the whole band lies above ``t``;
* **decided no** when the whole band lies below ``t`` (the test fails: the claim is
  contradicted beyond noise);
* **in the noise** otherwise: reported as **drift** with the ratio and its band, never as a
  pass, and never as a failure (:func:`check_ratio` records ``resolved beyond noise = False``
  against stated ``True``, which the claims plugin turns into a drift verdict).

Usage in a claim test::

    from support import timing
    cmp = timing.compare({"loop": loop, "vmap": vmap}, repeats=10, sync=timing.jax_sync)
    timing.check_ratio(claim, cmp, "loop", "vmap", above=5.0, name="loop/vmap")

(``above=`` and/or ``below=``; a contradicted bound raises AssertionError, a ratio within
noise of a bound records a drift and returns None.)

and in a benchmark (tier ``bench``; same trials, same warm-up, same synchronisation)::

    timing.bench(benchmark, {"eager": f, "jit": g}, measured="jit", repeats=20,
                 sync=timing.jax_sync, extra_info={"claim": "JIT-16", "device": "cpu"})
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

# Relative half-width below which two timings are never called different (5 %): shared
# runners jitter by a few per cent even on the minimum.
NOISE_FLOOR = 0.05
# With at least 2 * BLOCKS rounds the band is the range of the min-ratio over BLOCKS
# consecutive stretches of the rounds; with fewer, the interquartile range of the paired
# per-round ratios.
BLOCKS = 5


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


def sync_for(device: str) -> Callable:
    """The synchronisation of a torch device name (``cpu``, ``cuda[:i]``, ``mps``) or ``jax``."""
    kind = str(device).split(":")[0]
    return {"cpu": no_sync, "cuda": torch_cuda_sync, "mps": torch_mps_sync,
            "jax": jax_sync}[kind]


def time_call(fn: Callable, sync: Callable = no_sync) -> float:
    """One trial: seconds from the call to the end of the work ``fn`` started."""
    t0 = time.perf_counter()
    out = fn()
    sync(out)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- results
def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class Side:
    """The trials of one side, in seconds."""

    name: str
    times: list[float]

    @property
    def min(self) -> float:
        return min(self.times)

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
        return {"min_s": self.min, "median_s": self.median, "n": len(self.times),
                "cv": round(self.cv, 4)}


@dataclass
class Ratio:
    """``min(a) / min(b)`` with its noise band (see the module docstring)."""

    a: str
    b: str
    value: float
    lo: float
    hi: float
    paired: list[float] = field(default_factory=list)

    def decide(self, threshold: float) -> str:
        """``"above"``, ``"below"`` or ``"noise"`` relative to ``threshold``."""
        if self.lo > threshold:
            return "above"
        if self.hi < threshold:
            return "below"
        return "noise"

    @property
    def band_text(self) -> str:
        return f"{self.value:.3g} (band {self.lo:.3g}-{self.hi:.3g})"


@dataclass
class Comparison:
    """Interleaved trials of several sides."""

    sides: dict[str, Side]
    rounds: int

    def __getitem__(self, name: str) -> Side:
        return self.sides[name]

    def ratio(self, a: str, b: str) -> Ratio:
        """How many times slower ``a`` is than ``b`` (>1: ``b`` is faster)."""
        ta, tb = self.sides[a].times, self.sides[b].times
        value = min(ta) / min(tb)
        paired = [x / y for x, y in zip(ta, tb)]
        n = min(len(ta), len(tb))
        if n >= 2 * BLOCKS:
            # enough rounds: the spread of the statistic itself, min(a)/min(b) over
            # BLOCKS consecutive stretches of the run (a burst of load shows as spread)
            edges = [round(i * n / BLOCKS) for i in range(BLOCKS + 1)]
            spread = [min(ta[i:j]) / min(tb[i:j]) for i, j in zip(edges, edges[1:])]
            lo_s, hi_s = min(spread), max(spread)
        else:
            lo_s, hi_s = _quantile(paired, 0.25), _quantile(paired, 0.75)
        lo = min(value, lo_s, value * (1 - NOISE_FLOOR))
        hi = max(value, hi_s, value * (1 + NOISE_FLOOR))
        return Ratio(a, b, value, lo, hi, paired)

    def times(self) -> dict:
        return {k: s.summary() for k, s in self.sides.items()}


def compare(sides: Mapping[str, Callable], *, repeats: int, warmup: int = 1,
            sync: Callable | Mapping[str, Callable] = no_sync,
            max_seconds: float | None = None, min_repeats: int = 5) -> Comparison:
    """Time every side ``repeats`` times, interleaved, after ``warmup`` untimed calls each.

    ``sync`` is one function for all sides or one per side. With ``max_seconds`` the rounds
    stop early once that much time was spent on trials (never before ``min_repeats``
    rounds), which keeps a slow shared machine inside the suite's time budget."""
    names = list(sides)
    syncs = {n: (sync[n] if isinstance(sync, Mapping) else sync) for n in names}
    for _ in range(warmup):
        for n in names:
            syncs[n](sides[n]())
    out = {n: Side(n, []) for n in names}
    spent = 0.0
    done = 0
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            t = time_call(sides[n], syncs[n])
            out[n].times.append(t)
            spent += t
        done += 1
        if max_seconds is not None and spent > max_seconds and done >= min_repeats:
            break
    return Comparison(out, done)


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
        claim.record(f"{prefix}{name} min", side.min, unit="s",
                     note=f"median {side.median:.4g} s over {len(side.times)} interleaved trials")


def record_ratio(claim, r: Ratio, name: str, stated=None, tol="timing:ratio"):
    """Record a ratio (and its band) against the notes' figure; returns the ratio."""
    claim.record(name, r.value, stated=stated, tol=tol if stated is not None else None,
                 note=f"min({r.a})/min({r.b}); noise band {r.lo:.3g}-{r.hi:.3g}")
    return r.value


def ratio_of(r1: Ratio, r2: Ratio) -> Ratio:
    """``r1 / r2`` (e.g. one jit speedup over another), its band from the two bands."""
    return Ratio(f"({r1.a}/{r1.b})", f"({r2.a}/{r2.b})", r1.value / r2.value,
                 r1.lo / r2.hi, r1.hi / r2.lo)


def check_ratio(claim, cmp_or_ratio, a: str | None = None, b: str | None = None, *,
                name: str, above: float | None = None, below: float | None = None,
                stated=None, tol="timing:ratio", what: str = "") -> bool | None:
    """The noise policy for "the ratio ``min(a)/min(b)`` is above ``above``" (and/or below
    ``below``).

    Records the ratio (against ``stated`` if given). Every bound decided in the claim's
    favour: returns True. A bound contradicted beyond the noise band: raises AssertionError
    (the claim fails). Otherwise the ratio is in the noise: records
    ``"<name> resolved beyond noise" = False`` against stated True (a **drift** verdict, with
    the band in the note) and returns None; the caller asserts nothing further on it.
    """
    if above is None and below is None:
        raise ValueError("check_ratio needs above= or below=")
    r = cmp_or_ratio if isinstance(cmp_or_ratio, Ratio) else cmp_or_ratio.ratio(a, b)
    record_ratio(claim, r, name, stated=stated, tol=tol)
    bounds = []
    if above is not None:
        bounds.append((f"> {above:g}", r.decide(above) == "above", r.decide(above) == "below"))
    if below is not None:
        bounds.append((f"< {below:g}", r.decide(below) == "below", r.decide(below) == "above"))
    label = what or f"min({r.a})/min({r.b})"
    wrong = [b for b, _, contra in bounds if contra]
    if wrong:
        raise AssertionError(f"{label}: contradicted beyond noise, {name} = {r.band_text}, "
                             f"the claim needs {' and '.join(wrong)}")
    if all(ok for _, ok, _ in bounds):
        return True
    want = " and ".join(b for b, _, _ in bounds)
    claim.record(f"{name} resolved beyond noise", False, stated=True, tol="exact",
                 note=f"{label}: {name} = {r.band_text} is within noise of {want}; "
                      "reported as drift, not as a pass")
    return None


# --------------------------------------------------------------------------- benchmarks
def bench(benchmark, sides: Mapping[str, Callable], measured: str, *, repeats: int,
          warmup: int = 1, sync: Callable | Mapping[str, Callable] = no_sync,
          extra_info: Mapping | None = None) -> Comparison | None:
    """Run :func:`compare`'s method under pytest-benchmark.

    pytest-benchmark times ``measured`` (its timed target ends with the synchronisation);
    the other sides are timed by :func:`time_call` in the untimed ``setup`` before each
    round, so the sides stay interleaved and the trials are the ones the claim tests use.
    ``extra_info`` gains the claim ID and device given by the caller, the other sides' times
    and the ratios ``other/measured``. Returns the Comparison (None when benchmarks are
    disabled, e.g. ``--benchmark-disable``)."""
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
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        benchmark.extra_info.update(info)
        return None
    mine = list(stats.stats.data)
    cmp = Comparison({measured: Side(measured, mine),
                      **{n: Side(n, t[:len(mine)]) for n, t in other_times.items()}},
                     len(mine))
    for n in others:
        r = cmp.ratio(n, measured)
        info[f"ratio {n}/{measured}"] = round(r.value, 4)
        info[f"ratio {n}/{measured} band"] = [round(r.lo, 4), round(r.hi, 4)]
        info[f"{n} min_s"] = cmp[n].min
    benchmark.extra_info.update(info)
    return cmp
