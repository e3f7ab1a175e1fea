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
            return f">= stated (-{self.atol:g})" if self.atol else ">= stated"
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
    # A mean of paired differences over n runs (leaky - honest, MLP - tree; MPa): the same
    # seeds and folds re-run, so only the builds move it. A torch build moves a run by about
    # 0.02 MPa (protocol §7.4), a paired difference by about 0.03 and the mean of n >= 15 of
    # them by 0.03/sqrt(n) < 0.01 when the moves are independent; one arm can also move as a
    # whole (scikit-learn moved HGB by 0.02, §7.3): 0.03 in all. mpa:mean's 0.05 would let a
    # printed -0.04 change sign.
    "mpa:difference": Tol(printed=True, atol=0.03, key="mpa:difference"),
    # A standard error of n paired runs (std/sqrt(n), MPa): the std of the paired
    # differences moves by at most the RMS of the differences' own movement (the triangle
    # inequality), about 0.03 MPa, so the SE by 0.03/sqrt(n) <= 0.008 for n >= 15; and the
    # notes print their own SE to two decimals, so it lay anywhere within 0.005 of the
    # printed figure before a build moved it: 0.015. (0.01 decided the scaler leak's SE,
    # printed 0.06, at a hair: 0.04999 on one CPU's kernels, 0.053 on another's.)
    # mpa:mean's 0.05 would accept anything from 0.01 to 0.11 for a printed 0.06.
    "mpa:se": Tol(printed=True, atol=0.015, key="mpa:se"),
    # A spread of n runs (the std over seeds and folds, MPa): by the same triangle inequality
    # it moves by at most the RMS of the runs' own movement across builds, about 0.02-0.03
    # MPa (protocol §7.4), so 0.03. mpa:mean's 0.05 is a sixth of a printed 0.29.
    "mpa:spread": Tol(printed=True, atol=0.03, key="mpa:spread"),
    # Ratios of wall-clock times on other hardware (the notes' laptop): a factor of 2.
    "timing:ratio": Tol(factor=2.0, key="timing:ratio"),
    # A time ratio whose slow side allocates tens of MB per call (eager JAX on 2M float64:
    # a fresh 16 MB buffer per op: the jit table's elementwise chain and ten-step loop, JIT-17
    # and JIT-18). Its time is mostly page faults, and how many a call takes depends on the
    # allocator's state, i.e. on what the process did before, not on the release: JIT-18's
    # eager/jit read 2.4-7.8 across ten runs of the suite on one machine (15,000-45,000
    # faults per eager call in fresh processes; 2.3-12 with glibc's mmap threshold pinned
    # either way), JIT-17's 1.5-2.5. timing:ratio's factor 2 would turn with the process, not
    # the release. A factor of 5.
    "timing:allocation": Tol(factor=5.0, key="timing:allocation"),
    # An order-of-magnitude figure ("about 10 MB", "about 60-fold").
    "order": Tol(factor=3.0, key="order"),
    # A count of orders of magnitude ("four orders of magnitude worse"), measured as log10 of
    # a ratio: an additive half order either way, the count the ratio rounds to. ("order"
    # multiplies: applied to a logarithm it would accept 4/3 to 12 orders.)
    "orders": Tol(atol=0.5, key="orders"),
    # "about" a figure: within 25 %.
    "about": Tol(rtol=0.25, key="about"),
}


