"""Many networks of the §3 protocol trained together, each as :func:`train` trains it.

The naive way to run the lecture's comparisons is one network at a time (the course's
script needs about 3.5 minutes for the 50 networks of trees-vs-nets). Networks that share
an epoch budget, an optimiser family and a training-set size are instead stacked: the
parameters of ``B`` networks are ``(B, ...)`` views of one leaf tensor and one batched
matrix product per layer runs all of them. Everything a claim's figure rests on is
PyTorch's own:

* the initialisation: each network's parameters are copied from the ``nn.Sequential`` that
  ``torch.manual_seed(seed)`` followed by :func:`mlp` builds, so the draws are the ones
  :func:`train` makes;
* the forward pass walks that ``nn.Sequential``: each ``nn.Linear`` becomes ``baddbmm`` on
  the stacked weights (``nn.Linear``'s ``addmm``, one product per network), every other
  module (the ``nn.ReLU``) is the module itself, applied to all networks at once;
* the loss is ``nn.MSELoss`` (the loss :func:`train` builds), mapped over the networks with
  ``torch.func.vmap`` so that each keeps its own mean over its own batch;
* the gradients are autograd's (``backward`` of the sum of the networks' losses: each
  network's parameters receive exactly its own loss's gradient);
* the step is ``torch.optim.Adam`` / ``torch.optim.SGD`` with their defaults, one parameter
  group per distinct learning rate; a network without ``zero_grad`` sits in an optimiser
  whose ``zero_grad`` is never called, so its ``.grad`` accumulates as autograd accumulates
  it;
* each epoch's order comes from the sampler of a ``DataLoader(batch_size=64, shuffle=True)``
  built as :func:`train` builds its own, with the global generator in the state that
  network's :func:`train` would have it in (:class:`_Shuffles`).

What is not the sequential loop's is where the products round: ``B`` networks' products run
as one ``baddbmm`` and its autograd backward instead of ``addmm``/``mm`` per network. The
hidden layers' forward products round as ``addmm``'s; the one-output layer's does not in its
last bit (``addmm`` with one output column takes another kernel), and autograd computes a
batched weight gradient as ``x^T @ grad`` where ``addmm``'s backward computes
``(grad^T @ x)^T``. Matching those would mean writing the backward out again, so the
difference is measured instead: one rounding, about 1e-7 relative, which a few hundred steps
carry to 1e-5 MPa and which grows over the protocol's budgets the way two trajectories part
(per network up to 0.15 MPa of RMSE at 400 epochs, while a 25-run mean moves by thousandths
of an MPa). ``support/tests/test_batched.py`` bounds it per job against the same networks
trained by :func:`train` (support/README.md, "The batched networks"). Not covered here: the
unshaped-target story (``target_2d=False``), the gradient-norm probe and ``max_steps``;
those single runs use :func:`train`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from support.lab.data import Concrete, lecture_split
from support.lab.train_torch import (
    BATCH,
    TrainResult,
    mlp,
    prepare,
    rmse_mpa,
    torch_threads,
)

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}

# How far a network of a stack may be from train()'s after a short run (up to some 200
# steps), in MPa. Batched products round differently from one network's addmm in the last
# bit; a few hundred steps carry that to 1e-5 MPa on scaled inputs and 2e-4 MPa on raw ones
# (measured by support/tests/test_batched.py). Skipping one step, or one batch's rows out of
# place, moves a prediction by a tenth of an MPa.
SHORT_RUN_MPA = 1e-3


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


class _Shuffles:
    """Each network's epoch orders, from the shuffling ``DataLoader`` :func:`train` uses.

    :func:`train`'s loader draws from the global generator, so each network keeps the
    generator state its own run would be in (taken right after its model is built, where
    :func:`train` starts iterating) and swaps it in for its epoch. Constructing the loader's
    iterator makes the iterator's own draw (its base seed); the epoch's order is then read
    from the loader's sampler, the ``RandomSampler`` the iterator reads it from, which draws
    the seed of that epoch's permutation. The training loop cuts the order into consecutive
    batches of 64, as the loader's ``BatchSampler`` does. Fetching and collating 13 batches
    of row numbers through the iterator would cost about 0.5 ms per network and epoch, as
    much as the training, for the same rows: ``test_batched`` compares them with a full
    iteration of the loader, batch for batch.
    """

    def __init__(self, n: int, states: list[torch.Tensor]):
        # the loader train() builds, over row numbers instead of rows
        self.loader = torch.utils.data.DataLoader(range(n), batch_size=BATCH, shuffle=True)
        self.states = states
        self.n = n

    def epoch(self) -> torch.Tensor:
        """The next epoch's row order of every network, ``(B, n)``."""
        orders = np.empty((len(self.states), self.n), dtype=np.int64)
        for i, state in enumerate(self.states):
            torch.set_rng_state(state)
            iter(self.loader)
            orders[i] = np.fromiter(self.loader.sampler, dtype=np.int64, count=self.n)
            self.states[i] = torch.get_rng_state()
        return torch.from_numpy(orders)


