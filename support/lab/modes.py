"""Dropout and batch norm for the mode claims (MODE-01...04 of the sheet's "Modes", MODE-06 and
MODE-07 of "Switching the tape off", MODE-09 of "Side by side"): a model with both
(:func:`dropout_bn_model`), and dropout's share of zeros over N = 3000 units at P = 0.5, judged
against the binomial spread (:func:`zero_fraction`, :func:`binomial_ok`).
"""
from __future__ import annotations

import math

import torch
from torch import nn

N = 3000


P = 0.5


def zero_fraction(t: torch.Tensor) -> float:
    return (t == 0).float().mean().item()


def binomial_ok(frac: float, n: int = N, p: float = P, sigmas: float = 5.0) -> bool:
    return abs(frac - p) <= sigmas * math.sqrt(p * (1 - p) / n)


def dropout_bn_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(64, 1))
