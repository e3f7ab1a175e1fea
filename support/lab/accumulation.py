"""Gradient accumulation as the sheet's worked example computes it (loss = mean((w x_i)^2), its
batch :data:`X` = (1, 3, 2, 4)), for ACC-01...05 and ACC-09 ("Formulas", "Worked example",
"Common pitfalls"): .grad after each micro-batch with or without the division by k, the full
batch's gradient, the formula 2 w mean(x^2), and the float64 error model they are compared under.
"""
from __future__ import annotations

import numpy as np
import torch

from support.rules import error_models

X = (1.0, 3.0, 2.0, 4.0)


def micro_batch_grads(x, w0: float, k: int, divide: bool) -> list[float]:
    """.grad after each of k equal micro-batches (backward on each micro-batch mean loss)."""
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    seen = []
    for chunk in torch.tensor(x, dtype=torch.float64).chunk(k):
        loss = ((w * chunk) ** 2).mean()
        (loss / k if divide else loss).backward()
        seen.append(w.grad.item())
    return seen


def full_batch_grad(x, w0: float) -> float:
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    ((w * torch.tensor(x, dtype=torch.float64)) ** 2).mean().backward()
    return w.grad.item()


# the float64 error model of a mean-of-squares gradient summed over micro-batches
# (support/rules/error_models.py): every term has the sign of w, so it is relative to the gradient
ACC_MODEL = error_models.model("acc:micro-batches-float64")


def mean_square_gradient(x, w0: float) -> float:
    """2 w mean(x^2), the gradient of mean((w x)^2), in NumPy."""
    return 2 * w0 * float(np.mean(np.square(x)))
