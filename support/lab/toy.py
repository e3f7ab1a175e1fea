"""The autodiff toy network of the notes (protocol §4.1, §4.2, §5).

    z = W x + b,  a = tanh(z),  yhat = v . a + c,  L = (yhat - y)^2

drawn from ``numpy.random.default_rng(0)`` in the order W (3x4), b (3), v (3), c (scalar),
x (4), with y = 1.234, everything float64. 3*4 + 3 + 3 + 1 = 19 parameters.

API (stable; other modules import it). Gradients are dicts ``{"W", "b", "v", "c"}`` of
float64 NumPy arrays (``c`` 0-d):

* ``Y``, ``PARAM_NAMES``, ``FD_STEPS`` (the 40 steps ``logspace(-1, -13, 40)``).
* ``draw(seed=0, hidden=3, inputs=4) -> Toy``: the network (fields W, b, v, c, x, y).
  ``toy.params`` is the parameter dict; ``toy.n_params`` the count.
* ``loss_np(params, x, y) -> float`` and ``forward_np(params, x, y) -> dict`` (z, a, yhat,
  r, L): the forward pass in NumPy.
* ``hand_gradient(params, x, y) -> dict`` and ``hand_adjoints(params, x, y) -> dict``: the
  notes' chain rule (dL/dr = 2r, dL/dyhat = dL/dr, dL/da = dL/dyhat v, dL/dz = dL/da (1-a^2),
  dL/dW = dL/dz x^T, dL/db = dL/dz, dL/dv = dL/dyhat a, dL/dc = dL/dyhat). Works for any
  sizes.
* ``torch_loss(toy_or_params, x=None, y=None, careless=False, sums="library") -> (loss,
  leaves)``: the loss
  as a torch float64 graph with leaves W, b, v, c requiring grad. ``careless=True`` is the
  notes' dtype bug (§5): c and y pass through ``torch.tensor(python float)`` and become
  float32.
* ``torch_gradient(toy, careless=False, sums="library") -> dict``: gradient from
  ``backward()``. ``sums="halving"`` forms W x from torch's own products and additions in
  a fixed order instead of ``W @ x``: each row's products, the upper half added onto the
  lower half until one is left ((p0 + p2) + (p1 + p3) for four inputs), the order a SIMD
  matrix-vector kernel reduces its lanes in. The values are the same; only the rounding of
  the sums can differ (AD-13).
* ``sum_order(matvec, W, x) -> str``: which order a matrix-vector product's sums follow on
  this machine: ``"in order"``, ``"halving"`` or ``"other"``.
* ``jax_loss(params, x, y)``: the loss in jax.numpy (pure; for grad / make_jaxpr).
* ``jax_args(toy) -> (params, x, y)``: jax arrays with strong dtypes (y not weak-typed),
  as the notes' jaxpr listing has them; call inside ``x64()`` for float64.
* ``jax_gradient(toy, x64=True) -> dict``: ``jax.grad`` over the params dict, in 64-bit
  mode (via ``support.lab.jaxutil.x64``) unless ``x64=False`` (JAX's float32 default).
* ``max_abs_diff(g1, g2) -> float``: largest elementwise |difference| over the four blocks.
* ``central_difference(params, x, y, h, name="W", index=(0, 0)) -> float``.
* ``fd_errors(toy, steps=FD_STEPS) -> (steps, errors)``: |central difference - hand| on
  W[0,0] for each step (protocol §4.2).
* ``jax_gradient_jitted(toy) -> dict``: ``jax.grad`` of the loss jitted once, in 64-bit mode
  (one compile per shape; the properties draw many networks).
* ``careless_errors(toy) -> (max abs error, max relative error)``: the careless branch's
  gradient against the hand gradient (§5).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Y = 1.234
PARAM_NAMES = ("W", "b", "v", "c")
FD_STEPS = np.logspace(-1, -13, 40)


@dataclass(frozen=True)
class Toy:
    W: np.ndarray
    b: np.ndarray
    v: np.ndarray
    c: np.ndarray     # 0-d float64
    x: np.ndarray
    y: float = Y

    @property
    def params(self) -> dict:
        return {"W": self.W, "b": self.b, "v": self.v, "c": self.c}

    @property
    def n_params(self) -> int:
        return sum(int(np.size(p)) for p in self.params.values())


def draw(seed: int = 0, hidden: int = 3, inputs: int = 4, y: float = Y) -> Toy:
    """The toy network; the draw order W, b, v, c, x is part of the protocol."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(hidden, inputs))
    b = rng.normal(size=hidden)
    v = rng.normal(size=hidden)
    c = np.asarray(rng.normal(), dtype=np.float64)
    x = rng.normal(size=inputs)
    return Toy(W, b, v, c, x, float(y))


