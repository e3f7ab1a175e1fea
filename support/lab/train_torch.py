"""The one PyTorch training loop of the notes (protocol §3), with a switch per documented bug.

Every concrete-data story calls :func:`train`. The defaults are the working loop:
8-64-64-1 ReLU MLP with PyTorch's default init, one ``torch.manual_seed(seed)`` at the top,
inputs scaled on the training rows only, the target standardised with the training mean and
population std (ddof 0) and shaped (N, 1), ``DataLoader(batch_size=64, shuffle=True)``,
MSELoss, Adam at lr 1e-3, forward -> loss -> zero_grad -> backward -> step, and the
final-epoch validation RMSE in MPa computed in float32.

The switches reproduce the stories: ``target_2d=False`` (the unshaped target that
broadcasts), ``zero_grad=False`` (the accumulating loop), ``scale=False`` (raw inputs),
``optimizer="sgd"`` with ``lr`` (the learning-rate sweep), ``scaler_on_all=True`` (the
scaler leak: fitted on every row before the split).
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from support.lab.data import Concrete, lecture_split

BATCH = 64
HIDDEN = 64


def mlp(d_in: int = 8, hidden: int = HIDDEN, depth: int = 2, d_out: int = 1) -> nn.Sequential:
    """The notes' MLP family: ``depth`` hidden ReLU layers of width ``hidden``."""
    layers: list[nn.Module] = []
    width = d_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, d_out))
    return nn.Sequential(*layers)


@contextlib.contextmanager
def setting(get, put, value):
    """Run with one of torch's global settings at ``value`` (``put(value)``), then put the
    one ``get()`` read before back."""
    old = get()
    put(value)
    try:
        yield
    finally:
        put(old)


def torch_threads(n: int | None):
    """Run with ``n`` intra-op threads (the protocol's re-runs used one), then restore."""
    if n is None:
        return contextlib.nullcontext()
    return setting(torch.get_num_threads, torch.set_num_threads, n)


@dataclass
class Prepared:
    """Float32 train/validation arrays after the protocol's scaling."""

    X_train: np.ndarray
    y_train: np.ndarray       # standardised target, 1-D
    X_val: np.ndarray
    y_val: np.ndarray         # MPa, float32
    y_mean: np.float32
    y_std: np.float32


def prepare(data: Concrete, train_idx, val_idx, *, scale: bool = True,
            scaler_on_all: bool = False) -> Prepared:
    from sklearn.preprocessing import StandardScaler

    X = data.X.astype(np.float32)
    y = data.y.astype(np.float32)
    if scaler_on_all:
        # the leaky arm: scaler fitted on all 1,030 rows, then train(scale=False)
        X = StandardScaler().fit(X).transform(X).astype(np.float32)
        scale = False
    Xtr, Xva = X[train_idx], X[val_idx]
    if scale:
        sc = StandardScaler().fit(Xtr)
        Xtr = sc.transform(Xtr).astype(np.float32)
        Xva = sc.transform(Xva).astype(np.float32)
    ytr = y[train_idx]
    mean = ytr.mean(dtype=np.float32)
    std = ytr.std(dtype=np.float32)  # ddof 0, as the lecture
    return Prepared(Xtr, ((ytr - mean) / std).astype(np.float32), Xva, y[val_idx], mean, std)


@dataclass
class TrainResult:
    rmse: float                          # final-epoch validation RMSE, MPa
    pred_std: float                      # torch std (unbiased) of validation predictions, MPa
    history: list[float] = field(default_factory=list)      # validation RMSE per epoch
    train_loss: list[float] = field(default_factory=list)   # mean training loss per epoch
    grad_norms: list[float] = field(default_factory=list)   # ||first layer W.grad|| per step
    warnings: list[str] = field(default_factory=list)       # UserWarning messages, in order
    steps: int = 0
    nonfinite_epochs: int = 0
    first_nonfinite_epoch: int | None = None
    predictions: np.ndarray | None = None

    @property
    def n_warnings(self) -> int:
        return len(self.warnings)

    def log_epoch(self, epoch: int, rmse: float, record: bool) -> None:
        """Note an epoch's validation RMSE (kept when ``record``; NaN epochs always counted)."""
        if record:
            self.history.append(rmse)
        if not math.isfinite(rmse):
            self.nonfinite_epochs += 1
            if self.first_nonfinite_epoch is None:
                self.first_nonfinite_epoch = epoch + 1

    def finish(self, pred: np.ndarray, y_val: np.ndarray) -> None:
        """The final-epoch figures from the validation predictions (MPa)."""
        self.rmse = rmse_mpa(pred, y_val)
        self.pred_std = float(torch.from_numpy(pred).std())
        self.predictions = pred