# How far rounding alone moves a measured figure: the half-width of the interval through
# which a bound is decided when nothing but rounding separates the figure from the bound (a
# sign that another CPU's kernels could flip is no property of the libraries).
REACH: dict[str, float] = {
    # A mean of 5 trained networks (one seed's mean over the 5 folds, MPa). mpa:mean's
    # 0.05 for a mean of 25 is a mean of 5 moving sqrt(5) times as far: 0.11. Measured
    # (torch 2.13, the grouped split's 5 seeds): AVX2 (AMD EPYC) against AVX-512 kernels
    # (Xeon, Sapphire Rapids) moved them by 0.061, 0.014, 0.018, 0.037 and 0.049 MPa (seed
    # 0's gap MLP - tree from -0.033 to +0.028); the batched networks against train() by
    # 0.004-0.015; the stacked weights stored transposed by up to 0.045.
    "mpa:mean of 5": 0.05 * math.sqrt(5),
    # The best of the forty central differences of the toy network (protocol §4.2), as a
    # count of orders of magnitude (log10 of a ratio to it). Its minimum is a round-off
    # effect: which step wins, and its error, follow the order in which the float64 loss is
    # rounded. Measured (torch 2.13, JAX 0.10.2, NumPy on AVX2): NumPy's loss, as the notes'
    # script forms it, bottoms out at 1.398e-12; the same differences of torch's float64
    # loss at 6.47e-13, of JAX's at 4.25e-13, of torch's with W x summed by halving (or
    # NumPy's with its sums reversed) at 3.80e-13: up to 0.57 orders lower. A factor of 4:
    # 0.60 orders, below only (REACH_SIDE): every other computation gives fewer orders.
    "orders:best central difference": math.log10(4),
}


# A reach that goes one way only: every computation it stands for moves the figure to the
# same side of the one measured ("below": a smaller figure), so the interval stops at it.
REACH_SIDE: dict[str, str] = {
    "orders:best central difference": "below",
}


def reach_text(key: str) -> str:
    """A reach in words: "+- 0.11", or "- 0.60" for one that goes below only."""
    sign = {"below": "-", "above": "+"}.get(REACH_SIDE.get(key, ""), "+-")
    return f"{sign} {REACH[key]:.2f}"


def closeness(key: str) -> dict:
    """``rtol`` and ``atol`` of a table entry, for ``numpy.testing.assert_allclose`` or
    ``torch.allclose`` in a test that compares two computations of one quantity (a contrast,
    not a figure): the table's numbers, not a copy of them."""
    tol = TABLE[key]
    return {"rtol": tol.rtol, "atol": tol.atol}


def within_reach(value: float, key: str) -> dict:
    """``claim.check`` arguments for a figure that only rounding separates from its bound:
    the interval ``value`` +- ``REACH[key]`` (on one side only where ``REACH_SIDE`` says
    so), and a note that says so."""
    r, side = REACH[key], REACH_SIDE.get(key, "")
    lo, hi = value - (0 if side == "above" else r), value + (0 if side == "below" else r)
    return {"interval": (lo, hi),
            "note": f"interval {reach_text(key)}, how far rounding alone moves the figure "
                    f"(support/rules/tolerances.py, REACH[{key!r}])"}


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


def band(stated: "str | float | int", tol: Tol) -> tuple[float, float]:
    """The closed interval of measured values that ``tol`` accepts for ``stated``."""
    s = as_float(stated)
    if math.isnan(s) or math.isinf(s):
        return s, s
    if tol.at_most:
        return -math.inf, s + tol.atol
    if tol.at_least:
        return s - tol.atol, math.inf
    if tol.factor:
        if s == 0:
            return 0.0, 0.0
        a, b = s / tol.factor, s * tol.factor
        return min(a, b), max(a, b)
    if tol.printed:
        # a hair of slack for the binary representation of the half-way point
        half = max(printed_halfwidth(stated) * (1 + 1e-9), tol.atol)
        return s - half, s + half
    half = tol.atol + tol.rtol * abs(s)
    return s - half, s + half


def within(measured: float, stated: "str | float | int", tol: Tol) -> bool:
    """Whether ``measured`` matches ``stated`` under ``tol``. NaN matches only NaN."""
    s, m = as_float(stated), float(measured)
    if math.isnan(s) or math.isnan(m):
        return math.isnan(s) and math.isnan(m)
    lo, hi = band(stated, tol)
    return lo <= m <= hi


def from_dict(d: dict | None) -> Tol:
    """A tolerance as recorded in a report (``Tol.as_dict``) back as a :class:`Tol`."""
    if not d:
        return TABLE["exact"]
    return Tol(**{k: v for k, v in d.items() if k in Tol.__dataclass_fields__})


