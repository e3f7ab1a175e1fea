"""Many networks of the §3 protocol trained together, each exactly as :func:`train` would.

The naive way to run the lecture's comparisons is one network at a time (the course's
script needs about 3.5 minutes for the 50 networks of trees-vs-nets). Networks that share
an epoch budget, an optimiser family and a training-set size are instead stacked: the
weights of ``B`` networks live in ``(B, out, in)`` views of one flat buffer and one
``baddbmm`` per layer runs all of them, while every network keeps

* its own seed's PyTorch default initialisation (the stacked weights are copied from the
  ``nn.Sequential`` that ``torch.manual_seed(seed)`` followed by :func:`mlp` builds, so the
  draws are the ones :func:`train` makes);
* its own DataLoader shuffle order: :func:`shuffle_seeds` replays, from the same seed,
  the global-generator draws a ``DataLoader(batch_size=64, shuffle=True)`` makes when each
  epoch's iterator starts (one for the iterator's base seed, one for the sampler's seed,
  which seeds the private generator of that epoch's ``randperm``, :func:`epoch_order`);
* its own fold and split scheme, scaling arm, learning rate and ``zero_grad`` switch.

Forward and backward are written out (:class:`_Stack`) so that every product rounds as
``nn.Linear``'s ``addmm`` and its autograd backward do, network by network; the loss
gradient is MSELoss's own ``2/N * (pred - target)``; Adam is ``torch.optim.Adam``'s
single-tensor update op for op (:class:`_Adam`, elementwise, so one call over the flat
buffer rounds as six per network), SGD is ``add_(grad, alpha=-lr)`` with each network's
lr; a network without ``zero_grad`` steps with the running sum ``.grad`` would hold.

The result is :func:`support.lab.train_torch.train`'s, bit for bit: ``support/tests/
test_batched.py`` compares the two on the switches and schemes (the divergent lr-1.0 SGD
run and the accumulating loop included), and the claims reproduce the protocol's seed-0
values (5.487, 23.180, 8.259, 11.900/6.422/5.077, 91.0/143.7/1,235.2/227.4) to the digit.
Not covered here: the unshaped-target story (``target_2d=False``), the gradient-norm probe
and ``max_steps``; those single runs use :func:`train`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from support.lab.data import Concrete, lecture_split
from support.lab.train_torch import BATCH, TrainResult, mlp, prepare, rmse_mpa, torch_threads


@dataclass(frozen=True)
class Spec:
    """One network of a batch: the arguments of :func:`train` that may differ per network."""

    seed: int = 0
    fold: int = 0
    lr: float = 1e-3
    zero_grad: bool = True
    scale: bool = True
    scaler_on_all: bool = False
    # "group": the lecture's GroupKFold folds; "kfold": KFold(5, shuffle=True, random_state=0)
    scheme: str = "group"


def split(data: Concrete, scheme: str, fold: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices of ``fold`` under the lecture's two schemes."""
    if scheme == "group":
        return lecture_split(fold)
    if scheme == "kfold":
        from sklearn.model_selection import KFold
        tr, va = list(KFold(5, shuffle=True, random_state=0).split(data.X))[fold]
        return tr, va
    raise ValueError(f"scheme must be 'group' or 'kfold', not {scheme!r}")


def shuffle_seeds(epochs: int) -> list[int]:
    """The seed of each epoch's shuffle under ``DataLoader(..., shuffle=True)``, drawn from
    the global generator in its current state (call right after building the model, as
    :func:`train` starts iterating right after building it).

    Each epoch's iterator draws one int64 for its ``_base_seed`` and then, when the sampler
    starts, one for the private generator of that epoch's ``randperm``.
    """
    seeds = []
    for _ in range(epochs):
        torch.empty((), dtype=torch.int64).random_()
        seeds.append(int(torch.empty((), dtype=torch.int64).random_().item()))
    return seeds


def epoch_order(seed: int, n: int) -> torch.Tensor:
    """The row order of the epoch whose shuffle seed is ``seed``."""
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g)


