"""A pytest plugin for a negative control: ``torch.optim.Adam`` without its bias corrections
(``-p support.tests.adam_without_bias_correction``).

Adam divides its first moment by ``1 - beta1**t`` and its second moment by
``1 - beta2**t``. ``ADAM_CONTROL`` names which correction every ``torch.optim.Adam`` of the
run drops: ``first``, ``second`` or ``both`` (the default). Each is cancelled through the
arguments of torch's own update, for the step it is about to take: ``lr * (1 - beta1**t)``
cancels the first, ``lr`` and ``eps`` divided by ``sqrt(1 - beta2**t)`` cancel the second;
the rest of the update is torch's, operation for operation. Without the first correction the
early steps are up to ten times smaller, without the second up to thirty times larger.

Only this process is patched: a run that uses it trains in one process
(``LECTURE11_WORKERS=1``) and keeps its results out of the user's cache (``LECTURE11_CACHE``
set to a scratch folder).
"""
from __future__ import annotations

import math
import os

CONTROLS = {"first": (True, False, False), "second": (False, True, False),
            "both": (True, True, False), "no-momentum": (False, False, True)}


def _patch(adam, first: bool, second: bool, momentum_lost: bool) -> None:
    step = adam.step

    def step_without_bias_correction(self, closure=None):
        saved = []
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            done = [float(self.state[p]["step"]) for p in group["params"]
                    if "step" in self.state.get(p, {})]
            t = (done[0] if done else 0.0) + 1
            saved.append((group["lr"], group["eps"], group["betas"]))
            if momentum_lost:
                group["betas"] = (0.0, beta2)
            if first:
                group["lr"] = group["lr"] * (1 - beta1 ** t)
            if second:
                root = math.sqrt(1 - beta2 ** t)
                group["lr"], group["eps"] = group["lr"] / root, group["eps"] / root
        try:
            return step(self, closure)
        finally:
            for group, (lr, eps, betas) in zip(self.param_groups, saved):
                group["lr"], group["eps"], group["betas"] = lr, eps, betas

    adam.step = step_without_bias_correction


def pytest_configure(config):
    import torch

    name = os.environ.get("ADAM_CONTROL", "both")
    if name not in CONTROLS:
        raise ValueError(f"ADAM_CONTROL must be one of {sorted(CONTROLS)}, not {name!r}")
    _patch(torch.optim.Adam, *CONTROLS[name])
