"""Summary sheet, "Key ideas", "Memory during training" (S:19).

"Memory during training: weights, gradients, optimizer state (two extra tensors per parameter
for Adam) and stored activations, which grow with the batch size" (MEM-01; Adam's two tensors:
ADAM-24). "Remedies: smaller micro-batches with gradient accumulation, mixed precision, and
activation checkpointing, which keeps only some activations and recomputes the rest during the
backward pass, trading compute for memory": the list of remedies (MEM-03) is not testable,
checkpointing is MEM-04 (with the lecture's "very deep models need gradient checkpointing",
L:513).

Every byte count is read from the objects themselves: parameters, .grad, the optimizer's state
after a real step, and the tensors autograd saved (support.machine.memory). MB = 1e6 bytes.
ADAM-24 counts the state tensors of torch.optim.Adam after a step and of optax.adam's state.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from support.rules.controls import control
from support.lab.nested import D_IN, nested_model, param_groups
from support.lab.perturb import first_group_only, with_defaults
from support.lab.train_torch import mlp
from support.machine.memory import (
    MB,
    LiveTensors,
    SavedTensors,
    linear_fit,
    optimizer_state_bytes,
    tensor_bytes,
)


def _training_step_memory(rows: int) -> dict:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(rows, 8), torch.randn(rows, 1)
    with SavedTensors(exclude=[model]) as graph:
        loss = F.mse_loss(model(x), y)
    activations = graph.held_bytes()
    loss.backward()
    opt.step()
    big, small = optimizer_state_bytes(opt)
    return {"weights": tensor_bytes(list(model.parameters())),
            "gradients": tensor_bytes([p.grad for p in model.parameters()]),
            "optimizer_state": big + small,
            "activations": activations}


class _Block(nn.Module):
    """Two Linear+ReLU layers that count their forward calls (recomputation included)."""

    calls = 0

    def __init__(self, width: int):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
                               nn.ReLU())

    def forward(self, h):
        _Block.calls += 1
        return self.f(h)


def _run_blocks(use_checkpoint: bool, blocks: int = 4, width: int = 256, rows: int = 512):
    torch.manual_seed(0)
    model = nn.Sequential(*[_Block(width) for _ in range(blocks)])
    x = torch.randn(rows, width)
    _Block.calls = 0
    with SavedTensors(exclude=[model, x]) as graph, LiveTensors() as live:
        h = x
        for block in model:
            h = (torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
                 if use_checkpoint else block(h))
    held = {"graph": graph.held_bytes(), "alive": live.live_bytes()}
    h.sum().backward()
    return held, _Block.calls, [p.grad.clone() for p in model.parameters()]


@pytest.mark.claim("ADAM-24")
@pytest.mark.parametrize("library", ["torch", "optax"])
def test_adam_keeps_two_parameter_sized_tensors_per_parameter(claim, library):
    shapes = {"W": (3, 2), "b": (2,)}
    if library == "torch":
        params = {k: torch.zeros(s, requires_grad=True) for k, s in shapes.items()}
        opt = torch.optim.Adam(params.values())
        for p in params.values():
            p.grad = torch.ones_like(p)
        opt.step()
        state = {k: dict(opt.state[p]) for k, p in params.items()}
        per_param = {k: sorted(n for n, v in st_.items() if tuple(v.shape) == shapes[k])
                     for k, st_ in state.items()}
        extra = {k: sorted(n for n, v in st_.items() if tuple(v.shape) != shapes[k])
                 for k, st_ in state.items()}
    else:
        import jax
        import jax.numpy as jnp
        import optax
        params = {k: jnp.zeros(s) for k, s in shapes.items()}
        state = optax.adam(1e-3).init(params)
        adam_state = next(s for s in jax.tree_util.tree_leaves(
            state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu"))
        # every field of the state: a tree shaped like the parameters, or something else
        per_param = {k: [] for k in shapes}
        extra = {"shared": []}
        for field in adam_state._fields:
            value = getattr(adam_state, field)
            if isinstance(value, dict) and set(value) == set(shapes):
                for k in shapes:
                    (per_param[k] if value[k].shape == shapes[k] else extra["shared"]).append(field)
            else:
                extra["shared"].append(f"{field} {tuple(jnp.shape(value))}")
    if library == "torch":
        claim.note("torch keeps a 0-d `step` tensor per parameter besides the two moments: "
                   "three state entries, two of the parameter's size (catalogue nuance 19)")
    claim.record("parameter_sized_state", per_param)
    claim.record("other_state", extra)
    counts = {k: len(v) for k, v in per_param.items()}
    claim.check('tensors_per_parameter', max(counts.values()))
    claim.check("every parameter holds as many", len(set(counts.values())) == 1)


@control("ADAM-24", what="torch's Adam and optax's adam keep a third parameter-sized tensor, "
                         "the running maximum of v (AMSGrad), by default")
def adam_keeps_the_max_of_v(mp):
    import optax
    amsgrad = optax.amsgrad
    with_defaults(mp, torch.optim.Adam.__init__, amsgrad=True)
    mp.setattr(optax, "adam", lambda learning_rate, **kw: amsgrad(learning_rate, **kw))


@pytest.mark.claim("ADAM-24")
def test_adam_keeps_two_tensors_for_every_parameter_of_every_group(claim):
    """"Two extra tensors per parameter", for a model and an optimizer as recipes build them:
    the realistic nested model in three parameter groups (decay, no decay, the head at its
    own lr). After one step, every parameter of every group has its two moments, each of the
    parameter's size."""
    torch.manual_seed(0)
    model = nested_model()
    opt = torch.optim.Adam(param_groups(model, lr=1e-3, weight_decay=0.0))
    model(torch.randn(16, D_IN)).pow(2).mean().backward()
    opt.step()
    sized = {n: sorted(k for k, v in opt.state[p].items() if torch.is_tensor(v)
                       and v.shape == p.shape and v.dim() > 0)
             for n, p in model.named_parameters()}
    counts = {n: len(v) for n, v in sized.items()}
    claim.record("parameters with their two moments", f"{sum(c == 2 for c in counts.values())} "
                                                      f"of {len(counts)}")
    claim.record("groups", [g["name"] for g in opt.param_groups])
    claim.record("parameters with another count", {n: c for n, c in counts.items() if c != 2})
    # every parameter: the fewest any has
    claim.check('tensors_per_parameter', min(counts.values()))


