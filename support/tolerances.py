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
    # inequality), about 0.03 MPa, so the SE by 0.03/sqrt(n) <= 0.008 for n >= 15: 0.01.
    # mpa:mean's 0.05 would accept anything from 0.01 to 0.11 for a printed 0.06.
    "mpa:se": Tol(printed=True, atol=0.01, key="mpa:se"),
    # Ratios of wall-clock times on other hardware (the notes' laptop): a factor of 2.
    "timing:ratio": Tol(factor=2.0, key="timing:ratio"),
    # An order-of-magnitude figure ("about 10 MB", "about 60-fold").
    "order": Tol(factor=3.0, key="order"),
    # A count of orders of magnitude ("four orders of magnitude worse"), measured as log10 of
    # a ratio: an additive half order either way, the count the ratio rounds to. ("order"
    # multiplies: applied to a logarithm it would accept 4/3 to 12 orders.)
    "orders": Tol(atol=0.5, key="orders"),
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


@dataclass(frozen=True)
class Bound:
    """A bound of the qualitative claim on a figure ("<= 1e-15", "> 1.2"): contradicting it
    beyond noise makes the claim *fail*, whatever the stated figure's tolerance says."""

    op: str
    value: float

    @classmethod
    def parse(cls, text: str) -> "Bound":
        m = _BOUND.match(str(text))
        if not m:
            raise ValueError(f"a bound reads like '<= 1e-15' or '> 1.2', not {text!r}")
        return cls(m.group(1), as_float(m.group(2)))

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"

    def judge(self, lo: float, hi: float) -> str:
        """``within`` (the whole interval satisfies it), ``broken`` (none of it does) or
        ``undecided``."""
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
    for an exact measurement. A bound that is undecided leaves the qualitative claim
    undecided, so it outranks a figure outside its tolerance. The second element says what
    decided: "bound" or "tolerance" ("" when nothing was compared)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    lo, hi = (interval if interval is not None else (value, value)) if number else (None, None)
    states = [b.judge(float(lo), float(hi)) for b in bounds] if number else []
    if "broken" in states:
        return "broken", "bound"
    if "undecided" in states:
        return "undecided", "bound"
    if stated is None or stated == "":
        return "within", "bound" if bounds else ""
    if isinstance(stated, (bool, str)) and not _numeric_text(stated) or not number:
        return ("within" if value == stated else "outside"), "tolerance"
    if math.isnan(float(lo)) or math.isnan(float(hi)):
        return ("within" if math.isnan(as_float(stated)) else "outside"), "tolerance"
    a, b = band(stated, tol or TABLE["printed"])
    if a <= lo and hi <= b:
        return "within", "tolerance"
    if hi < a or lo > b:
        return "outside", "tolerance"
    return "undecided", "tolerance"


def _numeric_text(stated) -> bool:
    if isinstance(stated, bool) or not isinstance(stated, str):
        return False
    try:
        as_float(stated)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- error models
# A property that holds "up to rounding" (two computations of one quantity: autodiff and the
# hand chain rule, forward and reverse mode, a scaled and an unscaled loss, one order of a
# sum and another) is judged against a bound from the standard model of floating-point
# arithmetic (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 2.2, 3.1):
#
#     fl(a op b) = (a op b)(1 + d),  |d| <= u,  u = eps / 2, the dtype's unit roundoff.
#
# A result that passes through at most n roundings is off by at most
#
#     gamma_n * magnitude,   gamma_n = n u / (1 - n u)          (Higham, Lemma 3.1)
#
# where the *magnitude* is the same computation with every term replaced by its absolute
# value: for a sum, the sum of the absolute terms; for a dot product, sum |x_i y_i|; for a
# difference a - b, |a| + |b|; an error a quantity carries in from earlier roundings counts
# with the size of what it came from. Two computations of the same quantity differ by at
# most the sum of their bounds. Elementary functions (tanh, sin, cos, exp, sqrt) count as
# ELEMENTARY_ULPS roundings each (glibc, XLA and PyTorch's vectorised kernels are accurate
# to a few ulps; sqrt is correctly rounded). An iteration that does not expand errors (a
# contraction such as SGD on a convex bowl at a stable step, or steps fed the same
# gradients) adds its per-step roundings: n is then steps x roundings per step.
#
# A bound relative to the result would be wrong wherever terms cancel (a gradient element
# that is a small sum of large products: AMP-02, AD-03); a bound relative to the magnitude is
# what rounding can do, whatever the example. The models are first order (the gamma
# formula covers the products of (1 + d) exactly; the propagation through a function with
# a derivative of size <= 1, tanh or sin, is linearised), so each property records the share
# of its bound its worst example used (a registry figure with bound "<= 1") and the worst
# error itself: a release that loses accuracy moves those figures long before it fails.

