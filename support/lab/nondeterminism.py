"""Repeated CUDA sums whose order varies from run to run: ``index_add_`` of 2^20 float32 values
into 64 slots (atomic adds), and the count of bitwise-distinct results, for the sheet's pitfall
RNG-09 and the lecture's RNG-08 (``use_deterministic_algorithms``). CUDA only: the callers skip
without a card.
"""
from __future__ import annotations

import torch


def index_add_outputs(runs: int, n: int = 1 << 20, slots: int = 64):
    torch.manual_seed(0)
    src = torch.randn(n, device="cuda")
    idx = torch.randint(0, slots, (n,), device="cuda")
    outs = [torch.zeros(slots, device="cuda").index_add_(0, idx, src).cpu() for _ in range(runs)]
    return outs, (src, idx, slots)


def distinct(outs) -> int:
    return len({o.numpy().tobytes() for o in outs})