def moved(a, b, stated, tol: "Tol | dict | None") -> bool:
    """Whether two measurements of one stated figure differ by more than its tolerance
    allows around the stated value (a move inside it is noise for the notes' purposes).
    Non-numbers compare for equality; a one-sided tolerance (a bound) never moves by value,
    only by crossing, which the figures' outcomes say."""
    num = lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    x, y = num(a), num(b)
    if x is None or y is None:
        return a != b
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) != math.isnan(y)
    t = tol if isinstance(tol, Tol) else from_dict(tol)
    if t.at_most or t.at_least:
        return False
    if t.factor:
        if x == 0 or y == 0:
            return x != y
        return max(abs(x), abs(y)) / min(abs(x), abs(y)) > t.factor
    try:
        lo, hi = band(stated, t)
    except (TypeError, ValueError):
        return x != y
    return abs(x - y) > (hi - lo) if hi > lo else x != y


# --------------------------------------------------------------------------- bounds
_BOUND = re.compile(r"^\s*(<=|>=|<|>)\s*([-+0-9.eE_,]+)\s*$")
_TRUTH = re.compile(r"^\s*==\s*(true|false)\s*$")


@dataclass(frozen=True)
class Bound:
    """A bound of the qualitative claim on a figure ("<= 1e-15", "> 1.2", or "== true" for a
    yes-or-no figure: "the examples stay apart"): contradicting it beyond noise makes the
    claim *fail*, whatever the stated figure's tolerance says."""

    op: str
    value: "float | bool"

    @classmethod
    def parse(cls, text: str) -> "Bound":
        m = _BOUND.match(str(text))
        if m:
            return cls(m.group(1), as_float(m.group(2)))
        m = _TRUTH.match(str(text))
        if m:
            return cls("==", m.group(1) == "true")
        raise ValueError(f"a bound reads like '<= 1e-15', '> 1.2' or '== true', not {text!r}")

    def __str__(self) -> str:
        if self.op == "==":
            return f"== {str(self.value).lower()}"
        return f"{self.op} {self.value:g}"

    def judge(self, lo, hi) -> str:
        """``within`` (the whole interval satisfies it), ``broken`` (none of it does) or
        ``undecided``. A yes-or-no bound takes the value itself (``lo`` and ``hi`` alike)."""
        if self.op == "==":
            return "within" if lo is self.value and hi is self.value else "broken"
        ok = {"<": lambda x: x < self.value, "<=": lambda x: x <= self.value,
              ">": lambda x: x > self.value, ">=": lambda x: x >= self.value}[self.op]
        if ok(lo) and ok(hi):
            return "within"
        if not ok(lo) and not ok(hi):
            return "broken"
        return "undecided"


def judge(value, interval, stated=None, tol: "Tol | None" = None,
          bounds: "tuple[Bound, ...]" = ()) -> str:
    """The outcome of one figure (see :func:`judge_where`)."""
    return judge_where(value, interval, stated, tol, bounds)[0]