@control("ADAM-24", what="torch's Adam steps its first parameter group only: the parameters of "
                         "the other groups get no moments")
def adam_steps_the_first_group_only(mp):
    # 'per parameter', for an optimizer of several groups: one group cannot show it
    first_group_only(mp, torch.optim.Adam, "step")


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("MEM-01")
def test_training_memory_has_four_parts_and_only_activations_grow_with_the_batch(claim):
    sizes = [64, 128, 256, 512]
    parts = {n: _training_step_memory(n) for n in sizes}
    for name, value in parts[64].items():
        claim.record(f"{name}_bytes_at_batch_64", value, unit="B")
    slope, intercept, r2 = linear_fit(sizes, [parts[n]["activations"] for n in sizes])
    claim.check("activation bytes per row", slope, unit="B",
                note="input 8 + two ReLU outputs 2 x 64 + prediction and target 2, float32")
    claim.check("activations linear R2", r2)
    claim.record("activation bytes at zero rows (intercept)", intercept, unit="B")
    n_params = parts[64]["weights"] // 4
    assert parts[64]["gradients"] == parts[64]["weights"] == 4 * n_params
    # Adam's part: its two extra tensors per parameter (ADAM-24), besides its 0-d steps
    assert parts[64]["optimizer_state"] >= 2 * parts[64]["weights"]
    for part in ("weights", "gradients", "optimizer_state"):
        assert len({parts[n][part] for n in sizes}) == 1, f"{part} must not depend on the batch"


@control("MEM-01", "MEM-02", moves=("bytes_per_parameter", "total_MB"),
         what="torch.optim.Adam keeps no moment estimates: it steps like plain SGD, with no "
              "optimizer state (MEM-02's 16 bytes and 160 MB become 8 and 80)")
def adam_keeps_no_state(mp):
    mp.setattr(torch.optim, "Adam", lambda params, lr=1e-3, **kwargs: torch.optim.SGD(params, lr=lr))


@control("MEM-01", what="the batch does not grow: torch.randn draws at most 64 rows whatever row "
                        "count it is asked for, so every step saves the activations of 64 rows")
def batches_stop_at_64_rows(mp):
    real = torch.randn

    def randn(*size, **kwargs):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
        return real(min(shape[0], 64), *shape[1:], **kwargs) if shape else real(**kwargs)
    mp.setattr(torch, "randn", randn)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.claim("MEM-04")
def test_checkpointing_keeps_fewer_activations_and_recomputes_the_forward(claim):
    plain, plain_calls, plain_grads = _run_blocks(use_checkpoint=False)
    ckpt, ckpt_calls, ckpt_grads = _run_blocks(use_checkpoint=True)
    claim.record("alive_after_forward_MB", plain["alive"] / MB, unit="MB")
    claim.record("alive_after_forward_checkpointed_MB", ckpt["alive"] / MB, unit="MB")
    claim.record("graph_held_checkpointed_MB", ckpt["graph"] / MB, unit="MB",
                 note="the blocks' inputs: the activations checkpointing keeps")
    claim.record("block_forward_calls", [plain_calls, ckpt_calls])
    diff = max((a - b).abs().max().item() for a, b in zip(plain_grads, ckpt_grads))
    claim.check('max_grad_diff', diff)
    assert ckpt["alive"] < plain["alive"] and ckpt["graph"] < plain["graph"]
    assert ckpt["graph"] > 0, "checkpointing keeps some activations (each block's input)"
    assert plain_calls == 4 and ckpt_calls == 8, "each checkpointed block runs forward twice"


@control("MEM-04", what="torch.utils.checkpoint runs the block plainly: it keeps every "
                        "activation and recomputes nothing")
def checkpoint_keeps_everything(mp):
    mp.setattr(torch.utils.checkpoint, "checkpoint", lambda fn, *args, **kwargs: fn(*args))
