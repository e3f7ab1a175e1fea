"""What load does to each timing figure, measured: the widening a busy round's interval gets.

Load moves a timing ratio by an amount that belongs to the comparison, not to the load: a side
that uses two threads loses more than one that uses one, dispatch-bound work slows more than
arithmetic, and work that hands results between threads can get faster. So no single rule
turns a busy machine's interval into an idle one's. What can: each figure's own, measured
response to load. ``python -m support load-sensitivity`` runs every timing claim idle, with one
and with two CPU-bound processes beside it, several times each, and keeps, per figure, the
load its comparison measured (cores, :mod:`support.machine.load`) and how far its value moved
from the idle runs' median, each way, at each load:

* ``up``: the largest loaded value over the idle median (at least 1): how much load can have
  inflated the figure;
* ``down``: the smallest (at most 1): how much it can have deflated it.

A figure decided from busy rounds (:mod:`support.machine.timing`) then has its interval
``[lo, hi]`` widened to ``[lo / up, hi / down]`` at the load it measured: the idle value it
stands for lies there whichever way the load moved it. Between the measured loads the factors
are interpolated (from 1 at no load), beyond the largest one extrapolated along the last
segment in log scale, so that the interval widens with the load and never to ``[0, inf]``.
Idle, nothing changes: a figure decided from quiet rounds is never widened.

The file (``support/resources/load_sensitivity.json``) says on which machine kind, with how
many cores and when it was measured. On another machine the same loads may cost more or less;
``python -m support load-sensitivity`` re-measures it there.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from support.paths import RESOURCES

FILE = RESOURCES / "load_sensitivity.json"


def key(claim_id: str, figure: str, variant: str = "") -> str:
    """A figure's key in the file: ``"JIT-18 | eager/jit"``, ``"AD-01 | ... | torch"``."""
    return " | ".join([claim_id, figure] + ([variant] if variant else []))


@dataclass(frozen=True)
class Widening:
    """The factors a busy interval is widened by: ``[lo / up, hi / down]``."""

    down: float
    up: float
    # where they come from: the figure's own measurement, or why not
    source: str

    def apply(self, interval: tuple[float, float]) -> tuple[float, float]:
        lo, hi = interval
        return lo / self.up, hi / self.down

    @property
    def text(self) -> str:
        return f"x{self.down:.3g} to x{self.up:.3g}"


@lru_cache(maxsize=4)
def table(path: Path = FILE) -> dict:
    """The measured sensitivities (empty where the file is missing)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}


def points(entry: dict) -> list[tuple[float, float, float]]:
    """(load, down, up) of an entry, from no load (1, 1) up, by load."""
    pts = sorted((float(p["load"]), float(p["down"]), float(p["up"]))
                 for p in entry.get("points", ()))
    return [(0.0, 1.0, 1.0)] + [p for p in pts if p[0] > 0]


def _interpolate(pts, load: float, i: int) -> float:
    """log-linear in the load between measured points, extrapolated along the last
    segment (never below no change: a factor keeps its direction)."""
    logs = [(p[0], math.log(p[i])) for p in pts]
    if load <= logs[-1][0] or len(logs) < 2:
        for (l0, v0), (l1, v1) in zip(logs, logs[1:]):
            if load <= l1:
                w = (load - l0) / (l1 - l0) if l1 > l0 else 1.0
                return math.exp(v0 + w * (v1 - v0))
        return math.exp(logs[-1][1])
    (l0, v0), (l1, v1) = logs[-2], logs[-1]
    slope = (v1 - v0) / (l1 - l0) if l1 > l0 else 0.0
    return math.exp(v1 + slope * (load - l1))


def widening(claim_id: str, figure: str, variant: str, load: float,
             path: Path = FILE) -> Widening:
    """The factors for a figure decided from rounds that measured ``load`` cores of other
    work. A figure the file does not hold (a new claim, a file of another machine) takes the
    largest factors any measured figure has at that load, and says so."""
    data = table(path).get("figures", {})
    entry = data.get(key(claim_id, figure, variant))
    if entry is not None:
        pts = points(entry)
        return Widening(min(1.0, _interpolate(pts, load, 1)), max(1.0, _interpolate(pts, load, 2)),
                        f"measured for this figure ({key(claim_id, figure, variant)})")
    if not data:
        # nothing measured at all: the figure cannot be read as an idle one's
        return Widening(0.0 + 1e-300, math.inf, "no load sensitivity measured on this "
                        "machine (python -m support load-sensitivity)")
    downs, ups = zip(*[(_interpolate(points(e), load, 1), _interpolate(points(e), load, 2))
                       for e in data.values()])
    return Widening(min(1.0, min(downs)), max(1.0, max(ups)),
                    f"no sensitivity measured for {key(claim_id, figure, variant)}: the largest "
                    f"of the {len(data)} measured figures")


def described(path: Path = FILE) -> str:
    """One line for reports: where the sensitivities were measured."""
    meta = table(path).get("measured", {})
    if not meta:
        return "no load sensitivities measured (python -m support load-sensitivity)"
    return (f"load sensitivities measured on {meta.get('machine', '?')}, "
            f"{meta.get('cores', '?')} cores, {meta.get('date', '?')} "
            f"({meta.get('runs', '?')} runs at each load)")


# --------------------------------------------------------------------------- the table measured
# (python -m support load-sensitivity: support/commands/load_sensitivity.py)
def figures_of(report: dict, ids) -> list[dict]:
    """Every timing figure of ``ids`` in a report: key, value, the load its rounds measured
    and whether it was decided from busy rounds."""
    out = []
    for c in report.get("claims", []):
        if c["id"] not in ids:
            continue
        for v in c.get("variants", []):
            for name, fig in v.get("figures", {}).items():
                load = fig.get("load") if isinstance(fig, dict) else None
                if not load or not isinstance(fig.get("value"), (int, float)):
                    continue
                out.append({"key": key(c["id"], name, v.get("variant", "")),
                            "value": float(fig["value"]), "load": float(load["cores"]),
                            "busy": bool(load["busy"])})
    return out


def factors(idle: list[float], loaded: list[tuple[float, float]]) -> dict:
    """One load's point: the median load measured, and how far the values moved from the
    idle median each way (never past no change)."""
    base = statistics.median(idle)
    values = [v for _, v in loaded]
    return {"load": round(statistics.median(l for l, _ in loaded), 3),
            "down": round(min(1.0, min(values) / base), 4),
            "up": round(max(1.0, max(values) / base), 4)}


def summarise(sessions: list[dict]) -> dict:
    """Per figure, from the sessions' readings (each ``{"k": load, "figures": [...]}``):
    its idle values, its loaded readings per k, and its points."""
    per: dict[str, dict] = {}
    for s in sessions:
        for f in s["figures"]:
            e = per.setdefault(f["key"], {"idle": [], "loaded": {}})
            if not f["busy"]:
                e["idle"].append(round(f["value"], 6))
            else:
                e["loaded"].setdefault(str(s["k"]), []).append([round(f["load"], 3),
                                                                round(f["value"], 6)])
    for e in per.values():
        e["points"] = [dict(factors(e["idle"], pts), beside=int(k))
                       for k, pts in sorted(e["loaded"].items()) if e["idle"] and pts]
    return per