def judge_where(value, interval, stated=None, tol: "Tol | None" = None,
                bounds: "tuple[Bound, ...]" = ()) -> tuple[str, str]:
    """The outcome of one figure: ``broken`` (a bound contradicted beyond noise), ``outside``
    (the stated figure's tolerance missed beyond noise: drift), ``undecided`` (the interval
    straddles a bound or an edge of the tolerance) or ``within``.

    ``interval`` is ``(lo, hi)`` around ``value`` (a timing or a mean and its error), or None
    for an exact measurement. The worst decided comparison decides: a bound broken, then the
    stated figure's tolerance missed beyond noise (it moved, whatever its bound's interval
    still straddles), then a bound left undecided. The second element says what decided:
    "bound" or "tolerance" ("" when nothing was compared)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    lo, hi = (interval if interval is not None else (value, value)) if number else (None, None)
    states = [b.judge(float(lo), float(hi)) for b in bounds if b.op != "=="] if number else []
    truths = [b for b in bounds if b.op == "=="]
    if truths and not isinstance(value, bool):
        raise TypeError(f"a yes-or-no bound ({truths[0]}) judges True or False, not {value!r}")
    states += [b.judge(value, value) for b in truths]
    if "broken" in states:
        return "broken", "bound"
    against = _against_stated(value, lo, hi, number, stated, tol)
    if against == "outside":
        return "outside", "tolerance"
    if "undecided" in states:
        return "undecided", "bound"
    if against is None:
        return "within", "bound" if bounds else ""
    return against, "tolerance"


def _against_stated(value, lo, hi, number: bool, stated, tol) -> str | None:
    """``within``, ``outside`` or ``undecided`` against the stated figure's band; None when
    nothing is stated."""
    if stated is None or stated == "":
        return None
    if not numeric_stated(stated) or not number:
        return "within" if value == stated else "outside"
    if math.isnan(float(lo)) or math.isnan(float(hi)):
        return "within" if math.isnan(as_float(stated)) else "outside"
    a, b = band(stated, tol or TABLE["printed"])
    if a <= lo and hi <= b:
        return "within"
    if hi < a or lo > b:
        return "outside"
    return "undecided"


def numeric_stated(stated) -> bool:
    """Whether a stated figure is a number (or the text of one, "1.7e-18"), compared by a
    band, rather than a yes-or-no or a word, compared for equality."""
    return not isinstance(stated, (bool, str)) or _numeric_text(stated)


def _numeric_text(stated) -> bool:
    if isinstance(stated, bool) or not isinstance(stated, str):
        return False
    try:
        as_float(stated)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- landings
def _lines(record: dict) -> list[tuple[str, float, str, float]]:
    """The numeric lines a recorded figure is judged by (its bounds, its stated figure's band
    edges), each as (label, value, the wrong side: "above" or "below", the band's
    half-width, 0 for a bound or a one-sided band)."""
    out = []
    for text in record.get("bound") or []:
        try:
            b = Bound.parse(text)
        except ValueError:
            continue
        if b.op != "==":
            out.append((f"bound {b}", float(b.value), "below" if b.op[0] == ">" else "above",
                        0.0))
    stated = record.get("stated")
    if stated is None or record.get("reference") or not numeric_stated(stated):
        return out
    try:
        a, b = band(stated, from_dict(record.get("tolerance")))
    except (TypeError, ValueError):
        return out
    half = (b - a) / 2 if math.isfinite(a) and math.isfinite(b) else 0.0
    if a == b:
        return out                  # exact: any difference crosses, there is no scale
    if math.isfinite(a):
        out.append((f"edge {a:.4g} of stated {stated}", a, "below", half))
    if math.isfinite(b):
        out.append((f"edge {b:.4g} of stated {stated}", b, "above", half))
    return out


def landing(record: dict) -> dict | None:
    """Where a measured figure (a report's record: value, interval, bound, stated,
    tolerance) landed against the lines that judge it (its bounds, the edges of its stated
    figure's band): ``past``, how far it lies on the wrong side of a line (negative: short
    of it, on the right side), as a share of the line itself where line and figure are
    positive (7.84 against < 6: 0.31; 0.75 against > 1.5: 1.0, a factor 2), else in
    half-widths of the measurement's own interval (a bound at 0); for a band's edge also
    ``widths``, in the band's half-widths (17.60 against 17.8's 17.7-17.9: 1.0). The line
    reported is the one crossed by least, else the nearest. ``near`` when ``past`` is at most
    1, within a factor 2 of the line: a control that lands a figure near its line moves it at
    the sentence's own scale; a sledgehammer lands it orders away (ReLU returning zeros puts
    an RMSE of 5.5 at 17). None for a non-number, an exact figure (a count: any difference
    crosses) or one with no line to measure from."""
    value = record.get("value")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    iv = record.get("interval")
    noise = (iv[1] - iv[0]) / 2 if iv and all(map(math.isfinite, iv)) else 0.0
    found = []
    for label, line, wrong, half in _lines(record):
        sign = 1 if wrong == "above" else -1
        if line > 0 and value > 0:
            past = (value / line if wrong == "above" else line / value) - 1
        elif noise > 0:
            past = sign * (value - line) / noise
        else:
            continue
        extra = {"widths": round(sign * (value - line) / half, 4)} if half > 0 else {}
        found.append((past, label, extra))
    if not found:
        return None
    crossed = [f for f in found if f[0] > 0]
    past, label, extra = min(crossed, key=lambda f: f[0]) if crossed else max(
        found, key=lambda f: f[0])
    return {"line": label, "past": round(past, 4), **extra, "near": abs(past) <= 1}
