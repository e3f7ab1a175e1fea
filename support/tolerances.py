"""The one tolerance table.

Every measured figure is compared with the figure the notes state through a named entry
of ``TABLE``, keyed by dtype and kind of operation. A test that needs something else
passes an explicit :class:`Tol` and must say why (``why=``); the reason is written into
the report next to the measured value.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, asdict


@dataclass(frozen=True)
class Tol:
    atol: float = 0.0
    rtol: float = 0.0
    # "printed": half a unit of the last digit the notes printed, computed from the
    # stated value's text (17.7 -> +-0.05, 1.4e-12 -> +-0.05e-12).
    printed: bool = False
    # "at_most": the stated figure is an upper bound (the claim is "<= stated").
    at_most: bool = False
    # "at_least": the stated figure is a lower bound.
    at_least: bool = False
    # a multiplicative band: measured within [stated/factor, stated*factor]
    factor: float = 0.0
    key: str = ""
    why: str = ""

    def describe(self) -> str:
        if self.printed:
            base = "rounds to the printed figure (half a unit in its last digit)"
            if self.atol:
                base += f", or within {self.atol:g}"
            return base
        if self.at_most:
            return f"<= stated (+{self.atol:g})" if self.atol else "<= stated"
        if self.at_least:
            return "=> stated"
        if self.factor:
            return f"within x{self.factor:g} of stated"
        parts = []
        if self.atol:
            parts.append(f"atol {self.atol:g}")
        if self.rtol:
            parts.append(f"rtol {self.rtol:g}")
        return " + ".join(parts) or "exact"

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v not in (0.0, False, "")}
        d["text"] = self.describe()
        return d


TABLE: dict[str, Tol] = {
    # API facts, counts, exact arithmetic (x + x, integer counts, dtypes as strings).
    "exact": Tol(key="exact"),
    # float64 results of the same computation by two implementations (a few ulps apart):
    # the notes' 4.4e-16 / 2.2e-16 / 1.7e-18 figures. Asserted as an upper bound of 1e-15.
    "float64:agreement": Tol(atol=1e-15, at_most=True, key="float64:agreement"),
    # float64 gradients/Jacobians of random problems (property tests): a relative bound.
    "float64:gradient": Tol(rtol=1e-12, atol=1e-14, key="float64:gradient"),
    # float32 elementwise results (torch.testing's float32 defaults).
    "float32:elementwise": Tol(rtol=1.3e-6, atol=1e-5, key="float32:elementwise"),
    # float32 results through a reduction or a small network.
    "float32:network": Tol(rtol=1e-4, atol=1e-5, key="float32:network"),
    # A figure the notes print rounded: it holds if the measurement rounds to it.
    "printed": Tol(printed=True, key="printed"),
    # Single seed-0 fold-0 training runs (MPa): the printed figure, or within 0.05 MPa of
    # it, the spread the protocol's re-runs saw across torch builds.
    "mpa:single": Tol(printed=True, atol=0.05, key="mpa:single"),
    # Means over seeds and folds (MPa): scikit-learn's HGB moved ~0.02 between versions.
    "mpa:mean": Tol(printed=True, atol=0.05, key="mpa:mean"),
    # Ratios of wall-clock times on other hardware (the notes' laptop): a factor of 2.
    "timing:ratio": Tol(factor=2.0, key="timing:ratio"),
    # An order-of-magnitude figure ("about 10 MB", "about 60-fold").
    "order": Tol(factor=3.0, key="order"),
    # "about" a figure: within 25 %.
    "about": Tol(rtol=0.25, key="about"),
}


def resolve(tol: "str | Tol | None") -> Tol:
    if tol is None:
        return TABLE["printed"]
    if isinstance(tol, Tol):
        if not tol.key and not tol.why:
            raise ValueError("a per-claim tolerance override must say why (Tol(..., why=...))")
        return tol
    try:
        return TABLE[tol]
    except KeyError:
        raise KeyError(f"unknown tolerance key {tol!r}; known: {sorted(TABLE)}") from None


_NUM = re.compile(r"^\s*([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?\s*$")


def printed_halfwidth(stated: "str | float") -> float:
    """Half a unit in the last printed digit of ``stated``."""
    if isinstance(stated, str):
        text = stated
    elif isinstance(stated, int):
        text = str(stated)  # an integer figure is exact to the unit
    else:
        text = repr(float(stated))
    m = _NUM.match(text.replace(",", "").replace("_", ""))
    if not m:
        raise ValueError(f"cannot read a number from {stated!r}")
    decimals = len(m.group(3) or "")
    exp = int(m.group(4) or 0)
    return 0.5 * 10.0 ** (exp - decimals)


def as_float(stated: "str | float | int") -> float:
    if isinstance(stated, str):
        return float(stated.replace(",", "").replace("_", ""))
    return float(stated)


def within(measured: float, stated: "str | float | int", tol: Tol) -> bool:
    """Whether ``measured`` matches ``stated`` under ``tol``. NaN matches only NaN."""
    s = as_float(stated)
    m = float(measured)
    if math.isnan(s) or math.isnan(m):
        return math.isnan(s) and math.isnan(m)
    if math.isinf(s) or math.isinf(m):
        return s == m
    if tol.at_most:
        return m <= s + tol.atol
    if tol.at_least:
        return m >= s - tol.atol
    if tol.factor:
        if s == 0 or m == 0 or (s > 0) != (m > 0):
            return s == m
        return 1.0 / tol.factor <= m / s <= tol.factor
    if tol.printed:
        half = printed_halfwidth(stated)
        # a hair of slack for binary representation of the half-way point
        return abs(m - s) <= max(half * (1 + 1e-9), tol.atol)
    return abs(m - s) <= tol.atol + tol.rtol * abs(s)