class _Stack:
    """``B`` copies of one ``nn.Sequential`` architecture, with stacked parameters.

    A stacked parameter is ``(B, *shape)``, the networks' own ``nn.Linear`` parameters side
    by side, and each layer multiplies by ``weight.mT`` as ``nn.Linear``'s ``addmm`` does by
    ``weight.t()``. The networks sit in groups (one per learning rate and ``zero_grad``
    switch), and each group's parameters are one leaf tensor, laid out parameter by
    parameter (all its networks' first weight, then all first biases, ...): the optimiser
    updates a group with one call per operation, and autograd writes its gradient with one
    ``cat``.
    """

    def __init__(self, groups: list[list[nn.Sequential]]):
        self.template = groups[0][0]
        linears = sum(1 for m in self.template if isinstance(m, nn.Linear))
        if sum(1 for _ in self.template.parameters()) != 2 * linears:
            raise ValueError("only nn.Linear layers may hold parameters")
        self.shapes = [p.shape for p in self.template.parameters()]
        self.groups = [len(models) for models in groups]
        self.leaves = []
        for models in groups:
            stacked = [torch.stack([p.detach() for p in per_param])
                       for per_param in zip(*(model.parameters() for model in models))]
            self.leaves.append(torch.cat([t.reshape(-1) for t in stacked]).requires_grad_())

    def parameters(self) -> list[torch.Tensor]:
        """Every stacked parameter, ``(B, *shape)``, networks in group order."""
        per_group = []
        for flat, size in zip(self.leaves, self.groups):
            parts = flat.split([size * shape.numel() for shape in self.shapes])
            per_group.append([part.view(size, *shape) for part, shape in zip(parts, self.shapes)])
        if len(per_group) == 1:
            return per_group[0]
        return [torch.cat(ps) for ps in zip(*per_group)]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The networks' outputs ``(B, rows, out)`` for inputs ``(B, rows, in)``."""
        params = iter(self.parameters())
        for module in self.template:
            if isinstance(module, nn.Linear):
                # nn.Linear's addmm(bias, x, weight.t()), one product per network
                weight, bias = next(params), next(params)
                x = torch.baddbmm(bias[:, None, :], x, weight.mT)
            else:
                x = module(x)
        return x


