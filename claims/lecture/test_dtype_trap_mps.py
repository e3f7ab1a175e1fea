"""Lecture, "Side by side" table (L:209) and "The dtype trap" (L:281): "The exception is Apple's
MPS backend, which has no float64 at all and raises an error if you move a float64 tensor
onto it" (DTYPE-05). Needs Apple MPS; skipped with the reason elsewhere.
"""
from __future__ import annotations

import pytest
import torch

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
