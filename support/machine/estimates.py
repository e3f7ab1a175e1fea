"""Timing statistics and their intervals: what a run's trials say of a figure, and how surely.

A ratio ``min(A) / min(B)`` of a comparison (:mod:`support.machine.timing`) comes with a 95 %
bootstrap interval: the rounds (a round holds one trial of every side, run back to back, so
they saw the same load) are resampled with replacement, and the ratio of the minima is
recomputed on each resample (:class:`Estimate`). The interval is how well the run pinned the
minima down: on a quiet machine the smallest trials agree and it is narrow; under bursts of
load it widens. It also spans the 95 % interval of the median of the rounds' own ratios
(:func:`median_interval`): load that no probe sees (a neighbour on the other hyperthread, a
shared cache filled) slows the trials of a round by a different amount in each round, and
where the rounds disagree the figure must not be decided by the luckiest trials. A figure in
the registry ("eager/jit", with the bound of the qualitative claim and the notes' stated
value) is then

* **decided** when the whole interval lies on one side of each bound and of each edge of the
  stated figure's tolerance: holds, drift (stated figure missed) or fails (bound contradicted);
* **undecided** otherwise: the claim is **inconclusive**, which never fails a run and never
  counts as holds.

:func:`support.harness.timed.settle` looks at a figure again after each extension of its
rounds, at the level :func:`look_level` gives each look (:func:`set_look`).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

# the bootstrap: resamples per interval and its coverage
RESAMPLES = 2000
LEVEL = 0.95
# settle() (support.harness.timed) looks at a figure again after every extension, and a
# figure that truly sits on its bound would sooner or later step over it by chance if every
# look used LEVEL (a median of paired rounds on a ratio of exactly 1: "holds" in 12 % of
# simulated runs of 12 looks). The first look keeps LEVEL; look j >= 1 spends 1 - LEVEL over
# j (j + 1) of it, so that all the looks together err at most twice as often as one
# (support/tests/test_timing.py simulates it)
_level = LEVEL


def look_level(look: int) -> float:
    """The confidence level of settle()'s ``look``-th look at a figure (0: the first)."""
    return LEVEL if look == 0 else 1 - (1 - LEVEL) / (look * (look + 1))



def set_look(look: int) -> None:
    """Judge the intervals made from now on at the level of settle()'s ``look``-th look (0:
    the first look's LEVEL, which settle() restores when it is done)."""
    global _level
    _level = look_level(look)


def _z(level: float) -> float:
    return statistics.NormalDist().inv_cdf(1 - (1 - level) / 2)


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
            paired = (float(safe_div(np.array(self.paired[0]), np.array(other.paired[1]))),
                      float(safe_div(np.array(self.paired[1]), np.array(other.paired[0]))))
        return self._with(f"({self.label}) / ({other.label})", self.value / other.value,
                          safe_div(self.boot, other.boot), paired, per_round, source, other)

    def inverse(self) -> "Estimate":
        paired = None
        if self.paired is not None:
            paired = (float(safe_div(np.array(1.0), np.array(self.paired[1]))),
                      float(safe_div(np.array(1.0), np.array(self.paired[0]))))
        per_round = None
        if self.per_round is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                per_round = 1.0 / self.per_round
        return self._with(f"1 / ({self.label})", 1 / self.value,
                          safe_div(np.ones_like(self.boot), self.boot), paired, per_round,
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


def safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b with x / 0 = inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.divide(a, b)
    return np.where(np.isnan(out), np.inf, out)


def resample_index(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(RESAMPLES, n))