def _order(specs: list[Spec]) -> list[list[int]]:
    """Indices of ``specs`` grouped by (learning rate, zero_grad), in first-seen order."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(specs):
        groups.setdefault((s.lr, s.zero_grad), []).append(i)
    return list(groups.values())


def _train_group(data: Concrete, specs: list[Spec], epochs: int, optimizer: str,
                 record: bool) -> list[TrainResult]:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")
    groups = _order(specs)
    order = [i for members in groups for i in members]   # stack position -> spec index
    specs = [specs[i] for i in order]
    preps, models, states = [], [], []
    for s in specs:
        tr, va = split(data, s.scheme, s.fold)
        torch.manual_seed(s.seed)
        preps.append(prepare(data, tr, va, scale=s.scale, scaler_on_all=s.scaler_on_all))
        models.append(mlp())
        states.append(torch.get_rng_state())
    n = len(preps[0].X_train)
    if any(len(p.X_train) != n for p in preps):
        raise ValueError("networks of one batch must share the training-set size")
    B = len(specs)
    Xtr = torch.cat([torch.from_numpy(p.X_train) for p in preps])                # (B n, 8)
    ytr = torch.cat([torch.from_numpy(p.y_train) for p in preps])[:, None]       # (B n, 1)
    Xva = torch.stack([torch.from_numpy(p.X_val) for p in preps])
    bounds = np.cumsum([0] + [len(members) for members in groups]).tolist()
    net = _Stack([models[a:b] for a, b in zip(bounds, bounds[1:])])
    shuffles = _Shuffles(n, states)
    # one optimiser per zero_grad switch (only the one whose networks clear their gradients
    # calls zero_grad), one parameter group per learning rate
    optimisers: dict[bool, torch.optim.Optimizer] = {}
    for first, leaf in zip(bounds, net.leaves):
        s = specs[first]
        if s.zero_grad not in optimisers:
            optimisers[s.zero_grad] = OPTIMIZERS[optimizer]([{"params": [leaf], "lr": s.lr}])
        else:
            optimisers[s.zero_grad].add_param_group({"params": [leaf], "lr": s.lr})
    loss_fn = torch.func.vmap(nn.MSELoss())
    offsets = (torch.arange(B) * n)[:, None]
    results = [TrainResult(rmse=math.nan, pred_std=math.nan) for _ in specs]
    steps_per_epoch = -(-n // BATCH)

    def evaluate() -> list[np.ndarray]:
        with torch.no_grad():
            out = net(Xva)
        return [(out[i].reshape(-1) * float(p.y_std) + float(p.y_mean)).numpy()
                for i, p in enumerate(preps)]

    for epoch in range(epochs):
        rows = shuffles.epoch() + offsets
        total = torch.zeros(B, dtype=torch.float64)
        for start in range(0, n, BATCH):
            idx = rows[:, start:start + BATCH]
            m = idx.shape[1]
            flat_idx = idx.reshape(-1)
            xb = Xtr.index_select(0, flat_idx).view(B, m, -1)
            yb = ytr.index_select(0, flat_idx).view(B, m, 1)
            losses = loss_fn(net(xb), yb)
            if True in optimisers:
                optimisers[True].zero_grad()
            losses.sum().backward()
            for opt in optimisers.values():
                opt.step()
            total += losses.detach().double() * m
        for i in range(B):
            results[i].train_loss.append(float(total[i]) / n)
            results[i].steps += steps_per_epoch
        if record or epoch == epochs - 1:
            for i, pred in enumerate(evaluate()):
                results[i].log_epoch(epoch, rmse_mpa(pred, preps[i].y_val), record)
    for i, pred in enumerate(evaluate()):
        results[i].finish(pred, preps[i].y_val)
    out: list[TrainResult | None] = [None] * B
    for pos, i in enumerate(order):
        out[i] = results[pos]
    return out  # type: ignore[return-value]


def train_many(data: Concrete, specs: list[Spec], *, epochs: int = 120,
               optimizer: str = "adam", record: bool = False, threads: int | None = 1,
               chunk: int | None = None) -> list[TrainResult]:
    """Train every network of ``specs`` as :func:`train` would; results in ``specs`` order.

    ``chunk`` caps how many networks share one stack (None: all of them). The global
    generator is left as it was.
    """
    specs = list(specs)
    out: list[TrainResult | None] = [None] * len(specs)
    size = chunk or max(len(specs), 1)
    with torch_threads(threads), torch.random.fork_rng(devices=[]):
        for start in range(0, len(specs), size):
            part = specs[start:start + size]
            for i, r in enumerate(_train_group(data, part, epochs, optimizer, record)):
                out[start + i] = r
    return out  # type: ignore[return-value]
