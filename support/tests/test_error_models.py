"""The error models of support/rules/error_models.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from support.rules import error_models


def test_unit_roundoff_is_half_the_machine_epsilon_of_each_dtype():
    assert error_models.unit_roundoff("float64") == 2.0 ** -53
    assert error_models.unit_roundoff(np.float32) == 2.0 ** -24
    assert error_models.unit_roundoff("float16") == 2.0 ** -11
    assert error_models.unit_roundoff("bfloat16") == 2.0 ** -8
    torch = pytest.importorskip("torch")
    assert error_models.unit_roundoff(torch.float32) == 2.0 ** -24


def test_gamma_is_n_u_over_one_minus_n_u_and_refuses_n_u_of_one():
    u = 2.0 ** -53
    assert error_models.gamma(10, "float64") == pytest.approx(10 * u / (1 - 10 * u), rel=1e-15)
    with pytest.raises(ValueError):
        error_models.gamma(2 ** 24, "float32")


def test_share_of_bound_is_elementwise_and_zero_over_zero_is_zero():
    assert error_models.share_of_bound([0.0, 1.0], [0.0, 4.0]) == 0.25
    assert error_models.share_of_bound(0.0, 0.0) == 0.0
    assert math.isinf(error_models.share_of_bound([1e-300], [0.0]))


def test_a_recursive_sum_stays_within_its_model_and_a_bigger_error_does_not():
    """The model of two summation orders holds for an adversarial sum (terms that cancel),
    and the share grows past 1 for an error the model does not allow."""
    model = error_models.model("sum:two-orders")
    rng = np.random.default_rng(0)
    x = (rng.normal(size=200) * 10.0 ** rng.integers(-3, 4, 200)).astype(np.float32)
    fwd = rev = np.float32(0)
    for v in x:
        fwd = np.float32(fwd + v)
    for v in x[::-1]:
        rev = np.float32(rev + v)
    magnitude = float(np.abs(x.astype(np.float64)).sum())
    assert model.share(float(fwd) - float(rev), magnitude, n=len(x) - 1) <= 1
    assert model.share(1e-3 * magnitude, magnitude, n=len(x) - 1) > 1


def test_every_model_says_what_it_counts():
    for key, m in error_models.MODELS.items():
        assert m.key == key and m.why and m.ops + m.per_n > 0
        assert error_models.gamma(m.roundings(64), m.dtype) < 1e-2     # far from n u ~ 1
    with pytest.raises(KeyError, match="unknown error model"):
        error_models.model("nope")