def rmse_mpa(pred: np.ndarray, y: np.ndarray) -> float:
    d = pred.astype(np.float32).reshape(-1) - y.astype(np.float32).reshape(-1)
    return float(np.sqrt(np.mean(d * d, dtype=np.float32)))


def train(data: Concrete, *, fold: int = 0, seed: int = 0, epochs: int = 120,
          optimizer: str = "adam", lr: float = 1e-3, target_2d: bool = True,
          zero_grad: bool = True, scale: bool = True, scaler_on_all: bool = False,
          record: bool = False, max_steps: int | None = None, probe_grad_norm: bool = False,
          train_idx=None, val_idx=None, device: str = "cpu", threads: int | None = 1,
          hidden: int = HIDDEN, track_loss: bool = True) -> TrainResult:
    """Train the notes' MLP once and return its final-epoch validation RMSE (MPa).

    ``track_loss=False`` keeps no training loss (``train_loss`` stays empty): no
    ``loss.item()`` per step, which on a GPU waits for the device every step. The notes'
    timing script (protocol §11) kept none; the numbers are the same either way."""
    if train_idx is None or val_idx is None:
        train_idx, val_idx = lecture_split(fold)
    with torch_threads(threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        p = prepare(data, train_idx, val_idx, scale=scale, scaler_on_all=scaler_on_all)
        Xtr = torch.from_numpy(p.X_train).to(device)
        ytr = torch.from_numpy(p.y_train).to(device)
        if target_2d:
            ytr = ytr[:, None]
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(Xtr, ytr),
                                             batch_size=BATCH, shuffle=True)
        model = mlp(hidden=hidden).to(device)
        if optimizer == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        elif optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=lr)
        else:
            raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")
        loss_fn = nn.MSELoss()
        Xva = torch.from_numpy(p.X_val).to(device)
        res = TrainResult(rmse=math.nan, pred_std=math.nan)
        first_w = model[0].weight

        def evaluate() -> np.ndarray:
            model.eval()
            with torch.no_grad():
                pred = model(Xva).reshape(-1) * float(p.y_std) + float(p.y_mean)
            return pred.cpu().numpy()

        stop = False
        for epoch in range(epochs):
            model.train()
            total, count = 0.0, 0
            for xb, yb in loader:
                loss = loss_fn(model(xb), yb)
                if zero_grad:
                    opt.zero_grad()
                loss.backward()
                opt.step()
                res.steps += 1
                if track_loss:
                    total += loss.item() * len(xb)
                    count += len(xb)
                if probe_grad_norm:
                    res.grad_norms.append(float(first_w.grad.norm()))
                if max_steps is not None and res.steps >= max_steps:
                    stop = True
                    break
            if track_loss:
                res.train_loss.append(total / max(count, 1))
            if record or stop or epoch == epochs - 1:
                res.log_epoch(epoch, rmse_mpa(evaluate(), p.y_val), record)
            if stop:
                break
        res.finish(evaluate(), p.y_val)
    res.warnings = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return res


def baseline_rmse(data: Concrete, fold: int = 0, train_idx=None, val_idx=None) -> float:
    """Predict the training mean (float32) for every validation row."""
    if train_idx is None or val_idx is None:
        train_idx, val_idx = lecture_split(fold)
    y = data.y.astype(np.float32)
    mean = y[train_idx].mean(dtype=np.float32)
    return rmse_mpa(np.full(len(val_idx), mean, dtype=np.float32), y[val_idx])


def seeded_mlp(width: int = 256, d_in: int = 32) -> nn.Sequential:
    """The MLP family's two-hidden-layer member of ``width``, initialised from seed 0."""
    torch.manual_seed(0)
    return mlp(d_in=d_in, hidden=width)
