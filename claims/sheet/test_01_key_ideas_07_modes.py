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
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from support.harness.controls import control
from support.lab.modes import N, P, binomial_ok, dropout_bn_model, zero_fraction
from support.lab.train_torch import mlp
from support.machine.memory import SavedTensors

# small tensors: a second intra-op thread only adds OpenMP hand-offs on a shared machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


@control("MODE-01", what="model.eval() does nothing: dropout keeps dropping and batch norm keeps "
                         "normalising with the batch's statistics")
def eval_switches_nothing(mp):
    mp.setattr(nn.Module, "eval", lambda self: self)


@pytest.mark.claim("MODE-02")
def test_eval_is_not_a_gradient_mode_the_graph_is_still_recorded(claim):
    torch.manual_seed(0)
    model = dropout_bn_model().eval()
    claim.record('grad_mode_enabled_after_eval', torch.is_grad_enabled())
    x = torch.randn(32, 8)
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
def test_eval_does_not_freeze_weights(claim):
    torch.manual_seed(0)
    model = dropout_bn_model().eval()
    claim.record('requires_grad_in_eval', all((p.requires_grad for p in model.parameters())))
    assert all(p.requires_grad for p in model.parameters()), "eval() switched requires_grad off"
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(32, 8)).pow(2).mean().backward()
    opt.step()
    changed = sum(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    claim.record('parameter_tensors_changed_by_a_step_in_eval', changed)
    assert changed == len(before), f"a step in eval mode changed {changed} of {len(before)} tensors"


@control("MODE-03", what="model.eval() freezes the weights: it switches requires_grad off on "
                         "every parameter")
def eval_freezes_the_weights(mp):
    real = nn.Module.eval
    mp.setattr(nn.Module, "eval", lambda self: real(self).requires_grad_(False))


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


@control("MODE-04", what="torch.no_grad() also switches dropout off: dropout keeps every unit "
                         "while the tape is off")
def no_grad_switches_dropout_off(mp):
    real = F.dropout
    mp.setattr(F, "dropout", lambda input, p=0.5, training=True, inplace=False:
               real(input, p, training and torch.is_grad_enabled(), inplace))