ELEMENTARY_ULPS = 4


def unit_roundoff(dtype) -> float:
    """u = eps / 2 of ``dtype``: a NumPy, torch or JAX dtype, or its name ("float32")."""
    import numpy as np
    name = str(dtype).replace("torch.", "")
    if name == "bfloat16":
        return 2.0 ** -8
    if isinstance(dtype, str) or type(dtype).__module__.startswith("torch"):
        return float(np.finfo(np.dtype(name)).eps) / 2.0
    return float(np.finfo(dtype).eps) / 2.0


def gamma(n: float, dtype) -> float:
    """gamma_n = n u / (1 - n u): the relative error of n roundings in ``dtype``."""
    nu = n * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"{n} roundings in {dtype}: the bound gamma_n needs n u < 1")
    return nu / (1.0 - nu)


@dataclass(frozen=True)
class ErrorModel:
    """How far ``computations`` independently rounded computations of one quantity can be
    apart: each passes through at most ``ops + per_n * n`` roundings (n: the length of the
    longest sum, or the number of steps of an iteration) applied to terms of at most the
    magnitude the test computes. ``why`` counts the roundings."""

    key: str
    dtype: str
    ops: int
    per_n: int = 0
    computations: int = 2
    why: str = ""

    def roundings(self, n: int = 0) -> int:
        return self.ops + self.per_n * n

    def bound(self, magnitude, n: int = 0):
        """The largest difference rounding can make, elementwise for an array magnitude."""
        return self.computations * gamma(self.roundings(n), self.dtype) * magnitude

    def share(self, error, magnitude, n: int = 0) -> float:
        """The largest share of the bound used: max(|error| / bound); <= 1 holds."""
        return share_of_bound(error, self.bound(magnitude, n))

    def describe(self, n: int = 0) -> str:
        return (f"{self.computations} x gamma_{self.roundings(n)} ({self.dtype}, "
                f"u = {unit_roundoff(self.dtype):.3g}) x magnitude: {self.why}")


def share_of_bound(error, bound) -> float:
    """max(|error| / bound) over the elements; 0/0 counts 0, anything over a zero bound inf."""
    import numpy as np
    e = np.abs(np.asarray(error, dtype=np.float64)).ravel()
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), np.shape(error)).ravel() \
        if np.ndim(bound) else np.full(e.shape, float(bound))
    if e.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(e == 0, 0.0, e / b)
    return float(np.max(s))


