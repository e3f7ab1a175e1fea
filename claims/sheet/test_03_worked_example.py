"""Summary sheet, "Worked example" (S:30-37).

w = 2, x = (1, 3, 2, 4), loss = mean((w x_i)^2), whose gradient is 2 w mean(x_i^2) (S:32,
ACC-02): 30 for the full batch (S:34, ACC-03), 20 + 40 = 60 for two micro-batches without
dividing, "twice too much" (S:35, ACC-04), 10 + 20 = 30 with the division by k = 2 (S:35,
ACC-05). The memory line (S:36) belongs to MEM-02, tested with S:28 in
claims/sheet/test_02_formulas.py.

ACC-02 is a Hypothesis property over w and x: autograd's gradient against 2 w mean(x^2), up to
the float64 error model of the accumulated gradient (support/rules/error_models.py).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from support.rules.controls import control
from support.lab import toy
from support.lab.accumulation import (
    ACC_MODEL,
    X,
    full_batch_grad,
    mean_square_gradient,
    micro_batch_grads,
)
from support.lab.properties import normal


@pytest.mark.claim("ACC-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(normal(5), st.lists(normal(10), min_size=1, max_size=16))
@example(w0=1e-100, x=[0.0, 0.7890625])     # found with w0 = 2.2e-311 (subnormal), as ACC-01's
def test_gradient_of_mean_squared_scaled_input_is_2w_mean_x_squared(claim, w0, x):
    g = full_batch_grad(x, w0)
    formula = mean_square_gradient(x, w0)
    share = ACC_MODEL.share(g - formula, abs(formula), n=len(x))
    claim.record("max relative error", abs(g - formula) / max(abs(formula), 1e-300), reduce="max")
    claim.check("share_of_rounding_bound", share, reduce="max", note=ACC_MODEL.describe(len(x)), halt=True)


@control("ACC-02", "ACC-03", what="autograd differentiates a square u**2 as u instead of 2u, so "
                                  "the gradient is w mean(x^2), half the formula")
def square_differentiates_to_u(mp):
    real = torch.Tensor.__pow__
    mp.setattr(torch.Tensor, "__pow__", lambda self, exponent:
               self * self.detach() if exponent == 2 else real(self, exponent))


@pytest.mark.claim("ACC-03")
def test_full_batch_gradient_is_30(claim):
    w = torch.tensor(2.0, requires_grad=True)
    x = torch.tensor(X)
    ((w * x) ** 2).mean().backward()
    claim.check('mean(x^2)', (x ** 2).mean().item())
    claim.check('grad', w.grad.item())


@pytest.mark.claim("ACC-04")
def test_two_micro_batches_without_dividing_give_20_plus_40(claim):
    after = micro_batch_grads(X, 2.0, 2, divide=False)
    claim.check('first micro-batch', after[0])
    claim.check('second micro-batch', after[1] - after[0])
    claim.check('grad', after[1])
    claim.check("grad / full-batch grad", after[1] / full_batch_grad(X, 2.0))


@control("ACC-01", "ACC-04", "ACC-05", "ACC-06", "ACC-09", "ACC-10",
         what="backward() overwrites .grad instead of adding to it: after the micro-batches "
              "only the last one's gradient is left")
def backward_keeps_only_the_last_micro_batch(mp):
    def overwrite(self, gradient=None, *args, **kwargs):
        leaves = [n.variable for n in toy.tape_nodes(self) if hasattr(n, "variable")]
        for leaf, g in zip(leaves, torch.autograd.grad(self, leaves, gradient)):
            leaf.grad = g
    mp.setattr(torch.Tensor, "backward", overwrite)


@pytest.mark.claim("ACC-05")
def test_dividing_each_micro_batch_by_k_gives_10_plus_20(claim):
    after = micro_batch_grads(X, 2.0, 2, divide=True)
    claim.check('first micro-batch', after[0])
    claim.check('second micro-batch', after[1] - after[0])
    claim.check('grad', after[1])
