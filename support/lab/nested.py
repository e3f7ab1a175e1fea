"""A realistic model for the claims about modules, modes, parameters and buffers, saving,
optimizers and autograd, beside the notes' flat ``nn.Sequential``: where real models keep
dropout, batch norm and buffers, below the first level and inside containers
(:func:`nested_model`), and the parameter groups a real recipe gives its optimizer
(:func:`param_groups`).

Its layout (names as ``named_modules()`` gives them)::

    stem                      Block: Linear -> BatchNorm1d -> ReLU -> Dropout
      stem.norm, stem.drop    batch norm and dropout two levels down
    body                      nn.ModuleList of Stage
      body.0                  Stage: a buffer of its own, ``body.0.gain``
        body.0.blocks         nn.ModuleList of two residual Blocks
          body.0.blocks.1.norm, body.0.blocks.1.drop     five levels down
    heads                     nn.ModuleDict
      heads.main              Head: a Block and the output Linear
        heads.main.block.norm, heads.main.block.drop

Small and CPU-fast: eight inputs (the notes' width of the concrete table), sixteen units.
"""
from __future__ import annotations

import torch
from torch import nn

from support.lab.modes import P

D_IN = 8
WIDTH = 16


class Block(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Dropout: the unit a real model repeats."""

    def __init__(self, d_in: int, d_out: int, p: float):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.norm = nn.BatchNorm1d(d_out)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(self.act(self.norm(self.linear(x))))


class Stage(nn.Module):
    """Residual blocks in an ``nn.ModuleList``, scaled by a fixed per-feature gain: a buffer
    of the stage's own (saved with the model, never trained)."""

    def __init__(self, width: int, depth: int, p: float):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, width, p) for _ in range(depth))
        self.register_buffer("gain", torch.linspace(0.5, 1.5, width))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x * self.gain


class Head(nn.Module):
    def __init__(self, width: int, d_out: int, p: float):
        super().__init__()
        self.block = Block(width, width, p)
        self.out = nn.Linear(width, d_out)

    def forward(self, x):
        return self.out(self.block(x))


class NestedNet(nn.Module):
    """A stem block, a ModuleList of stages of ModuleList'd blocks, a ModuleDict of heads."""

    def __init__(self, d_in: int = D_IN, width: int = WIDTH, d_out: int = 1, p: float = P):
        super().__init__()
        self.stem = Block(d_in, width, p)
        self.body = nn.ModuleList([Stage(width, 2, p)])
        self.heads = nn.ModuleDict({"main": Head(width, d_out, p)})

    def forward(self, x):
        x = self.stem(x)
        for stage in self.body:
            x = stage(x)
        return self.heads["main"](x)


def nested_model(seed: int = 0, p: float = P, dtype: torch.dtype = torch.float32) -> NestedNet:
    """The realistic model, initialised from ``seed``."""
    torch.manual_seed(seed)
    return NestedNet(p=p).to(dtype)


def param_groups(model: NestedNet, lr: float | None = None, weight_decay: float | None = None,
                 head_lr: float = 0.05) -> list[dict]:
    """Three groups as a training recipe builds them: the weight matrices outside the head
    (``decay``, at ``weight_decay``), their biases and the batch norms' gamma and beta
    (``no_decay``, weight decay 0), and every parameter of the head at ``head_lr``. ``lr``
    and ``weight_decay`` left as None are not set, so the optimizer's defaults fill them."""
    head = list(model.heads.parameters())
    in_head = {id(p) for p in head}
    rest = [p for p in model.parameters() if id(p) not in in_head]
    decay = {"name": "decay", "params": [p for p in rest if p.ndim > 1]}
    no_decay = {"name": "no_decay", "params": [p for p in rest if p.ndim <= 1],
                "weight_decay": 0.0}
    if lr is not None:
        decay["lr"] = no_decay["lr"] = lr
    if weight_decay is not None:
        decay["weight_decay"] = weight_decay
    return [decay, no_decay, {"name": "head", "params": head, "lr": head_lr}]


def depth(name: str) -> int:
    """How far below the model a submodule or tensor named ``name`` sits: 1 for a child (or
    the model's own tensor), 2 for a grandchild, ..."""
    return name.count(".") + 1


def modules_of(model: nn.Module, kind: type) -> dict[str, nn.Module]:
    """The submodules of type ``kind``, by name, at any depth."""
    return {name: m for name, m in model.named_modules() if isinstance(m, kind)}


def io_of(model: nn.Module, kind: type) -> tuple[dict[str, list], list]:
    """Forward hooks on every submodule of type ``kind``: a dict, by name, of the (input,
    output) pairs of each call, and the hooks' handles (``.remove()`` them when done)."""
    seen: dict[str, list] = {name: [] for name in modules_of(model, kind)}
    handles = [m.register_forward_hook(
        lambda mod, args, out, name=name: seen[name].append((args[0].detach().clone(),
                                                             out.detach().clone())))
        for name, m in modules_of(model, kind).items()]
    return seen, handles
