"""Reference optimizers written from the notes' equations, in float64 NumPy.

"Adam, and what its parameters do" (lecture notes, L:432-433) prints the update

    m_t = b1 m_{t-1} + (1 - b1) g_t          v_t = b2 v_{t-1} + (1 - b2) g_t^2
    mhat_t = m_t / (1 - b1^t)                 vhat_t = v_t / (1 - b2^t)
    theta_t = theta_{t-1} - lr * mhat_t / (sqrt(vhat_t) + eps)

with eps outside the square root. :class:`Adam` is that update and nothing more; every
hyper-parameter of the equations (b1, b2, eps, lr, the bias correction) is an argument so
that each claim can switch one of them. :class:`AdamW` adds decoupled weight decay
(Loshchilov & Hutter), :class:`SGD` is plain and momentum SGD with PyTorch's momentum
convention (the buffer is the gradient itself on the first step, then mu*buf + g).

These are the *reference*: the claims compare torch.optim and optax against them, and the
bowl figures (``support.lab.bowl``) are computed with them. They are deliberately slow and
plain (one step at a time, no fusion), so that what they compute can be read off the code.

API (stable; other modules import it):

* ``Adam(lr, beta1=0.9, beta2=0.999, eps=1e-8, bias_correction=True, weight_decay=0.0)``;
  ``weight_decay`` here is the *coupled* L2 term torch.optim.Adam adds to the gradient.
* ``AdamW(lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, bias_correction=True)``.
* ``SGD(lr, momentum=0.0, weight_decay=0.0)``.
* ``opt.init(theta) -> state``; ``opt.step(theta, grad, state) -> (theta_new, state)``.
* ``run(opt, grad_fn, theta0, steps) -> Run`` with ``.thetas`` (steps+1, d) float64 (row k is
  the k-th iterate; row 0 the start), ``.steps`` (steps, d) the per-step displacement, and
  ``.states`` the optimizer state after each step (``keep_states=True``).
  ``grad_fn(theta, t)`` returns the gradient at ``theta`` for step index ``t`` (0-based); a
  gradient that depends on theta only may ignore ``t``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

F64 = np.float64


def _f64(x) -> np.ndarray:
    return np.array(x, dtype=F64)


@dataclass
class AdamState:
    t: int                      # steps taken so far
    m: np.ndarray               # running average of the gradient
    v: np.ndarray               # running average of the squared gradient


@dataclass(frozen=True)
class Adam:
    """The notes' Adam (L:432-433). ``weight_decay`` is torch.optim.Adam's coupled L2 term:
    ``lam * theta`` is added to the gradient *before* the running averages, exactly as an
    L2 penalty ``lam/2 ||theta||^2`` in the loss would."""

    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    bias_correction: bool = True
    weight_decay: float = 0.0

    def init(self, theta) -> AdamState:
        z = np.zeros_like(_f64(theta))
        return AdamState(0, z, z.copy())

    def direction(self, g: np.ndarray, state: AdamState) -> tuple[np.ndarray, AdamState]:
        """The adaptive part, mhat / (sqrt(vhat) + eps), and the new state."""
        t = state.t + 1
        m = self.beta1 * state.m + (1.0 - self.beta1) * g
        v = self.beta2 * state.v + (1.0 - self.beta2) * g * g
        if self.bias_correction:
            mhat = m / (1.0 - self.beta1 ** t)
            vhat = v / (1.0 - self.beta2 ** t)
        else:
            mhat, vhat = m, v
        return mhat / (np.sqrt(vhat) + self.eps), AdamState(t, m, v)

    def step(self, theta, g, state: AdamState):
        theta, g = _f64(theta), _f64(g)
        if self.weight_decay:
            g = g + self.weight_decay * theta
        d, state = self.direction(g, state)
        return theta - self.lr * d, state


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay, as Loshchilov & Hutter's Algorithm 2 writes it:
    theta <- theta - lr*(mhat/(sqrt(vhat) + eps) + lam*theta). The decay never enters m or
    v, so it is not divided by sqrt(vhat). (torch.optim.AdamW computes the same thing as
    theta*(1 - lr*lam) - lr*direction: a few ulps apart, see ADAM-19.)"""

    weight_decay: float = 0.01

    def step(self, theta, g, state: AdamState):
        theta, g = _f64(theta), _f64(g)
        d, state = self.direction(g, state)
        return theta - self.lr * (d + self.weight_decay * theta), state


@dataclass
class SGDState:
    t: int
    buf: np.ndarray | None


@dataclass(frozen=True)
class SGD:
    """SGD; with ``momentum`` PyTorch's convention (buffer = g on the first step, then
    mu*buffer + g; theta <- theta - lr*buffer), which optax.sgd's trace also follows.
    ``weight_decay`` adds lam*theta to the gradient (torch.optim.SGD's weight_decay)."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def init(self, theta) -> SGDState:
        return SGDState(0, None)

    def step(self, theta, g, state: SGDState):
        theta, g = _f64(theta), _f64(g)
        if self.weight_decay:
            g = g + self.weight_decay * theta
        if self.momentum:
            buf = g.copy() if state.buf is None else self.momentum * state.buf + g
        else:
            buf = g
        return theta - self.lr * buf, SGDState(state.t + 1, buf)


@dataclass
class Run:
    thetas: np.ndarray                       # (steps + 1, d): row k is the k-th iterate
    states: list = field(default_factory=list)

    @property
    def steps(self) -> np.ndarray:
        """Per-step displacement theta_k - theta_{k-1}, shape (steps, d)."""
        return np.diff(self.thetas, axis=0)


def run(opt, grad_fn: Callable[[np.ndarray, int], np.ndarray], theta0, steps: int,
        keep_states: bool = False) -> Run:
    """Iterate ``opt`` for ``steps`` steps from ``theta0`` with gradients ``grad_fn(theta, t)``."""
    theta = _f64(theta0).reshape(-1) if _f64(theta0).ndim == 0 else _f64(theta0)
    state = opt.init(theta)
    out = np.empty((steps + 1,) + theta.shape, dtype=F64)
    out[0] = theta
    states = []
    for t in range(steps):
        theta, state = opt.step(theta, grad_fn(theta, t), state)
        out[t + 1] = theta
        if keep_states:
            states.append(state)
    return Run(out, states)
