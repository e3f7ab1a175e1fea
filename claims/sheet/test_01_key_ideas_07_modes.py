"""Summary sheet, "Key ideas", "Modes" (S:15).

"Modes: model.train() and model.eval() switch dropout and batch normalization between training
and inference behaviour" (MODE-01). "eval() is not a gradient mode: it neither stops graph
recording nor freezes weights; conversely no_grad() does not switch dropout off" (MODE-02,
MODE-03, MODE-04). The lecture (L:108): "model.eval() is a different switch [...]. It changes
layers whose behavior differs between training and inference, dropout and batch normalization
in particular, and it has no effect on the tape"; the pitfall S:56: ".eval() freezes nothing".

Dropout's share of zeros is judged against the binomial spread of its N draws (within five
standard deviations, support.lab.modes); the graph still recorded in eval mode is measured in
the bytes autograd saves for backward.

Each claim is also checked on a realistic model (support.lab.nested: blocks of Linear, batch
norm, ReLU and dropout inside an nn.ModuleList and an nn.ModuleDict, every dropout and batch
norm two to five levels down, a buffer of its own at depth, three parameter groups), where a
switch that does not reach below the first level shows: variants ``model=notes`` and
``model=nested``, or a second test that names the depth.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from support.rules.controls import control
from support.lab.modes import N, P, binomial_ok, dropout_bn_model, zero_fraction
from support.lab.nested import D_IN, depth, io_of, modules_of, nested_model, param_groups
from support.lab.train_torch import mlp
from support.machine.memory import SavedTensors

# small tensors: a second intra-op thread only adds OpenMP hand-offs on a shared machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the notes' flat model with dropout and batch norm, and the realistic nested one
MODELS = {"notes": dropout_bn_model, "nested": nested_model}
each_model = pytest.mark.parametrize("model", list(MODELS), ids=[f"model={m}" for m in MODELS])


def dropped_share(inp: torch.Tensor, out: torch.Tensor) -> tuple[float, int]:
    """The share of a dropout's non-zero inputs that it zeroed, and how many there were (its
    input follows a ReLU, so zeros in its output alone do not say what it dropped)."""
    alive = inp != 0
    return (out[alive] == 0).float().mean().item(), int(alive.sum())


@pytest.mark.claim("MODE-01")
def test_train_and_eval_switch_dropout_and_batch_norm_and_nothing_else(claim):
    torch.manual_seed(0)
    drop = nn.Dropout(P)
    ones = torch.ones(N)
    drop.train()
    trained = drop(ones)
    drop.eval()
    evaluated = drop(ones)
    claim.record('dropout_train_zero_fraction', zero_fraction(trained))
    claim.check('dropout_eval_zero_fraction', zero_fraction(evaluated))
    assert binomial_ok(zero_fraction(trained))
    assert set(trained.unique().tolist()) == {0.0, 1 / (1 - P)}   # survivors scaled up
    assert torch.equal(evaluated, ones)

    bn = nn.BatchNorm1d(4)
    x = torch.randn(256, 4) * 3 + 5
    bn.train()
    out_train = bn(x)
    after_train = bn.running_mean.clone()
    bn.eval()
    out_eval = bn(x)
    expected_eval = (x - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps)
    claim.record("bn_train_output_mean", out_train.mean().item())
    claim.record('bn_running_mean_moved_in_train', bool((after_train != 0).all()))
    claim.record('bn_running_mean_moved_in_eval', bool((bn.running_mean != after_train).any()))
    assert (after_train != 0).all(), "batch norm's running mean did not move in train mode"
    assert out_train.mean(0).abs().max() < 1e-5          # normalised with the batch's stats
    assert torch.allclose(out_eval, expected_eval, atol=1e-5)   # with the running stats
    assert torch.equal(bn.running_mean, after_train), "batch norm's running mean moved in eval mode"

    # control: a model without dropout or batch norm computes the same thing in both modes
    plain = mlp()
    x8 = torch.randn(32, 8)
    plain.eval()
    a = plain(x8)
    plain.train()
    assert torch.equal(a, plain(x8))


@pytest.mark.claim("MODE-01")
def test_train_and_eval_reach_dropout_and_batch_norm_at_every_depth(claim):
    model = nested_model()
    drops, norms = modules_of(model, nn.Dropout), modules_of(model, nn.BatchNorm1d)
    claim.record("dropout_depths", {n: depth(n) for n in drops})
    claim.record("batch_norm_depths", {n: depth(n) for n in norms})
    drop_io, h1 = io_of(model, nn.Dropout)
    norm_io, h2 = io_of(model, nn.BatchNorm1d)
    x = torch.randn(64, D_IN)
    model.train()
    model(x)
    after_train = {n: m.running_mean.clone() for n, m in norms.items()}
    model.eval()
    model(x)
    for h in h1 + h2:
        h.remove()

    train_share, eval_share = {}, {}
    for name, ((inp_t, out_t), (inp_e, out_e)) in drop_io.items():
        train_share[name], alive = dropped_share(inp_t, out_t)
        eval_share[name], _ = dropped_share(inp_e, out_e)
        assert binomial_ok(train_share[name], n=alive), f"{name} did not drop in train mode"
        kept = out_t != 0
        assert torch.allclose(out_t[kept], inp_t[kept] / (1 - P))   # survivors scaled up
        assert torch.equal(out_e, inp_e), f"{name} still drops in eval mode"
    claim.record("dropout_train_dropped_share", train_share)
    claim.record("dropout_eval_dropped_share", eval_share)
    claim.check("dropout_eval_zero_fraction", max(eval_share.values()))

    moved_in_eval = {}
    for name, ((inp_t, out_t), (inp_e, out_e)) in norm_io.items():
        m = norms[name]
        moved_in_eval[name] = bool((m.running_mean != after_train[name]).any())
        assert (after_train[name] != 0).all(), f"{name}'s running mean did not move in train mode"
        assert out_t.mean(0).abs().max() < 1e-5, f"{name} did not use the batch's statistics"
        expected = (inp_e - m.running_mean) / torch.sqrt(m.running_var + m.eps)
        assert torch.allclose(out_e, expected, atol=1e-5), f"{name} ignored its running stats"
    claim.record("bn_running_mean_moved_in_eval", moved_in_eval)
    assert not any(moved_in_eval.values()), "a batch norm's running mean moved in eval mode"


@control("MODE-01", what="model.eval() does nothing: dropout keeps dropping and batch norm keeps "
                         "normalising with the batch's statistics")
def eval_switches_nothing(mp):
    mp.setattr(nn.Module, "eval", lambda self: self)


@control("MODE-01", what="model.train() and model.eval() set the mode of the model and its "
                         "children only: dropout and batch norm below the first level keep theirs")
def mode_switch_stops_at_the_children(mp):
    def train(self, mode=True):
        self.training = mode
        for child in self.children():
            child.training = mode
        return self
    mp.setattr(nn.Module, "train", train)


@pytest.mark.claim("MODE-02")
@each_model
def test_eval_is_not_a_gradient_mode_the_graph_is_still_recorded(claim, model):
    torch.manual_seed(0)
    model = MODELS[model]().eval()
    claim.record('grad_mode_enabled_after_eval', torch.is_grad_enabled())
    x = torch.randn(32, D_IN)
    with SavedTensors(exclude=[model, x]) as graph:
        out = model(x)
    held = graph.held_bytes()
    claim.record("grad_fn_in_eval", type(out.grad_fn).__name__)
    claim.record("bytes_held_by_graph_in_eval", held, unit="B")
    with torch.no_grad(), SavedTensors(exclude=[model, x]) as graph0:
        out0 = model(x)
    claim.record("bytes_held_under_no_grad", graph0.held_bytes(), unit="B")
    assert torch.is_grad_enabled() and out.grad_fn is not None and held > 0
    out.sum().backward()                        # the recorded graph is there to differentiate
    assert all(p.grad is not None for p in model.parameters())
    assert out0.grad_fn is None and graph0.held_bytes() == 0   # control: the tape switch


@control("MODE-02", what="eval() is also a gradient mode: a module in eval mode runs its "
                         "forward with the tape off, as under no_grad()")
def eval_mode_records_no_graph(mp):
    real = nn.Module.__call__

    def call(self, *args, **kwargs):
        if self.training:
            return real(self, *args, **kwargs)
        with torch.no_grad():
            return real(self, *args, **kwargs)
    mp.setattr(nn.Module, "__call__", call)


@pytest.mark.claim("MODE-03")
@each_model
def test_eval_does_not_freeze_weights(claim, model):
    name = model
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    claim.record('requires_grad_in_eval', not frozen)
    assert not frozen, f"eval() switched requires_grad off on {frozen}"
    before = [p.detach().clone() for p in model.parameters()]
    # the realistic model steps in its three groups (decay, no decay, the head at its own lr)
    opt = torch.optim.SGD(model.parameters() if name == "notes" else
                          param_groups(model, lr=0.1, weight_decay=0.01), lr=0.1)
    model(torch.randn(32, D_IN)).pow(2).mean().backward()
    opt.step()
    changed = sum(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    claim.record('parameter_tensors_changed_by_a_step_in_eval', changed)
    assert changed == len(before), f"a step in eval mode changed {changed} of {len(before)} tensors"


@control("MODE-03", what="model.eval() freezes the weights: it switches requires_grad off on "
                         "every parameter")
def eval_freezes_the_weights(mp):
    real = nn.Module.eval
    mp.setattr(nn.Module, "eval", lambda self: real(self).requires_grad_(False))


@control("MODE-03", what="model.eval() freezes the weights of the modules below its children "
                         "(requires_grad off from the grandchildren down)")
def eval_freezes_below_the_children(mp):
    real = nn.Module.eval

    def eval(self):
        real(self)
        for child in self.children():
            for grandchild in child.children():
                grandchild.requires_grad_(False)
        return self
    mp.setattr(nn.Module, "eval", eval)


@pytest.mark.claim("MODE-04")
def test_no_grad_does_not_switch_dropout_off(claim):
    torch.manual_seed(0)
    drop = nn.Dropout(P).train()
    with torch.no_grad():
        out = drop(torch.ones(N))
    frac = zero_fraction(out)
    claim.record('zero_fraction_under_no_grad', frac)
    assert binomial_ok(frac)
    drop.eval()
    with torch.no_grad():
        assert zero_fraction(drop(torch.ones(N))) == 0.0   # control: eval() does switch it


@pytest.mark.claim("MODE-04")
def test_no_grad_does_not_switch_off_dropout_at_any_depth(claim):
    model = nested_model().train()
    drop_io, handles = io_of(model, nn.Dropout)
    x = torch.randn(64, D_IN)
    with torch.no_grad():
        model(x)
        model.eval()
        model(x)
    for h in handles:
        h.remove()
    share = {}
    for name, ((inp, out), (inp_e, out_e)) in drop_io.items():
        share[name], alive = dropped_share(inp, out)
        assert binomial_ok(share[name], n=alive), f"{name} stopped dropping under no_grad"
        assert torch.equal(out_e, inp_e)                   # control: eval() does switch it
    claim.record("dropped_share_under_no_grad", share)
    claim.record("dropout_depths", {n: depth(n) for n in share})


@control("MODE-04", what="torch.no_grad() also switches dropout off: dropout keeps every unit "
                         "while the tape is off")
def no_grad_switches_dropout_off(mp):
    real = F.dropout
    mp.setattr(F, "dropout", lambda input, p=0.5, training=True, inplace=False:
               real(input, p, training and torch.is_grad_enabled(), inplace))
