"""Summary sheet, "In code" (S:38-52).

The sheet's snippet, run line for line (:func:`run_sheet_snippet`): two micro-batches, each
mean loss divided by 2, print "tensor(30.)  same as one batch of 4" (ACC-06); the "manual SGD
step, not recorded" under no_grad leaves w a leaf (ACC-07); and with the "detached term is a
constant", the gradient prints "tensor(3.)" (ACC-08).
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from support.rules.controls import control


def run_sheet_snippet():
    """The sheet's "In code" block, line for line, returning what it prints and holds."""
    w = torch.tensor(2.0, requires_grad=True)
    x = torch.tensor([1.0, 3.0, 2.0, 4.0])
    for chunk in x.split(2):
        (((w * chunk) ** 2).mean() / 2).backward()
    first = repr(w.grad)
    try:
        with torch.no_grad():
            w -= 0.01 * w.grad
    except RuntimeError as exc:      # an in-place update of a leaf, had the tape recorded it
        after_step = str(exc).splitlines()[0]
    else:
        after_step = (w.item(), w.is_leaf, w.grad_fn, w.requires_grad)
    w.grad.zero_()
    y = w.detach() ** 2 + 3 * w
    y.backward()
    return first, after_step, repr(w.grad)


@pytest.mark.claim("ACC-06")
def test_the_snippet_prints_tensor_30(claim):
    first, _, _ = run_sheet_snippet()
    claim.check('printed', first)
    assert first == "tensor(30.)"


@pytest.mark.claim("ACC-07")
def test_manual_sgd_step_under_no_grad_is_not_recorded(claim):
    _, after_step, _ = run_sheet_snippet()
    assert isinstance(after_step, tuple), f"the step under no_grad was refused: {after_step}"
    value, is_leaf, grad_fn, requires_grad = after_step
    claim.check('w after the step', value)
    claim.record('still a leaf', is_leaf)
    assert is_leaf and grad_fn is None
    # contrast: the same update outside no_grad is refused on a leaf (whatever torch's words)
    w = torch.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError) as refused:
        w -= 0.3
    claim.record("the same step outside no_grad", str(refused.value).splitlines()[0])


@control("ACC-07", what="torch.no_grad() does not switch the tape off, so the manual step on "
                        "the leaf w is recorded")
def sheet_no_grad_keeps_recording(mp):
    mp.setattr(torch, "no_grad", contextlib.nullcontext)


@pytest.mark.claim("ACC-08")
def test_detached_term_is_a_constant_so_the_gradient_is_3(claim):
    _, _, last = run_sheet_snippet()
    claim.check('printed', last)
    # contrast: without detach the square contributes 2w as well
    w = torch.tensor(1.7, requires_grad=True)
    (w ** 2 + 3 * w).backward()
    claim.record("without detach", w.grad.item())
    assert last == "tensor(3.)" and w.grad.item() != 3.0


@control("ACC-08", what="w.detach() stays in the graph, so the square contributes 2w to the "
                        "gradient")
def detach_keeps_the_square_in_the_graph(mp):
    mp.setattr(torch.Tensor, "detach", lambda self: self.view_as(self))
