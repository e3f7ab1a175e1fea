"""Lecture, "PyTorch records a tape" (L:79-97).

Fig. 67 and the accumulation it implies. "every operation on it appends a node to a graph,
and each node keeps a reference to whatever its backward rule will need." "Call backward()
twice without clearing, and W.grad holds exactly twice the gradient; the demo measures a
ratio of 2.0." Protocol §4.3: the toy network of §4.1 as float64 torch tensors, the graph
walked from ``loss.grad_fn``. ACC-10 and TAPE-20 are L:96's gradient accumulation over k
micro-batches.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from support.rules.controls import control
from support.lab import toy
from support.lab.nested import D_IN, nested_model, param_groups
from support.lab.perturb import first_group_only, step_on
from support.lab.train_torch import BATCH, mlp
from support.machine.memory import (
    LiveTensors,
    SavedTensors,
    optimizer_state_bytes,
    tensor_bytes,
)

NODES = ["MvBackward0", "AddBackward0", "TanhBackward0", "DotBackward0", "AddBackward0",
         "SubBackward0", "PowBackward0"]


@pytest.fixture
def tape():
    return toy.torch_loss(toy.draw())


def _leaves(t: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors whose .grad a backward from ``t`` fills (AccumulateGrad nodes)."""
    seen, todo, out = set(), [t.grad_fn], []
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if hasattr(fn, "variable"):
            out.append(fn.variable)
        todo += [f for f, _ in fn.next_functions]
    return out


