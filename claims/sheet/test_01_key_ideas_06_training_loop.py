"""Summary sheet, "Key ideas", "Training loop" (S:14).

"Training loop: zero_grad() -> forward -> loss -> backward() -> optimizer.step() ->
scheduler.step()" (LOOP-01).

The order is checked where PyTorch can see it (a scheduler stepped before the optimizer warns)
and where only the result shows it (a gradient cleared between backward() and step() is lost).
The lecture's own loop (L:399-406, zero_grad after the forward pass) is LOOP-10, in
claims/lecture/test_21_the_anatomy_of_a_training_loop.py.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch import nn

from support.harness.controls import control

SCHEDULER_WARNING = "Detected call of `lr_scheduler.step()` before `optimizer.step()`"


def one_step(order: list[str]):
    """Run one training step with the calls in ``order``; return (weight change, lr after,
    warnings)."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    w0 = model.weight.detach().clone()
    box = {}
    calls = {
        "zero_grad": lambda: opt.zero_grad(),
        "forward": lambda: box.__setitem__("out", model(x)),
        "loss": lambda: box.__setitem__("loss", nn.functional.mse_loss(box["out"], y)),
        "backward": lambda: box["loss"].backward(),
        "step": lambda: opt.step(),
        "scheduler": lambda: sched.step(),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in order:
            calls[name]()
    moved = (model.weight.detach() - w0).abs().max().item()
    return moved, opt.param_groups[0]["lr"], [str(w.message) for w in caught]


SHEET = ["zero_grad", "forward", "loss", "backward", "step", "scheduler"]


@pytest.mark.claim("LOOP-01")
def test_the_sheets_order_trains_without_a_warning(claim):
    moved, lr, caught = one_step(SHEET)
    claim.record("weight_change", moved)
    claim.check('lr_after_scheduler', lr)
    claim.record("warnings", caught)
    claim.check('n_warnings', len(caught))
    assert moved > 0 and lr == 0.05 and not caught


@pytest.mark.claim("LOOP-01")
def test_stepping_the_scheduler_before_the_optimizer_warns(claim):
    order = ["zero_grad", "forward", "loss", "backward", "scheduler", "step"]
    _, _, caught = one_step(order)
    hit = any(SCHEDULER_WARNING in w for w in caught)
    claim.record("warnings", caught)
    claim.record('scheduler_order_warning', hit)
    assert hit


@pytest.mark.claim("LOOP-01")
def test_zero_grad_between_backward_and_step_loses_the_update(claim):
    # the order matters even where nothing warns: clearing after backward() erases the gradient
    moved, _, caught = one_step(["forward", "loss", "backward", "zero_grad", "step", "scheduler"])
    claim.check('weight_change', moved)
    claim.record("warnings", caught)
    assert moved == 0.0


@control("LOOP-01", what="PyTorch stays silent when lr_scheduler.step() comes before "
                         "optimizer.step()")
def scheduler_order_unwarned(mp):
    real = torch.optim.lr_scheduler.LRScheduler.step

    def step(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape(SCHEDULER_WARNING))
            return real(self, *args, **kwargs)
    mp.setattr(torch.optim.lr_scheduler.LRScheduler, "step", step)


@control("LOOP-01", what="optimizer.zero_grad() leaves the gradients in .grad, so clearing "
                         "between backward() and step() loses nothing")
def zero_grad_keeps_the_gradient(mp):
    mp.setattr(torch.optim.Optimizer, "zero_grad", lambda self, set_to_none=True: None)
