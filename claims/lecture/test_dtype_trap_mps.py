"""Lecture, "Side by side" table (L:209) and "The dtype trap" (L:281): "The exception is Apple's
MPS backend, which has no float64 at all and raises an error if you move a float64 tensor
onto it" (DTYPE-05). Needs Apple MPS; skipped with the reason elsewhere.
"""
from __future__ import annotations

import pytest
import torch

from support.harness.controls import control
from support.machine import devices


@pytest.mark.claim("DTYPE-05")
@devices.needs("mps")
def test_mps_refuses_float64(claim):
    # the control: float32 moves fine, so the error is about the dtype, not the device
    assert torch.ones(3).to("mps").dtype == torch.float32
    with pytest.raises((TypeError, RuntimeError)) as err:
        torch.ones(3, dtype=torch.float64).to("mps")
    claim.record("error moving float64 to mps", f"{type(err.value).__name__}: {err.value}"[:200])
    assert "float64" in str(err.value) or "double" in str(err.value).lower()


@control("DTYPE-05", what="MPS takes a float64 tensor without an error, storing it as float32")
def mps_stores_float64_as_float32(mp):
    to = torch.Tensor.to

    def to_float32_on_mps(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if self.dtype == torch.float64 and isinstance(target, (str, torch.device)) \
                and torch.device(target).type == "mps":
            return to(self.float(), *args, **kwargs)
        return to(self, *args, **kwargs)
    mp.setattr(torch.Tensor, "to", to_float32_on_mps)
