"""The float16 and bfloat16 helpers of the mixed-precision claims (sheet, "Mixed precision and
loss scaling" and its pitfall; lecture, "Devices, and when a GPU helps"): a CPU GradScaler or
not-applicable (:func:`cpu_grad_scaler`), the gradient float16 flushes to zero
(:func:`float16_underflow_grad`: AMP-03, AMP-09) and one step with and without a scaler
(:func:`scaler_vs_plain`: AMP-04, AMP-09, AMP-11).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

F16 = torch.float16


BF16 = torch.bfloat16


def cpu_grad_scaler(claim, **kwargs):
    """A CPU GradScaler, or the claim is not-applicable in this torch."""
    # import the submodule explicitly: whether torch.amp is an attribute of torch depends on
    # what was imported before
    import importlib
    amp = importlib.import_module("torch.amp")
    if not hasattr(amp, "GradScaler"):
        claim.not_applicable("this torch has no torch.amp.GradScaler (CPU scaler added in 2.3)")
    try:
        return amp.GradScaler("cpu", **kwargs)
    except (RuntimeError, TypeError, ValueError) as exc:
        claim.not_applicable(f"torch.amp.GradScaler('cpu') is unavailable here: {exc}")


def float16_underflow_grad(scale: float) -> tuple[float, float]:
    """d/dw of (w a) b computed in float16 as autocast would (float32 master weight w).

    Returns (gradient as stored in w.grad, float32), (gradient after dividing by scale).
    """
    w = torch.tensor(1.0, requires_grad=True)
    a = b = torch.tensor(1e-4, dtype=F16)
    loss = (w.to(F16) * a) * b
    (loss * scale).backward()
    return w.grad.item(), w.grad.item() / scale


def scaler_vs_plain(claim, make_opt, scale=2.0 ** 10, which: str = "small"):
    """The same SGD/Adam step with and without a GradScaler, and the scaler's intermediates.
    ``which`` model: "small" (a 4-8-1 tanh network, one parameter group) or "nested" (the realistic
    nested model of support.lab.nested in its three parameter groups, each at its own lr)."""
    from support.lab import nested
    out = {}
    for use_scaler in (False, True):
        torch.manual_seed(0)
        if which == "nested":
            model = nested.nested_model()
            opt = make_opt(nested.param_groups(model))
            d_in = nested.D_IN
        else:
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = make_opt(model.parameters())
            d_in = 4
        x, y = torch.randn(32, d_in), torch.randn(32, 1)
        loss = F.mse_loss(model(x), y)
        params = list(model.parameters())
        if use_scaler:
            scaler = cpu_grad_scaler(claim, init_scale=scale)
            scaled_loss = scaler.scale(loss)
            out["scaled_loss_ratio"] = (scaled_loss / loss).item()
            scaled_loss.backward()
            out["grads_scaled"] = [p.grad.clone() for p in params]
            scaler.unscale_(opt)
            out["grads_unscaled"] = [p.grad.clone() for p in params]
            scaler.step(opt)
            scaler.update()
            out["weights_scaler"] = [p.detach().clone() for p in params]
        else:
            start = [p.detach().clone() for p in params]
            loss.backward()
            out["grads"] = [p.grad.clone() for p in params]
            opt.step()
            out["weights_plain"] = [p.detach().clone() for p in params]
            # control: stepping on scaled gradients without unscaling moves S times further
            for p, s0 in zip(params, start):
                p.data.copy_(s0)
                p.grad.mul_(scale)
            opt.step()
            out["weights_not_unscaled"] = [p.detach().clone() for p in params]
            out["start"] = start
    return out
