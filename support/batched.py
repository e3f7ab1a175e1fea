"""Many networks of the §3 protocol trained together, each exactly as :func:`train` would.

The naive way to run the lecture's comparisons is one network at a time (the course's
script needs about 3.5 minutes for the 50 networks of trees-vs-nets). Networks that share
an epoch budget, an optimiser family and a training-set size are instead stacked: the
weights of ``B`` networks live in ``(B, out, in)`` tensors and one ``baddbmm`` runs all of
them, while every network keeps

* its own seed's PyTorch default initialisation (the stacked weights are copied from the
  ``nn.Sequential`` that ``torch.manual_seed(seed)`` followed by :func:`mlp` builds, so the
  draws are the ones :func:`train` makes);
* its own DataLoader shuffle order: :func:`shuffle_orders` replays, from the same seed,
  the global-generator draws a ``DataLoader(batch_size=64, shuffle=True)`` makes when each
  epoch's iterator starts (one for the iterator's base seed, one for the sampler's seed,
  which seeds the private generator of that epoch's ``randperm``);
* its own fold, scaling arm, learning rate and ``zero_grad`` switch.

Adam runs through ``torch.optim.Adam`` on the stacked tensors: its update is elementwise,
so stacking changes no arithmetic. SGD applies each network's own learning rate with the
same ``add_(grad, alpha=-lr)`` that ``torch.optim.SGD`` uses. The loss of each network is
the mean over its own batch, so the summed loss gives every network its own gradient.

The result agrees with :func:`support.train_torch.train` run by run (``test_batched.py``
in ``support/tests`` checks a few bit for bit; the claims compare means within the
protocol's tolerances). Unsupported here: the unshaped-target story (``target_2d=False``),
the gradient-norm probe and ``max_steps``; those single runs use :func:`train`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .data import Concrete, lecture_split
from .train_torch import BATCH, HIDDEN, TrainResult, mlp, prepare, rmse_mpa, torch_threads


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


def shuffle_orders(n: int, epochs: int) -> list[torch.Tensor]:
    """The row order of each epoch of ``DataLoader(..., shuffle=True)`` over ``n`` rows,
    drawn from the global generator in its current state (call right after building the
    model, as :func:`train` iterates right after building it)."""
    orders = []
    for _ in range(epochs):
        torch.empty((), dtype=torch.int64).random_()          # the iterator's _base_seed
        seed = int(torch.empty((), dtype=torch.int64).random_().item())  # RandomSampler's
        g = torch.Generator()
        g.manual_seed(seed)
        orders.append(torch.randperm(n, generator=g))
    return orders


class _Stack:
    """Stacked copies of ``B`` networks' parameters, ``(B, out, in)`` and ``(B, 1, out)``."""

    def __init__(self, models):
        self.params: list[torch.Tensor] = []
        linears = [[m for m in model if isinstance(m, torch.nn.Linear)] for model in models]
        for layer in range(len(linears[0])):
            W = torch.stack([ls[layer].weight.detach() for ls in linears]).clone()
            b = torch.stack([ls[layer].bias.detach() for ls in linears])[:, None, :].clone()
            self.params += [W.requires_grad_(), b.requires_grad_()]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = len(self.params) // 2
        for i in range(n):
            W, b = self.params[2 * i], self.params[2 * i + 1]
            x = torch.baddbmm(b, x, W.transpose(1, 2))
            if i < n - 1:
                x = torch.relu(x)
        return x


def _train_group(data: Concrete, specs: list[Spec], epochs: int, optimizer: str,
                 record: bool) -> list[TrainResult]:
    B = len(specs)
    preps, models, orders = [], [], []
    for s in specs:
        tr, va = split(data, s.scheme, s.fold)
        torch.manual_seed(s.seed)
        preps.append(prepare(data, tr, va, scale=s.scale, scaler_on_all=s.scaler_on_all))
        models.append(mlp())
        orders.append(shuffle_orders(len(tr), epochs))
    n = len(preps[0].X_train)
    if any(len(p.X_train) != n for p in preps):
        raise ValueError("networks of one batch must share the training-set size")
    Xtr = torch.stack([torch.from_numpy(p.X_train) for p in preps])            # (B, n, 8)
    ytr = torch.stack([torch.from_numpy(p.y_train) for p in preps])[:, :, None]  # (B, n, 1)
    Xva = torch.stack([torch.from_numpy(p.X_val) for p in preps])
    net = _Stack(models)
    params = net.params
    if optimizer == "adam":
        lrs = {s.lr for s in specs}
        if len(lrs) != 1:
            raise ValueError("Adam networks of one batch must share the learning rate")
        opt = torch.optim.Adam(params, lr=lrs.pop())
    elif optimizer != "sgd":
        raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")
    # networks without zero_grad keep a running sum, as .grad does when never cleared
    accumulate = torch.tensor([not s.zero_grad for s in specs])
    acc = [torch.zeros_like(p) for p in params] if accumulate.any() else None
    lr_groups: dict[float, list[int]] = {}
    for i, s in enumerate(specs):
        lr_groups.setdefault(s.lr, []).append(i)
    rows = torch.arange(B)[:, None]
    results = [TrainResult(rmse=math.nan, pred_std=math.nan) for _ in specs]
    perm = torch.empty(B, n, dtype=torch.int64)

    def evaluate() -> list[np.ndarray]:
        with torch.no_grad():
            out = net(Xva)
        return [(out[i].reshape(-1) * float(p.y_std) + float(p.y_mean)).numpy()
                for i, p in enumerate(preps)]

    for epoch in range(epochs):
        for i in range(B):
            perm[i] = orders[i][epoch]
        total = torch.zeros(B, dtype=torch.float64)
        for start in range(0, n, BATCH):
            idx = perm[:, start:start + BATCH]
            xb, yb = Xtr[rows, idx], ytr[rows, idx]
            losses = ((net(xb) - yb) ** 2).mean(dim=(1, 2))
            grads = torch.autograd.grad(losses.sum(), params)
            if acc is not None:
                for a, g in zip(acc, grads):
                    a.add_(g)
                grads = [torch.where(accumulate.view(-1, *[1] * (g.dim() - 1)), a, g)
                         for a, g in zip(acc, grads)]
            if optimizer == "adam":
                for p, g in zip(params, grads):
                    p.grad = g
                opt.step()
            else:
                with torch.no_grad():
                    for p, g in zip(params, grads):
                        for lr, members in lr_groups.items():
                            if len(members) == B:
                                p.add_(g, alpha=-lr)
                            else:
                                for i in members:
                                    p[i].add_(g[i], alpha=-lr)
            total += losses.detach().double() * idx.shape[1]
        for i in range(B):
            results[i].train_loss.append(float(total[i]) / n)
            results[i].steps += n // BATCH + (n % BATCH > 0)
        if record or epoch == epochs - 1:
            for i, pred in enumerate(evaluate()):
                r = rmse_mpa(pred, preps[i].y_val)
                res = results[i]
                if record:
                    res.history.append(r)
                if not math.isfinite(r):
                    res.nonfinite_epochs += 1
                    if res.first_nonfinite_epoch is None:
                        res.first_nonfinite_epoch = epoch + 1
    for i, pred in enumerate(evaluate()):
        results[i].rmse = rmse_mpa(pred, preps[i].y_val)
        results[i].pred_std = float(torch.from_numpy(pred).std())
        results[i].predictions = pred
    return results


def train_many(data: Concrete, specs: list[Spec], *, epochs: int = 120,
               optimizer: str = "adam", record: bool = False, threads: int | None = None,
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