def forward_np(params: dict, x, y) -> dict:
    z = params["W"] @ x + params["b"]
    a = np.tanh(z)
    yhat = params["v"] @ a + params["c"]
    r = yhat - y
    return {"z": z, "a": a, "yhat": yhat, "r": r, "L": r ** 2}


def loss_np(params: dict, x, y) -> float:
    return float(forward_np(params, x, y)["L"])


def hand_adjoints(params: dict, x, y) -> dict:
    """Every adjoint of Fig. 65, by the notes' formulas."""
    f = forward_np(params, x, y)
    dr = 2.0 * f["r"]
    dyhat = dr
    da = dyhat * params["v"]
    dz = da * (1.0 - f["a"] ** 2)
    return {"r": dr, "yhat": dyhat, "a": da, "z": dz,
            "W": np.outer(dz, x), "b": dz, "v": dyhat * f["a"], "c": np.asarray(dyhat)}


def hand_gradient(params: dict, x, y) -> dict:
    adj = hand_adjoints(params, x, y)
    return {k: adj[k] for k in PARAM_NAMES}


def _split(toy_or_params, x, y):
    if isinstance(toy_or_params, Toy):
        return toy_or_params.params, toy_or_params.x, toy_or_params.y
    return toy_or_params, x, y


def _halving(products, add):
    """Sum the last axis of ``products`` by adding its upper half onto its lower half."""
    while products.shape[-1] > 1:
        h = products.shape[-1] // 2
        head = add(products[..., :h], products[..., h:2 * h])
        products = head if products.shape[-1] % 2 == 0 else _cat(head, products[..., 2 * h:])
    return products[..., 0]


def _cat(a, b):
    import torch
    return torch.cat([a, b], dim=-1) if isinstance(a, torch.Tensor) else np.concatenate([a, b], -1)


def _in_order(products, add):
    total = products[..., 0]
    for j in range(1, products.shape[-1]):
        total = add(total, products[..., j])
    return total


def sum_order(matvec, W, x) -> str:
    """Which order ``matvec(W, x)`` (a library's W @ x) sums each row's products in:
    ``"in order"`` (left to right), ``"halving"`` (see ``torch_gradient``) or ``"other"``;
    W and x are float64 NumPy arrays and ``matvec`` returns one."""
    got = np.asarray(matvec(W, x), dtype=np.float64)
    products = np.asarray(W, dtype=np.float64) * np.asarray(x, dtype=np.float64)
    add = np.add
    for name, order in (("in order", _in_order), ("halving", _halving)):
        if np.array_equal(got, order(products, add)):
            return name
    return "other"


def torch_loss(toy_or_params, x=None, y=None, careless: bool = False, sums: str = "library"):
    """(loss, leaves): the toy loss as a torch graph; see the module docstring."""
    import torch
    params, x, y = _split(toy_or_params, x, y)
    W = torch.tensor(params["W"], requires_grad=True)
    b = torch.tensor(params["b"], requires_grad=True)
    v = torch.tensor(params["v"], requires_grad=True)
    xt = torch.tensor(x)
    if careless:
        # the bug of §5: two Python floats through torch.tensor -> float32 scalars
        c = torch.tensor(float(params["c"]), requires_grad=True)
        yt = torch.tensor(float(y))
    else:
        c = torch.tensor(float(params["c"]), dtype=torch.float64, requires_grad=True)
        yt = torch.tensor(float(y), dtype=torch.float64)
    if sums == "library":
        Wx = W @ xt
    elif sums == "halving":
        Wx = _halving(W * xt, torch.add)
    else:
        raise ValueError(f"sums is 'library' or 'halving', not {sums!r}")
    z = Wx + b
    a = torch.tanh(z)
    yhat = v @ a + c
    loss = (yhat - yt) ** 2
    return loss, {"W": W, "b": b, "v": v, "c": c, "x": xt, "y": yt}


def torch_gradient(toy_or_params, x=None, y=None, careless: bool = False,
                   sums: str = "library") -> dict:
    loss, leaves = torch_loss(toy_or_params, x, y, careless=careless, sums=sums)
    loss.backward()
    return {k: leaves[k].grad.detach().to(dtype=__import__("torch").float64).numpy()
            for k in PARAM_NAMES}


def jax_loss(params, x, y):
    import jax.numpy as jnp
    a = jnp.tanh(params["W"] @ x + params["b"])
    return (params["v"] @ a + params["c"] - y) ** 2


