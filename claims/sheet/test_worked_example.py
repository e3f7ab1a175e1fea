"""Sheet, "Formulas" and "Worked example": gradient accumulation over k micro-batches.

w = 2, x = (1, 3, 2, 4), loss = mean((w x_i)^2), gradient 2 w mean(x_i^2).
"""
import pytest
import torch
from hypothesis import given, strategies as st

X = [1.0, 3.0, 2.0, 4.0]


def accumulated_grad(x, k, divide: bool, w0=2.0):
    w = torch.tensor(w0, requires_grad=True)
    for chunk in torch.tensor(x).split(len(x) // k):
        loss = ((w * chunk) ** 2).mean()
        (loss / k if divide else loss).backward()
    return w.grad.item()


@pytest.mark.claim("ACC-02")
def test_full_batch_gradient_is_30(claim):
    w = torch.tensor(2.0, requires_grad=True)
    ((w * torch.tensor(X)) ** 2).mean().backward()
    claim.record("grad", w.grad.item(), stated=30, tol="exact")
    assert w.grad.item() == 30.0


@pytest.mark.claim("ACC-03")
def test_two_micro_batches_without_dividing_give_60(claim):
    g = accumulated_grad(X, 2, divide=False)
    claim.record("grad", g, stated=60, tol="exact")
    assert g == 60.0