def _training_and_running_bytes(depth: int = 2, batch: int = BATCH, model=None) -> dict:
    """Bytes a step of the notes' training loop (forward, loss, zero_grad, backward, Adam's
    step) needs at its peak, against running the same model on the same batch (in eval mode,
    under no_grad): the parameters and buffers (and, for training, Adam's two moments,
    allocated by the first step and kept) plus the most the step's own tensors occupy at
    once. The input batch is held by both alike and counted by neither. ``model``: another
    model than the notes' MLP of ``depth`` hidden layers (8 inputs, one output)."""
    torch.manual_seed(0)
    model = model if model is not None else mlp(depth=depth)
    x, y = torch.randn(batch, 8), torch.randn(batch, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss()

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.train()
    step()                                    # the moments exist from the first step on
    with LiveTensors() as train_region:
        step()
    model.eval()
    with torch.no_grad(), LiveTensors() as run_region:
        model(x)
    params = tensor_bytes(model)
    state = sum(optimizer_state_bytes(opt))
    return {"training": params + state + train_region.peak_bytes(),
            "running": params + run_region.peak_bytes(),
            "parameters": params, "optimizer state": state,
            "training step peak": train_region.peak_bytes(),
            "no_grad forward peak": run_region.peak_bytes()}


@pytest.mark.claim("TAPE-02")
def test_the_graph_is_a_dag_ending_in_the_leaves_that_require_grad(claim, tape):
    loss, lv = tape
    nodes = toy.tape_nodes(loss)
    sinks = [n for n in nodes if not any(nf is not None for nf, _ in n.next_functions)]
    leaf_vars = {id(n.variable) for n in sinks if hasattr(n, "variable")}
    want = {id(lv[k]) for k in toy.PARAM_NAMES}
    claim.check('n_sinks', len(sinks))
    claim.record('sinks_are_accumulate_grad', all((type(n).__name__ == 'AccumulateGrad' for n in sinks)))
    assert all(type(n).__name__ == "AccumulateGrad" for n in sinks)
    assert leaf_vars == want
    # acyclic: the post-order walk visits each node once, every edge points to an earlier node
    pos = {n: i for i, n in enumerate(nodes)}
    assert all(pos[nf] < pos[n] for n in nodes for nf, _ in n.next_functions if nf is not None)


@control("TAPE-02", what="tanh is computed off the tape: its result enters the graph as a new "
                         "leaf, so the graph no longer ends in W and b")
def tanh_enters_as_a_new_leaf(mp):
    real = torch.tanh
    mp.setattr(torch, "tanh", lambda z, *a, **k: real(z.detach(), *a, **k).requires_grad_())


@pytest.mark.claim("TAPE-03")
def test_the_toy_tape_has_seven_nodes(claim, tape):
    loss, _ = tape
    ops = [type(n).__name__ for n in toy.tape_nodes(loss) if type(n).__name__ != "AccumulateGrad"]
    claim.check('n_nodes', len(ops))
    claim.record("nodes", ops)
    assert ops == NODES


@control("TAPE-03", what="tanh is not one recorded operation: PyTorch records it as "
                         "2 sigmoid(2z) - 1, four nodes where the notes draw one")
def tanh_recorded_as_sigmoids(mp):
    mp.setattr(torch, "tanh", lambda z: 2 * torch.sigmoid(2 * z) - 1)


@pytest.mark.claim("TAPE-04")
def test_each_node_saves_what_its_backward_rule_needs(claim, tape):
    loss, lv = tape
    nodes = [n for n in toy.tape_nodes(loss) if type(n).__name__ != "AccumulateGrad"]
    by = {}
    for n in nodes:
        by.setdefault(type(n).__name__, []).append(n)
    a = torch.tanh(lv["W"].detach() @ lv["x"] + lv["b"].detach())
    r = (lv["v"].detach() @ a + lv["c"].detach()) - lv["y"]
    saved = {name: sorted(k for k in dir(ns[0]) if k.startswith("_saved_")) for name, ns in by.items()}
    claim.record("saved_attributes", saved)
    mv, tanh, dot, pow_ = by["MvBackward0"][0], by["TanhBackward0"][0], by["DotBackward0"][0], by["PowBackward0"][0]
    checks = {
        "Mv saves x": torch.equal(mv._saved_vec, lv["x"]) and mv._saved_self is None,
        "Tanh saves its result": torch.equal(tanh._saved_result, a),
        "Dot saves both operands": torch.equal(dot._saved_self, lv["v"].detach())
        and torch.equal(dot._saved_tensor, a),
        "Pow saves the residual": torch.allclose(pow_._saved_self, r, rtol=0, atol=1e-15),
        # add/sub keep only the scalar alpha, no tensor
        "add/sub save no tensor": all(
            set(saved[k]) == {"_saved_alpha"} for k in ("AddBackward0", "SubBackward0")),
    }
    for k, v in checks.items():
        claim.record(k, bool(v))
    assert all(checks.values())


@control("TAPE-04", what="tanh's node keeps its input z instead of its result, which its "
                         "backward rule (1 - a^2) needs")
def tanh_saves_its_input(mp):
    real = torch.tanh

    def tanh(z, *args, **kwargs):
        # what autograd saves for the node goes through these hooks: keep z in its place
        with torch.autograd.graph.saved_tensors_hooks(lambda saved: z.detach(), lambda kept: kept):
            return real(z, *args, **kwargs)
    mp.setattr(torch, "tanh", tanh)


@pytest.mark.claim("TAPE-05")
def test_the_tape_ends_in_four_accumulate_grad_leaves(claim, tape):
    loss, lv = tape
    acc = [n for n in toy.tape_nodes(loss) if type(n).__name__ == "AccumulateGrad"]
    claim.check('n_accumulate_grad', len(acc))
    ids = {id(n.variable) for n in acc}
    assert ids == {id(lv[k]) for k in toy.PARAM_NAMES}
    assert id(lv["x"]) not in ids and id(lv["y"]) not in ids
    assert not lv["x"].requires_grad and lv["x"].grad_fn is None


@control("TAPE-05", what="torch.tensor makes every floating-point tensor require grad, so the "
                         "data x and y are tracked too and get AccumulateGrad nodes")
def data_requires_grad_too(mp):
    real = torch.tensor

    def tensor(data, *args, requires_grad=False, **kwargs):
        t = real(data, *args, **kwargs)
        return t.requires_grad_() if t.is_floating_point() else t
    mp.setattr(torch, "tensor", tensor)


@pytest.mark.claim("TAPE-18")
def test_training_holds_several_times_the_memory_of_running(claim):
    # "training a model": a model as real recipes build them, the realistic nested model
    # (batch norm, dropout, residual blocks, a buffer of its own), one step of the notes' loop
    # on a batch of BATCH rows against running it (eval, no_grad) on the same batch
    m = _training_and_running_bytes(model=nested_model())
    for name in ("parameters", "optimizer state", "training step peak", "no_grad forward peak"):
        claim.record(name, m[name], unit="B")
    claim.check("training / running", m["training"] / m["running"],
                note=f"the realistic nested model, one step of the loop on a batch of {BATCH}, "
                     "against running it on the same batch")
    claim.record("training, running", [m["training"], m["running"]], unit="B")
    # the notes' own MLP, the smallest of models: the same reading, recorded, and the whole
    # training table at once, a deeper MLP, and the saved activations against the no_grad
    # output (the 67 MB against 0.03 MB of MEM-05)
    for label, kw in (("the notes' 8-64-64-1 MLP", {}), ("the notes' MLP, batch of 824",
                                                         {"batch": 824}),
                      ("the notes' MLP, four hidden layers", {"depth": 4})):
        mm = _training_and_running_bytes(**kw)
        claim.record(f"training / running, {label}", mm["training"] / mm["running"])
    model, x = mlp(), torch.randn(BATCH, 8)
    with SavedTensors(exclude=[model, x]) as graph:
        out = model(x)
    claim.record("saved activations / no_grad output", graph.held_bytes() / (BATCH * 1 * 4),
                 note="what autograd holds for backward over the bytes a no_grad forward "
                      "returns")
    # contrast: the meter sees the tape: a step under no_grad needs no more than a
    # no_grad forward (nothing is saved, nothing is differentiated)
    with torch.no_grad(), LiveTensors() as plain:
        torch.nn.functional.mse_loss(model(x), torch.zeros(BATCH, 1))
    mlp_only = _training_and_running_bytes()
    assert plain.peak_bytes() <= mlp_only["no_grad forward peak"] + 8
    del out


@control("TAPE-18", what="torch runs every module whose children are all layers (a block: "
                         "Linear, batch norm, ReLU, dropout) under activation checkpointing: what "
                         "the block saves for backward is recomputed there instead of kept, the "
                         "remedy of L:513 applied to the whole model")
def blocks_checkpointed(mp):
    # the sentence's own mechanism at its own scale: the saved tensors no longer stay until
    # backward, and the ratio falls across 'several' while the parameters, the moments and
    # the no_grad pass stay as they are
    import torch.utils.checkpoint
    real = nn.Module.__call__

    def call(self, *args, **kwargs):
        kids = list(self.children())
        container = isinstance(self, (nn.ModuleList, nn.ModuleDict))
        if kids and torch.is_grad_enabled() and not container \
                and all(not list(k.children()) for k in kids):
            return torch.utils.checkpoint.checkpoint(lambda *a: real(self, *a, **kwargs), *args,
                                                     use_reentrant=False)
        return real(self, *args, **kwargs)
    mp.setattr(nn.Module, "__call__", call)


@pytest.mark.claim("TAPE-07")
def test_backward_twice_holds_exactly_twice_the_gradient(claim):
    t = toy.draw()
    loss, lv = toy.torch_loss(t)
    loss.backward()
    first = lv["W"].grad.clone()
    # protocol §4.3: rebuild the same loss on the same leaves, backward again without zeroing
    W, b, v, c, x, y = (lv[k] for k in ("W", "b", "v", "c", "x", "y"))
    ((v @ torch.tanh(W @ x + b) + c - y) ** 2).backward()
    ratio = (W.grad / first).mean().item()
    claim.check('ratio', ratio)
    assert torch.equal(W.grad, 2 * first)


@control("TAPE-06", "TAPE-07", "TAPE-20", "TAPE-22",
         what="backward() overwrites each leaf's .grad instead of adding to it")
def backward_overwrites_grad(mp):
    def overwrite(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        leaves = inputs if inputs is not None else _leaves(self)
        grads = torch.autograd.grad(self, leaves, gradient, retain_graph=retain_graph,
                                    create_graph=create_graph, allow_unused=True)
        for leaf, g in zip(leaves, grads):
            leaf.grad = g
    mp.setattr(torch.Tensor, "backward", overwrite)


@pytest.mark.claim("TAPE-08")
def test_zero_grad_clears_and_step_reads_grad(claim):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.zero_grad()
    cleared = [p.grad for p in model.parameters()]
    claim.check('grad_after_zero_grad', repr(cleared[0]))
    assert all(g is None or torch.count_nonzero(g) == 0 for g in cleared)
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()                                  # nothing in .grad -> nothing to read
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()                                  # step uses .grad: p - lr * grad
    assert all(torch.allclose(p, a - 0.1 * p.grad) for a, p in zip(before, model.parameters()))


@pytest.mark.claim("TAPE-08")
def test_zero_grad_clears_and_step_reads_grad_in_every_parameter_group(claim):
    """The loop as real recipes set it up: the realistic nested model and an optimizer with
    three parameter groups (decay, no decay, the head at its own lr). zero_grad() clears every
    group's .grad; step() then has nothing to read and moves nothing; after a backward it
    reads each parameter's .grad at its group's lr."""
    torch.manual_seed(0)
    model = nested_model()
    opt = torch.optim.SGD(param_groups(model, lr=0.1, weight_decay=0.0), lr=0.1)
    model(torch.randn(16, D_IN)).sum().backward()
    opt.zero_grad()
    left = [n for n, p in model.named_parameters()
            if p.grad is not None and torch.count_nonzero(p.grad)]
    claim.record("parameters with a gradient left after zero_grad", left)
    assert not left, f"zero_grad() left gradients in {left}"
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    model(torch.randn(16, D_IN)).sum().backward()
    opt.step()
    lr = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    off = [n for (n, p), a in zip(model.named_parameters(), before)
           if not torch.allclose(p, a - lr[id(p)] * p.grad)]
    claim.record("groups and their lr", {g["name"]: g["lr"] for g in opt.param_groups})
    assert not off, f"step() did not apply .grad at its group's lr to {off}"


@control("TAPE-08", what="optimizer.zero_grad() leaves the gradients in .grad as they are")
def zero_grad_clears_nothing(mp):
    mp.setattr(torch.optim.Optimizer, "zero_grad", lambda self, set_to_none=True: None)


@control("TAPE-08", "LOOP-14", "TAPE-11",
         what="optimizer.zero_grad() and SGD's step() act on the optimizer's first parameter "
              "group only: the rest keep their gradients and are never stepped")
def zero_grad_and_step_see_the_first_group(mp):
    # the sentences' own scale, 'the optimizer' as recipes build it: one group cannot show it
    first_group_only(mp, torch.optim.Optimizer, "zero_grad")
    first_group_only(mp, torch.optim.SGD, "step")


@pytest.mark.claim("LOOP-14")
def test_optimizer_step_reads_grad_and_updates_the_parameters(claim):
    p = nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    opt = torch.optim.SGD([p], lr=0.5)
    # no backward at all: step() uses whatever sits in .grad
    p.grad = torch.tensor([2.0, 4.0, -6.0])
    opt.step()
    claim.check('after_step', p.detach().tolist())
    # an edited .grad after backward is what gets applied
    loss = (p ** 2).sum()
    loss.backward()
    p.grad.mul_(0.0).add_(1.0)
    before = p.detach().clone()
    opt.step()
    claim.check("step applies the edited .grad",
                torch.equal(p.detach(), before - opt.param_groups[0]["lr"] * p.grad))
    # .grad None: step() leaves the parameter alone
    p.grad = None
    before = p.detach().clone()
    opt.step()
    claim.record('unchanged_without_grad', torch.equal(p.detach(), before))
    assert torch.equal(p.detach(), before)


@pytest.mark.claim("LOOP-14")
def test_step_reads_grad_and_updates_every_parameter_group(claim):
    """'optimizer.step() reads .grad and updates the parameters', for an optimizer as recipes
    build it: the realistic nested model in three parameter groups, each at its own lr, every
    .grad set by hand (no backward): each parameter moves by its group's lr times it."""
    torch.manual_seed(0)
    model = nested_model()
    opt = torch.optim.SGD(param_groups(model, lr=0.1, weight_decay=0.0), lr=0.1)
    for p in model.parameters():
        p.grad = torch.full_like(p, 2.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    lr = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    moved = {n: bool(torch.allclose(p.detach(), before[n] - lr[id(p)] * 2.0))
             for n, p in model.named_parameters()}
    claim.record("parameters moved by their group's lr times .grad",
                 f"{sum(moved.values())} of {len(moved)}")
    assert all(moved.values()), [n for n, ok in moved.items() if not ok]


@control("LOOP-14", what="SGD's step reads only the sign of .grad, not its values "
                         "(p - lr sign(grad))")
def step_reads_only_the_sign(mp):
    step_on(mp, torch.optim.SGD, torch.sign)


@pytest.mark.claim("ACC-10")
def test_one_step_on_accumulated_micro_batches_equals_one_full_batch_step(claim):
    torch.manual_seed(0)
    X_, y_ = torch.randn(64, 8), torch.randn(64, 1)
    model = torch.nn.Linear(8, 1)
    twin = torch.nn.Linear(8, 1)
    twin.load_state_dict(model.state_dict())
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    k = 4
    for xb, yb in zip(X_.chunk(k), y_.chunk(k)):
        (torch.nn.functional.mse_loss(model(xb), yb) / k).backward()
    opt.step()
    torch.nn.functional.mse_loss(twin(X_), y_).backward()
    opt2.step()
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters()))
    claim.check('max parameter difference', diff, unit='')


@pytest.mark.claim("TAPE-20")
def test_accumulation_is_gradient_accumulation_over_micro_batches(claim):
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    ((x @ w - y) ** 2).mean().backward()
    full = w.grad.clone()
    w.grad = None
    k = 4
    for xb, yb in zip(x.split(2), y.split(2)):
        (((xb @ w - yb) ** 2).mean() / k).backward()
    diff = (w.grad - full).abs().max().item()
    claim.check('max_abs_diff', diff)
