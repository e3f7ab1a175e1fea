"""Hypothesis strategies and the verdict of the "equal up to rounding" properties: toy networks
of a few shapes (:func:`networks`, :data:`shapes`, :func:`pinned`) for the chain-rule claims
(AD-03, AD-04, AD-08), judged against the float64 error models of ``support.rules.error_models``
(:func:`judge`, :func:`judge_worst`; :data:`EPS64` for AD-02 and AD-13), and :func:`normal`,
floats whose products never underflow, for the worked example's gradients (ACC-01, ACC-02).
"""
from __future__ import annotations

import numpy as np
from hypothesis import example
from hypothesis import strategies as st

from support.lab import toy
from support.rules import error_models

EPS64 = np.finfo(np.float64).eps


# ----------------------------------------------------------------------------- chain rule
# a few shapes, values free: every new shape costs JAX a compile per primitive, and the
# claim is about the formulas, which are shape-generic
shapes = st.sampled_from([(1, 1), (3, 4), (4, 2), (2, 5)])


values = st.floats(min_value=-2.0, max_value=2.0, allow_nan=False)


@st.composite
def networks(draw):
    hidden, inputs = draw(shapes)
    seed = draw(st.integers(0, 2**32 - 1))
    y = draw(values)
    return toy.draw(seed=seed, hidden=hidden, inputs=inputs, y=y)


# networks on which jax.grad and the hand chain rule differed by more than the old
# tolerance (rtol 1e-12, atol 1e-14: up to 2x) although they agree to rounding: the residual
# cancels, so the error is relative to what its terms carry (share of the model's bound
# 0.0002-0.0006)
PINNED = [toy.draw(seed=3977759284, hidden=3, inputs=4, y=-1.821083917016575),
          toy.draw(seed=1332588683, hidden=4, inputs=2, y=1.899465262868953),
          toy.draw(seed=2266582778, hidden=3, inputs=4, y=-1.2262495461206342)]


def pinned(prop):
    for t in PINNED:
        prop = example(t)(prop)
    return prop


# ----------------------------------------------------------------------------- the verdict
def check_rounding(claim, name: str, model: str, what: str, got, want, magnitude, n: int) -> None:
    """One example of a property "equal up to rounding": the share of the error model's
    bound it uses is the registry's figure ``name`` (the worst over the examples is kept and
    judged), and a share that breaks its bound stops the property at this example, so that
    Hypothesis shrinks to it."""
    m = error_models.model(model)
    err = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64))
    share = m.share(err, magnitude, n=n)
    claim.record("worst_abs_error", float(np.max(err)), reduce="max")
    if not claim.figure(name).judge(share)[0] == "within":
        claim.note(f"{what}: off by {float(np.max(err)):.3g}, {share:.3g} of the float64 "
                   f"rounding bound ({m.key})")
    claim.check(name, share, reduce="max", note=m.describe(n), halt=True)


# ----------------------------------------------------------------------------- the worked example
def normal(bound: float):
    """Floats in [-bound, bound] that are 0 or at least 1e-100 in size: no product of three
    of them underflows, so every rounding is relative (the error model of normal numbers;
    below 2.2e-308 float64 rounds to a fixed absolute step instead)."""
    return st.floats(-bound, bound, allow_nan=False).filter(lambda v: v == 0 or abs(v) >= 1e-100)