_F = ELEMENTARY_ULPS
MODELS: dict[str, ErrorModel] = {m.key: m for m in (
    ErrorModel(
        "amp02:scaled-backward", "float32", ops=8, per_n=1,
        why="the loss scaled by S and its backward against S times the unscaled backward, "
            "the forward shared: the MSE backward (2/N, the difference, the incoming S: 3), "
            "the product with W2 (1), tanh's backward (1), the batch sum of the weight "
            "gradients (n = 16 rows), the final S x g (1), the cast of S (1), slack (1); "
            "magnitude: the backward with every factor replaced by its absolute value, "
            "times S"),
    ErrorModel(
        "ad:chain-rule-float64", "float64", ops=12 + 2 * _F, per_n=1,
        why="the hand chain rule (NumPy) against autodiff (torch, jax.grad), each with its "
            "own forward: W x + b (n = inputs + hidden, the two dot products), tanh "
            f"({_F} ulps) in the forward and in 1 - a^2 ({_F}), + c, - y, 2 r, the "
            "products of the chain (4), 1 - a^2 (2), slack (2); magnitude: "
            "toy.hand_magnitudes (each adjoint with |.| of every factor, the residual with "
            "what its terms carry)"),
    ErrorModel(
        "ad:jacobian-float64", "float64", ops=8 + 2 * _F, per_n=1,
        why="jacfwd against jacrev of tanh(A x) sum(sin x) + (A x)^2: A x (n = inputs), "
            f"tanh and sin/cos ({_F} ulps each), 1 - t^2 (2), the three products of a term "
            "(3), the two sums of terms (2), slack (1); magnitude: every term of "
            "the Jacobian element by absolute value, with what A x and tanh carry"),
    ErrorModel(
        "sum:two-orders", "float32", ops=0, per_n=1,
        why="a recursive sum of n terms forwards and backwards: each within gamma_(n-1) "
            "of the exact sum (n - 1 additions, Higham 4.2); magnitude: sum |x_i|"),
    ErrorModel(
        "acc:micro-batches-float64", "float64", ops=8, per_n=1,
        why="d/dw of mean((w x)^2) over the batch against the micro-batch backward passes "
            "summed in .grad (with or without /k): the products w x, (w x) x, 2, 1/n, "
            "1/k (5), the sums over n rows and over k micro-batches (n), slack (3); "
            "every term has the sign of w, so the magnitude is the gradient itself"),
    ErrorModel(
        "adam:first-step-float64", "float64", ops=14, computations=2,
        why="the reference Adam's first step (m, v: 2 + 3; the bias corrections 2 + 1; "
            "sqrt, + eps, /: 3; x lr 1; |theta| / lr 1) against the closed form "
            "lr |g| / (|g| + eps) (3); slack (1); magnitude: the step"),
    ErrorModel(
        "optim:lockstep-float64", "float64", ops=4, per_n=14, computations=2,
        why="two float64 optimizer paths that are equal in exact arithmetic (the same "
            "gradients scaled, a rotated problem, an L2 term written two ways), compared "
            "step by step: per step the gradient (2), m and v (5), the bias corrections "
            "(3), sqrt, + eps, / (3), theta - lr d (1), n = steps; each path is fed the "
            "same gradients or is a contraction (SGD at a stable step), so the per-step "
            "roundings add up; the rotation and the start (4); magnitude: the largest "
            "|theta| plus the largest step on the path"),
    ErrorModel(
        "adamw:decay-float64", "float64", ops=8, computations=1,
        why="one step's move of torch's AdamW minus the move of torch's Adam fed the same "
            "gradients (their adaptive parts are bitwise equal), against -lr lam theta: the "
            "decay product theta (1 - lr lam) (2), the two parameter updates (2), the two "
            "moves and their difference (3), -lr lam theta (1); magnitude: |theta| before "
            "and after the step on both paths, plus |lr lam theta|"),
    ErrorModel(
        "loop:batch-mean-float64", "float64", ops=6, per_n=1, computations=2,
        why="the full-batch gradient X^T (2 (X w - y) / n) against the mean of the "
            "mini-batch gradients: a dot product over n rows (the full batch; the "
            "batches' 64 rows and the mean over the batches fit in the same n), "
            "the residual and 2/n (3), slack (3); magnitude: (2/n) sum |x_ij y_i|"),
    ErrorModel(
        "loop:elementwise-float64", "float64", ops=6, computations=2,
        why="a loss's gradient of one element (MSE: 2 e / n, L1: sign(e) / n, and their "
            "ratio when the errors double) by torch and by the formula: 1/n, x 2, the "
            "difference with 0, the incoming gradient (4), slack (2); magnitude: the "
            "formula's value"),
    ErrorModel(
        "shape:all-pairs-mean-float64", "float64", ops=6, per_n=2, computations=1,
        why="the gradient of the all-pairs MSE at the batch mean, exactly 0: the mean of y "
            "(n) and the sum over the n pairs (n), p - y_j, 1/n^2, x 2 (3), slack (3); "
            "magnitude: (2/n^2) sum_j (|p| + |y_j|)"),
    ErrorModel(
        "jax:vmap-grad-float64", "float64", ops=8 + 2 * _F, per_n=1,
        why="jit(vmap(grad f)) against jit(grad f) row by row, f(w, x) = sin(w.x) sum(w^2): "
            f"w.x and sum w^2 (n = 3, the length of w), sin and cos ({_F} ulps "
            "each), the products of the two terms (4), their sum (1), slack (3); "
            "magnitude: every term by absolute value, with what w.x carries"),
)}


def model(key: str) -> ErrorModel:
    try:
        return MODELS[key]
    except KeyError:
        raise KeyError(f"unknown error model {key!r}; known: {sorted(MODELS)}") from None
