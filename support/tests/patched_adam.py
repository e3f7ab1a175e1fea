"""A pytest plugin for negative controls: ``torch.optim.Adam``'s update patched
(``-p support.tests.patched_adam``), as a release that broke it would.

``ADAM_CONTROL`` names the patch every ``torch.optim.Adam`` of the run steps with:

* ``no-momentum`` (the default): the first moment is the current gradient (``beta1`` taken
  as 0 at each step);
* ``first``, ``second``, ``both``: Adam's bias corrections dropped. Adam divides its first
  moment by ``1 - beta1**t`` and its second by ``1 - beta2**t``; ``lr * (1 - beta1**t)``
  cancels the first, ``lr`` and ``eps`` divided by ``sqrt(1 - beta2**t)`` cancel the second.
  Without the first the early steps are up to ten times smaller, without the second up to
  thirty times larger; both fade within the first few hundred steps.

Each patch goes through the arguments of torch's own update, for the step it is about to
take, and the rest of the update is torch's, operation for operation.

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

    def patched_step(self, closure=None):
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

    adam.step = patched_step


def pytest_configure(config):
    import torch

    name = os.environ.get("ADAM_CONTROL", "no-momentum")
    if name not in CONTROLS:
        raise ValueError(f"ADAM_CONTROL must be one of {sorted(CONTROLS)}, not {name!r}")
    _patch(torch.optim.Adam, *CONTROLS[name])
