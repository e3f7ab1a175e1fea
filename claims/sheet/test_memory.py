"""Sheet, "Key ideas" and "Formulas": memory during training; lecture, "Limitations" (L:513).

"Memory during training: weights, gradients, optimizer state (two extra tensors per parameter
for Adam) and stored activations, which grow with the batch size. Remedies: [...] activation
checkpointing, which keeps only some activations and recomputes the rest during the backward
pass, trading compute for memory." (S:19)
"Memory: 10 million float32 parameters trained with Adam need 10^7 * 4 * 4 bytes = 160 MB
before activations." (S:36)
"Reverse mode stores every intermediate from the forward pass, so memory scales with the depth
of the graph, which is why very deep models need gradient checkpointing." (L:513)

Every byte count is read from the objects themselves: parameters, .grad, the optimizer's
state after a real step, and the tensors autograd saved (support.machine.memory). MB = 1e6 bytes.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
import torch.utils.checkpoint

from support.harness.controls import control
from support.machine.memory import (MB, LiveTensors, SavedTensors, linear_fit, optimizer_state_bytes,
                            tensor_bytes)
from support.lab.train_torch import mlp


# small tensors: a second intra-op thread only adds OpenMP hand-offs on a shared machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


@pytest.mark.claim("MEM-01")
def test_training_memory_has_four_parts_and_only_activations_grow_with_the_batch(claim):
    sizes = [64, 128, 256, 512]
    parts = {n: _training_step_memory(n) for n in sizes}
    for name, value in parts[64].items():
        claim.record(f"{name}_bytes_at_batch_64", value, unit="B")
    slope, intercept, r2 = linear_fit(sizes, [parts[n]["activations"] for n in sizes])
    claim.record("activation_bytes_per_row", slope, unit="B",
                 note="input 8 + two ReLU outputs 2 x 64 + prediction and target 2, float32")
    claim.record("activations_linear_R2", r2)
    n_params = parts[64]["weights"] // 4
    assert parts[64]["gradients"] == parts[64]["weights"] == 4 * n_params
    assert parts[64]["optimizer_state"] >= 2 * parts[64]["weights"]
    for part in ("weights", "gradients", "optimizer_state"):
        assert len({parts[n][part] for n in sizes}) == 1, f"{part} must not depend on the batch"
    assert r2 > 0.99 and slope > 0 and abs(intercept) < slope


@pytest.mark.claim("MEM-02")
def test_adam_in_float32_needs_16_bytes_per_parameter_160_mb_for_ten_million(claim):
    model = nn.Linear(999, 10_000)  # 9,990,000 weights + 10,000 biases = 10,000,000
    n = sum(p.numel() for p in model.parameters())
    claim.check('parameters', n)

    def after_one_step(make_opt):
        for p in model.parameters():
            p.grad = None
        opt = make_opt(model.parameters())
        model(torch.randn(1, 999)).sum().backward()
        opt.step()
        return optimizer_state_bytes(opt)

    big, small = after_one_step(lambda ps: torch.optim.Adam(ps))
    weights = tensor_bytes(list(model.parameters()))
    grads = tensor_bytes([p.grad for p in model.parameters()])
    per_param = (weights + grads + big) / n
    claim.check('bytes_per_parameter', per_param, note='weights + gradients + exp_avg + exp_avg_sq')
    claim.check('total_MB', (weights + grads + big + small) / MB, unit='MB')
    claim.record("step_counter_bytes", small, unit="B",
                 note="one 0-d float32 'step' per parameter tensor, on top of the 16 B/param")
    sgd_big, sgd_small = after_one_step(lambda ps: torch.optim.SGD(ps, lr=0.1))
    claim.record("sgd_bytes_per_parameter", (weights + grads + sgd_big + sgd_small) / n)
    assert 10**7 * 4 * 4 == 160_000_000
    assert per_param == 16 and small <= 8 * len(list(model.parameters()))
    assert (weights + grads + sgd_big + sgd_small) / n == 8, "control: plain SGD keeps no state"


@control("MEM-01", "MEM-02", what="torch.optim.Adam keeps no moment estimates: it steps like "
                                  "plain SGD, with no optimizer state")
def adam_keeps_no_state(mp):
    mp.setattr(torch.optim, "Adam", lambda params, lr=1e-3, **kwargs: torch.optim.SGD(params, lr=lr))


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
    assert diff <= 1e-6


@control("MEM-04", what="torch.utils.checkpoint runs the block plainly: it keeps every "
                        "activation and recomputes nothing")
def checkpoint_keeps_everything(mp):
    mp.setattr(torch.utils.checkpoint, "checkpoint", lambda fn, *args, **kwargs: fn(*args))


@pytest.mark.claim("MEM-08")
def test_reverse_mode_memory_grows_linearly_with_depth(claim):
    width, rows, depths = 256, 256, [1, 2, 4, 8]
    held, held_no_grad = [], []
    for depth in depths:
        torch.manual_seed(0)
        model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width),
                                                                   nn.ReLU())])
        x = torch.randn(rows, width)
        with SavedTensors(exclude=[model, x]) as graph:
            out = model(x)
        held.append(graph.held_bytes())
        with torch.no_grad(), SavedTensors(exclude=[model, x]) as graph0:
            model(x)
        held_no_grad.append(graph0.held_bytes())
        del out
    slope, intercept, r2 = linear_fit(depths, held)
    # a reference, not a figure of the notes: one saved float32 ReLU output (also the next
    # Linear's saved input) of rows x width per layer
    claim.check('held_bytes_per_layer', slope, unit='B',
                note=f"one float32 activation of {rows} x {width} is {rows * width * 4} B")
    claim.record("depth_linear_R2", r2)
    claim.record("held_MB_by_depth", [h / MB for h in held], unit="MB")
    assert r2 > 0.99 and slope > 0
    assert held_no_grad == [0] * len(depths), "control: without the tape nothing is stored"


@control("MEM-08", what="torch's Linear layers record nothing on the tape (their outputs are "
                        "cut from the graph), so no intermediate is stored however deep the net")
def linear_layers_record_nothing(mp):
    real = nn.Linear.forward

    def untaped(self, x):
        with torch.no_grad():
            return real(self, x)
    mp.setattr(nn.Linear, "forward", untaped)
