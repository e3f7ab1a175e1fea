"""The narrow bowl of "Adam, and what its parameters do" and the runs behind Figs. 70 and 71.

Protocol §9 of ``shared/reference/notes-protocols.md``: L = ½(θ₁² + 40θ₂²), gradient
(θ₁, 40θ₂), start (−4, 1.5) (inferred by search; the notes do not print it), Adam lr 0.1
with the defaults β₁ 0.9, β₂ 0.999, ε 1e-8, SGD lr 0.045, SGD with momentum 0.9 at lr 0.01,
the rotated bowl H = R(45°) diag(1, 40) R(45°)ᵀ. "Loss at step k" is L at the k-th iterate,
"distance" is ‖θ‖₂. Every run uses :mod:`support.lab.optim_reference`.

Each ``fig_*`` function returns plain series (NumPy arrays in dicts) so that the claims can
assert on them and a figure module can plot them without re-deriving anything:

* :func:`fig70_paths` (left panel): 60-step paths of SGD, momentum SGD and Adam.
* :func:`fig70_beta1` (middle): Adam paths and losses for β₁ ∈ {0, 0.9, 0.99}, 100 steps.
* :func:`fig70_lr` (right): distance to the minimum for lr ∈ {0.01, 0.1, 0.5}, 300 steps.
* :func:`fig71_step_sizes` (left): per-coordinate |step| of Adam and SGD.
* :func:`fig71_beta2` (middle): 1-D Adam at lr 1, gradient 1 for steps 0–199 then 0.01,
  step/lr for β₂ ∈ {0.9, 0.99, 0.999}, 600 steps.
* :func:`fig71_eps` (right): first Adam step at lr 1e-3 against gradient magnitude for
  ε ∈ {1e-8, 1e-4, 0.1}, with SGD's line lr·g.
* :func:`rotated_loss` : Adam's loss after 100 steps on the bowl rotated by 45°.
"""
from __future__ import annotations

import numpy as np

from support.lab.optim_reference import SGD, Adam, Run, run

CURVATURE = (1.0, 40.0)
START = (-4.0, 1.5)
ADAM_LR = 0.1
SGD_LR = 0.045
MOMENTUM = 0.9
MOMENTUM_LR = 0.01
HESSIAN = np.diag(CURVATURE)


def rotation(deg: float) -> np.ndarray:
    """R(deg): columns (cos, sin) and (−sin, cos); at 45° (1,1)/√2 and (−1,1)/√2."""
    a = np.deg2rad(deg)
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def hessian(deg: float = 0.0) -> np.ndarray:
    """The bowl's Hessian, rotated by ``deg`` degrees: R diag(1, 40) Rᵀ."""
    if deg == 0.0:
        return HESSIAN.copy()
    r = rotation(deg)
    return r @ HESSIAN @ r.T


def loss(theta, h: np.ndarray = HESSIAN) -> np.ndarray:
    """½ θᵀHθ, for one point (d,) or a path (n, d)."""
    theta = np.asarray(theta, dtype=np.float64)
    return 0.5 * np.einsum("...i,ij,...j->...", theta, h, theta)


def gradient(h: np.ndarray = HESSIAN):
    """grad_fn(theta, t) = H theta, in the form :func:`support.lab.optim_reference.run` takes."""
    return lambda theta, t: h @ theta


def descend(opt, steps: int, h: np.ndarray = HESSIAN, start=START) -> Run:
    return run(opt, gradient(h), np.array(start, dtype=np.float64), steps)


def distance(thetas: np.ndarray) -> np.ndarray:
    return np.linalg.norm(thetas, axis=-1)


# ------------------------------------------------------------------------------ Fig. 70
def fig70_paths(steps: int = 60) -> dict[str, np.ndarray]:
    """Left panel: iterates (steps+1, 2) of plain SGD, SGD with momentum, and Adam."""
    return {
        "sgd": descend(SGD(SGD_LR), steps).thetas,
        "momentum": descend(SGD(MOMENTUM_LR, momentum=MOMENTUM), steps).thetas,
        "adam": descend(Adam(ADAM_LR), steps).thetas,
    }


def fig70_beta1(betas=(0.0, 0.9, 0.99), steps: int = 100) -> dict[float, dict[str, np.ndarray]]:
    """Middle panel: for each β₁, the path and the loss at every iterate."""
    out = {}
    for b1 in betas:
        path = descend(Adam(ADAM_LR, beta1=b1), steps).thetas
        out[b1] = {"path": path, "loss": loss(path)}
    return out


def fig70_lr(lrs=(0.01, 0.1, 0.5), steps: int = 300) -> dict[float, np.ndarray]:
    """Right panel: ‖θ_k‖ for k = 0..steps, per learning rate."""
    return {lr: distance(descend(Adam(lr), steps).thetas) for lr in lrs}


def rotated_loss(deg: float = 45.0, steps: int = 100, lr: float = ADAM_LR) -> float:
    h = hessian(deg)
    return float(loss(descend(Adam(lr), steps, h=h).thetas[-1], h))


# ------------------------------------------------------------------------------ Fig. 71
def fig71_step_sizes(steps: int = 60) -> dict[str, np.ndarray]:
    """Left panel: |θ_k − θ_{k−1}| per coordinate, shape (steps, 2), for Adam and SGD."""
    return {
        "adam": np.abs(descend(Adam(ADAM_LR), steps).steps),
        "sgd": np.abs(descend(SGD(SGD_LR), steps).steps),
    }


DROP_AT = 200
DROP_FACTOR = 100.0


def dropping_gradient(t: int) -> np.ndarray:
    """1.0 for step indices 0–199, then 0.01 (protocol §9)."""
    return np.array([1.0 if t < DROP_AT else 1.0 / DROP_FACTOR])


def fig71_beta2(betas=(0.9, 0.99, 0.999), steps: int = 600, lr: float = 1.0
                ) -> dict[float, np.ndarray]:
    """Middle panel: Adam's |step| / lr at each step index 0..steps−1 for each β₂."""
    out = {}
    for b2 in betas:
        r = run(Adam(lr, beta2=b2), lambda theta, t: dropping_gradient(t), np.zeros(1), steps)
        out[b2] = np.abs(r.steps[:, 0]) / lr
    return out


EPS_PANEL = (1e-8, 1e-4, 0.1)


def fig71_eps(eps_values=EPS_PANEL, lr: float = 1e-3, grads=None) -> dict:
    """Right panel: the first Adam step against gradient magnitude, per ε, and SGD's lr·g."""
    g = np.logspace(-12, 2, 57) if grads is None else np.asarray(grads, dtype=np.float64)
    out = {"grad": g, "sgd": lr * g}
    for eps in eps_values:
        opt = Adam(lr, eps=eps)
        out[eps] = np.array([-opt.step(np.zeros(1), np.array([gi]), opt.init(np.zeros(1)))[0][0]
                             for gi in g])
    return out
