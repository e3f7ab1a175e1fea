"""Summary sheet, "Key ideas", "Training loop" (S:14).

"Training loop: zero_grad() -> forward -> loss -> backward() -> optimizer.step() ->
scheduler.step()" (LOOP-01).

The order is checked where PyTorch can see it (a scheduler stepped before the optimizer warns)
and where only the result shows it (a gradient cleared between backward() and step() is lost).
The lecture's own loop (L:399-406, zero_grad after the forward pass) is LOOP-10, in
claims/lecture/test_21_the_anatomy_of_a_training_loop.py.

Each order is also run on a realistic model (support.lab.nested: nested blocks with batch norm
and dropout inside an nn.ModuleList and an nn.ModuleDict) whose optimizer has three parameter
groups (decay, no decay, the head at its own learning rate), variant ``model=nested`` beside
``model=notes``: every group must step, and the scheduler must set every group's rate.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch import nn

from support.rules.controls import control
from support.lab import perturb
from support.lab.nested import D_IN, nested_model, param_groups

SCHEDULER_WARNING = "Detected call of `lr_scheduler.step()` before `optimizer.step()`"


def one_step(order: list[str], model: str = "notes"):
    """Run one training step with the calls in ``order`` on the notes' linear model or the
    nested one (three parameter groups); return (the largest change of a parameter in each
    group, each group's lr before, and after, warnings). (A bias before a batch norm gets
    next to no gradient, so a group, not each tensor, is what must move.)"""
    torch.manual_seed(0)
    if model == "nested":
        net = nested_model(p=0.1)
        opt = torch.optim.SGD(param_groups(net, lr=0.1, weight_decay=0.01, head_lr=0.05), lr=0.1)
        x = torch.randn(8, D_IN)
    else:
        net = nn.Linear(3, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x = torch.randn(8, 3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    y = torch.randn(8, 1)
    start = {n: p.detach().clone() for n, p in net.named_parameters()}
    lrs = [g["lr"] for g in opt.param_groups]
    box = {}
    calls = {
        "zero_grad": lambda: opt.zero_grad(),
        "forward": lambda: box.__setitem__("out", net(x)),
        "loss": lambda: box.__setitem__("loss", nn.functional.mse_loss(box["out"], y)),
        "backward": lambda: box["loss"].backward(),
        "step": lambda: opt.step(),
        "scheduler": lambda: sched.step(),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in order:
            calls[name]()
    change = {id(p): (p.detach() - start[n]).abs().max().item()
              for n, p in net.named_parameters()}
    moved = [max(change[id(p)] for p in g["params"]) for g in opt.param_groups]
    return moved, lrs, [g["lr"] for g in opt.param_groups], [str(w.message) for w in caught]


each_model = pytest.mark.parametrize("model", ["notes", "nested"],
                                     ids=["model=notes", "model=nested"])


SHEET = ["zero_grad", "forward", "loss", "backward", "step", "scheduler"]


@pytest.mark.claim("LOOP-01")
@each_model
def test_the_sheets_order_trains_without_a_warning(claim, model):
    moved, lrs, after, caught = one_step(SHEET, model)
    claim.record("weight_change", max(moved))
    claim.record("largest_change_per_group", moved)
    claim.check('lr_after_scheduler', after[0])
    claim.record("lr_after_scheduler_per_group", after)
    claim.record("warnings", caught)
    claim.check('n_warnings', len(caught))
    assert min(moved) > 0 and not caught
    assert after == [lr * 0.5 for lr in lrs]          # StepLR's gamma, in every group


@pytest.mark.claim("LOOP-01")
@each_model
def test_stepping_the_scheduler_before_the_optimizer_warns(claim, model):
    order = ["zero_grad", "forward", "loss", "backward", "scheduler", "step"]
    _, _, _, caught = one_step(order, model)
    hit = any(SCHEDULER_WARNING in w for w in caught)
    claim.record("warnings", caught)
    claim.record('scheduler_order_warning', hit)
    assert hit


@pytest.mark.claim("LOOP-01")
@each_model
def test_zero_grad_between_backward_and_step_loses_the_update(claim, model):
    # the order matters even where nothing warns: clearing after backward() erases the gradient
    moved, _, _, caught = one_step(["forward", "loss", "backward", "zero_grad", "step",
                                    "scheduler"], model)
    claim.check('weight_change', max(moved))
    claim.record("warnings", caught)


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


@control("LOOP-01", what="optimizer.step() updates the parameters of its first parameter group "
                         "only (torch's SGD skips the others)")
def sgd_steps_its_first_group_only(mp):
    perturb.first_group_only(mp, torch.optim.SGD, "step")