def jax_args(toy_or_params, x=None, y=None):
    import jax.numpy as jnp
    params, x, y = _split(toy_or_params, x, y)
    # np.float64 -> a strongly typed array; a bare Python float would be weak-typed and add
    # a convert_element_type equation to the jaxpr
    return ({k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in params.items()},
            jnp.asarray(np.asarray(x, dtype=np.float64)), jnp.asarray(np.float64(y)))


def jax_gradient(toy_or_params, x=None, y=None, x64: bool = True) -> dict:
    """``jax.grad`` of :func:`jax_loss` over the params dict, as float64 NumPy arrays."""
    import jax

    from support.lab.jaxutil import x64 as x64_mode
    params, x, y = _split(toy_or_params, x, y)
    with x64_mode(x64):
        g = jax.grad(jax_loss)(*jax_args(params, x, y))
        return {k: np.asarray(g[k], dtype=np.float64) for k in PARAM_NAMES}


def max_abs_diff(g1: dict, g2: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(g1[k], dtype=np.float64)
                                    - np.asarray(g2[k], dtype=np.float64))))
               for k in PARAM_NAMES)


def central_difference(params: dict, x, y, h: float, name: str = "W",
                       index=(0, 0)) -> float:
    plus = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    minus = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    plus[name][index] += h
    minus[name][index] -= h
    return (loss_np(plus, x, y) - loss_np(minus, x, y)) / (2.0 * h)


def fd_errors(toy: Toy, steps=FD_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Absolute error of the central difference on W[0,0] at each step (protocol §4.2)."""
    exact = hand_gradient(toy.params, toy.x, toy.y)["W"][0, 0]
    steps = np.asarray(steps, dtype=np.float64)
    errs = np.array([abs(central_difference(toy.params, toy.x, toy.y, h) - exact)
                     for h in steps])
    return steps, errs


def tape_nodes(loss) -> list:
    """Every autograd node reachable from ``loss.grad_fn``, each once, in creation order
    (a post-order walk of ``next_functions``)."""
    seen, order = set(), []

    def walk(fn):
        if fn is None or fn in seen:
            return
        seen.add(fn)
        for nxt, _ in fn.next_functions:
            walk(nxt)
        order.append(fn)
    walk(loss.grad_fn)
    return order


def hand_magnitudes(params: dict, x, y) -> dict:
    """For every adjoint of :func:`hand_adjoints`, the size rounding acts on (the "magnitude"
    of support/rules/error_models.py's models): the same chain with |.| of every factor, a
    difference counted as the sum of its sides' sizes, and the error a quantity carries in
    from earlier roundings counted with the size of what it came from (tanh' <= 1 passes the
    error of z to a unchanged). Two computations of an adjoint (the hand chain rule and
    autodiff, each with its own forward) differ by at most the model's gamma times this.

    Z = |W||x| + |b| (z and its rounding), A = |a| + Z (a with the error it carries),
    R = |v|.A + |c| + |y| (the residual r = yhat - y, whose terms cancel), D = 1 + a^2 +
    2|a|A (1 - a^2 with the error of a squared)."""
    W, b, v, c = (np.asarray(params[k], dtype=np.float64) for k in PARAM_NAMES)
    x = np.asarray(x, dtype=np.float64)
    z = W @ x + b
    a = np.tanh(z)
    Z = np.abs(W) @ np.abs(x) + np.abs(b)
    A = np.abs(a) + Z
    R = float(np.abs(v) @ A + abs(float(c)) + abs(float(y)))
    D = 1.0 + a * a + 2.0 * np.abs(a) * A
    dz = 2.0 * R * np.abs(v) * 2.0 * D
    return {"r": np.asarray(2.0 * R), "yhat": np.asarray(2.0 * R), "a": 2.0 * R * np.abs(v),
            "z": dz, "W": np.outer(dz, np.abs(x)), "b": dz, "v": 2.0 * R * 2.0 * A,
            "c": np.asarray(2.0 * R)}


_jitted_grad = None


def jax_gradient_jitted(t):
    """jax.grad of the toy loss, jitted once (one compile per shape, not per primitive)."""
    global _jitted_grad
    import jax

    from support.lab.jaxutil import x64
    if _jitted_grad is None:
        _jitted_grad = jax.jit(jax.grad(jax_loss))
    with x64():
        g = _jitted_grad(*jax_args(t))
        return {k: np.asarray(g[k]) for k in PARAM_NAMES}


def careless_errors(net) -> tuple[float, float]:
    """The careless branch's gradient against the hand gradient: (max absolute error, max
    relative error)."""
    hand = hand_gradient(net.params, net.x, net.y)
    g = torch_gradient(net, careless=True)
    rel = max(float(np.max(np.abs((g[k] - hand[k]) / hand[k]))) for k in hand)
    return max_abs_diff(g, hand), rel