class _Stack:
    """``B`` networks' parameters in one flat buffer, with a hand-written forward/backward.

    The buffer is laid out parameter by parameter (all networks' first weight, then all
    first biases, ...), so each stacked parameter is a contiguous ``(B, out, in)`` or
    ``(B, 1, out)`` view and the optimiser updates everything with a handful of
    elementwise calls. Every product is arranged so that, network by network, it rounds
    exactly as the ``addmm``/``mm`` calls of ``nn.Linear`` and its autograd backward do
    (checked bit for bit in ``support/tests/test_batched.py``): the one-output layer is
    computed as the transposed product, and weight gradients as ``grad^T @ input``.
    """

    def __init__(self, models):
        linears = [[m for m in model if isinstance(m, torch.nn.Linear)] for model in models]
        B = len(models)
        tensors = []
        for layer in range(len(linears[0])):
            tensors.append(torch.stack([ls[layer].weight.detach() for ls in linears]))
            tensors.append(torch.stack([ls[layer].bias.detach() for ls in linears])[:, None, :])
        self.shapes = [t.shape for t in tensors]
        self.flat = torch.cat([t.reshape(-1) for t in tensors])
        self.grad_flat = torch.zeros_like(self.flat)
        self.params: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        offset = 0
        for t in tensors:
            self.params.append(self.flat[offset:offset + t.numel()].view(t.shape))
            self.grads.append(self.grad_flat[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
        # the flat index of each network's elements, for per-network switches
        self.owner = torch.cat([torch.arange(B).repeat_interleave(t[0].numel()) for t in tensors])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Output ``(B, rows, 1)`` and the input of each layer (for :meth:`backward`)."""
        n = len(self.params) // 2
        inputs = []
        for i in range(n):
            W, b = self.params[2 * i], self.params[2 * i + 1]
            inputs.append(x)
            if W.shape[1] == 1:
                # nn.Linear with one output reaches a gemv-like kernel; the transposed
                # product (1 x in) @ (in x rows) rounds exactly like it.
                x = torch.baddbmm(b.transpose(1, 2), W, x.transpose(1, 2)).transpose(1, 2)
            else:
                x = torch.baddbmm(b, x, W.transpose(1, 2))
            if i < n - 1:
                x = torch.relu(x)
        return x, inputs

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x)[0]

    def backward(self, dout: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
        """The flat gradient buffer given d(loss)/d(output) ``dout`` (overwritten by the
        next call)."""
        n = len(self.params) // 2
        g = dout
        for i in reversed(range(n)):
            x = inputs[i]
            # written straight into the flat gradient buffer (its views are contiguous)
            torch.bmm(g.transpose(1, 2), x, out=self.grads[2 * i])
            torch.sum(g, 1, keepdim=True, out=self.grads[2 * i + 1])
            if i > 0:
                # ReLU's autograd backward: the gradient where the layer's output was > 0
                g = torch.ops.aten.threshold_backward(torch.bmm(g, self.params[2 * i]), x, 0)
        return self.grad_flat


class _Adam:
    """``torch.optim.Adam``'s single-tensor update (its CPU default), op for op, on the
    flat buffer: elementwise, so one call over all networks rounds as six per network."""

    def __init__(self, param: torch.Tensor, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.param, self.lr, self.betas, self.eps = param, lr, betas, eps
        self.exp_avg = torch.zeros_like(param)
        self.exp_avg_sq = torch.zeros_like(param)
        self.step_t = torch.tensor(0.0)

    def step(self, grad: torch.Tensor) -> None:
        beta1, beta2 = self.betas
        self.step_t += 1
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = self.step_t.item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = self.lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.param.addcdiv_(self.exp_avg, denom, value=-step_size)


def _stack(data: Concrete, specs: list[Spec], epochs: int):
    """Each network's data, initial weights (seeded as train() seeds them) and shuffles,
    stacked: (preps, net, shuffle seeds, rows per network, X_train, y_train, X_val)."""
    preps, models, seeds = [], [], []
    for s in specs:
        tr, va = split(data, s.scheme, s.fold)
        torch.manual_seed(s.seed)
        preps.append(prepare(data, tr, va, scale=s.scale, scaler_on_all=s.scaler_on_all))
        models.append(mlp())
        seeds.append(shuffle_seeds(epochs))
    n = len(preps[0].X_train)
    if any(len(p.X_train) != n for p in preps):
        raise ValueError("networks of one batch must share the training-set size")
    Xtr = torch.cat([torch.from_numpy(p.X_train) for p in preps])                # (B n, 8)
    ytr = torch.cat([torch.from_numpy(p.y_train) for p in preps])[:, None]       # (B n, 1)
    Xva = torch.stack([torch.from_numpy(p.X_val) for p in preps])
    return preps, _Stack(models), seeds, n, Xtr, ytr, Xva


def _update(net: _Stack, specs: list[Spec], optimizer: str):
    """The optimizer's step on the stacked parameters, as ``step(grad)``."""
    if optimizer == "adam":
        lrs = {s.lr for s in specs}
        if len(lrs) != 1:
            raise ValueError("Adam networks of one batch must share the learning rate")
        return _Adam(net.flat, lrs.pop()).step
    if optimizer == "sgd":
        # torch.optim.SGD's add_(grad, alpha=-lr), with a per-element alpha
        neg_lr = torch.tensor([-s.lr for s in specs], dtype=torch.float32)[net.owner]
        return lambda grad: net.flat.addcmul_(grad, neg_lr)
    raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")


def _train_group(data: Concrete, specs: list[Spec], epochs: int, optimizer: str,
                 record: bool) -> list[TrainResult]:
    B = len(specs)
    preps, net, seeds, n, Xtr, ytr, Xva = _stack(data, specs, epochs)
    step = _update(net, specs, optimizer)
    # networks without zero_grad use the running sum that .grad keeps when never cleared
    keep = torch.tensor([not s.zero_grad for s in specs])
    acc = torch.zeros_like(net.flat) if keep.any() else None
    keep_mask = None if keep.all() else keep[net.owner]
    offsets = (torch.arange(B) * n)[:, None]
    results = [TrainResult(rmse=math.nan, pred_std=math.nan) for _ in specs]
    steps_per_epoch = -(-n // BATCH)

    def evaluate() -> list[np.ndarray]:
        out = net(Xva)
        return [(out[i].reshape(-1) * float(p.y_std) + float(p.y_mean)).numpy()
                for i, p in enumerate(preps)]

    for epoch in range(epochs):
        order = torch.stack([epoch_order(seeds[i][epoch], n) for i in range(B)]) + offsets
        total = torch.zeros(B, dtype=torch.float64)
        for start in range(0, n, BATCH):
            idx = order[:, start:start + BATCH]
            m = idx.shape[1]
            flat_idx = idx.reshape(-1)
            xb = Xtr.index_select(0, flat_idx).view(B, m, -1)
            yb = ytr.index_select(0, flat_idx).view(B, m, 1)
            out, inputs = net.forward(xb)
            diff = out - yb
            total += (diff * diff).mean(dim=(1, 2)).double() * m
            # MSELoss's backward: 2/N * (pred - target), the factor in float32
            grad = net.backward(diff * torch.tensor(2.0 / m), inputs)
            if acc is not None:
                acc.add_(grad)
                grad = acc if keep_mask is None else torch.where(keep_mask, acc, grad)
            step(grad)
        for i in range(B):
            results[i].train_loss.append(float(total[i]) / n)
            results[i].steps += steps_per_epoch
        if record or epoch == epochs - 1:
            for i, pred in enumerate(evaluate()):
                results[i].log_epoch(epoch, rmse_mpa(pred, preps[i].y_val), record)
    for i, pred in enumerate(evaluate()):
        results[i].finish(pred, preps[i].y_val)
    return results


def train_many(data: Concrete, specs: list[Spec], *, epochs: int = 120,
               optimizer: str = "adam", record: bool = False, threads: int | None = 1,
               chunk: int | None = None) -> list[TrainResult]:
    """Train every network of ``specs`` as :func:`train` would; results in ``specs`` order.

    ``chunk`` caps how many networks share one stack (None: all of them).
    """
    specs = list(specs)
    out: list[TrainResult | None] = [None] * len(specs)
    size = chunk or max(len(specs), 1)
    with torch_threads(threads):
        for start in range(0, len(specs), size):
            part = specs[start:start + size]
            for i, r in enumerate(_train_group(data, part, epochs, optimizer, record)):
                out[start + i] = r
    return out  # type: ignore[return-value]
