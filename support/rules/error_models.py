"""Rounding error models: the bounds of properties that hold "up to rounding", derived from
the dtype's unit roundoff, the number of roundings and the magnitudes involved (the
reasoning below). A claim test takes its model by key (``error_models.model("...")``) and
records the share of the bound its worst example used, a registry figure bounded by 1.
"""
from __future__ import annotations

from dataclasses import dataclass

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
