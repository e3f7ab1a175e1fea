"""Sheet, "Key ideas" ("Modes", S:15) and lecture, "Switching the tape off" (L:108).

"Modes: model.train() and model.eval() switch dropout and batch normalization between training
and inference behaviour. eval() is not a gradient mode: it neither stops graph recording nor
freezes weights; conversely no_grad() does not switch dropout off." (S:15)
"model.eval() is a different switch [...]. It changes layers whose behavior differs between
training and inference, dropout and batch normalization in particular, and it has no effect on
the tape. [...] Forgetting eval() is a classic source of a validation score that differs from
the test score another script computes, and model.train() switches the layers back before the
next epoch." (L:108)
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from support.harness.controls import control
from support.lab.data import lecture_split
from support.machine.memory import SavedTensors
from support.lab.train_torch import mlp, prepare, rmse_mpa

N = 3000
P = 0.5

# small tensors: a second intra-op thread only adds OpenMP hand-offs on a shared machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")



def _zero_fraction(t: torch.Tensor) -> float:
    return (t == 0).float().mean().item()


def _binomial_ok(frac: float, n: int = N, p: float = P, sigmas: float = 5.0) -> bool:
    return abs(frac - p) <= sigmas * math.sqrt(p * (1 - p) / n)


def _dropout_bn_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(64, 1))


@pytest.mark.claim("MODE-01")
def test_train_and_eval_switch_dropout_and_batch_norm_and_nothing_else(claim):
    torch.manual_seed(0)
    drop = nn.Dropout(P)
    ones = torch.ones(N)
    drop.train()
    trained = drop(ones)
    drop.eval()
    evaluated = drop(ones)
    claim.record('dropout_train_zero_fraction', _zero_fraction(trained))
    claim.check('dropout_eval_zero_fraction', _zero_fraction(evaluated))
    assert _binomial_ok(_zero_fraction(trained))
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
    model = _dropout_bn_model().eval()
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
    model = _dropout_bn_model().eval()
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
    frac = _zero_fraction(out)
    claim.record('zero_fraction_under_no_grad', frac)
    assert _binomial_ok(frac)
    drop.eval()
    with torch.no_grad():
        assert _zero_fraction(drop(torch.ones(N))) == 0.0   # control: eval() does switch it


@control("MODE-04", what="torch.no_grad() also switches dropout off: dropout keeps every unit "
                         "while the tape is off")
def no_grad_switches_dropout_off(mp):
    real = F.dropout
    mp.setattr(F, "dropout", lambda input, p=0.5, training=True, inplace=False:
               real(input, p, training and torch.is_grad_enabled(), inplace))


@pytest.mark.claim("MODE-06")
def test_train_switches_every_layer_back(claim):
    torch.manual_seed(0)
    model = _dropout_bn_model()
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    flags = [m.training for m in model.modules()]
    claim.record('modules_in_training_mode', sum(flags))
    drop = model[3]
    frac = _zero_fraction(drop(torch.ones(N)))
    claim.check('dropout_zero_fraction_after_train', frac)
    assert all(flags)
    assert _binomial_ok(frac, p=0.2)


@control("MODE-06", "MODE-07", what="model.train() does not switch the layers back: after eval() "
                                    "they stay in inference behaviour")
def train_does_not_switch_back(mp):
    real = nn.Module.train
    mp.setattr(nn.Module, "train", lambda self, mode=True: self if mode else real(self, False))


@pytest.mark.claim("MODE-07")
def test_forgetting_eval_changes_the_validation_score(claim, concrete):
    train_idx, val_idx = lecture_split(0)
    p = prepare(concrete, train_idx, val_idx)
    Xtr, ytr = torch.from_numpy(p.X_train), torch.from_numpy(p.y_train)[:, None]
    Xva = torch.from_numpy(p.X_val)

    def fit(model):
        # full-batch Adam: a model worth validating, in well under a second
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(150):
            opt.zero_grad()
            F.mse_loss(model(Xtr), ytr).backward()
            opt.step()
        return model

    def score(model, call_eval: bool) -> float:
        model.eval() if call_eval else model.train()
        with torch.no_grad():
            pred = model(Xva).reshape(-1).numpy() * float(p.y_std) + float(p.y_mean)
        return rmse_mpa(pred, p.y_val)

    torch.manual_seed(0)
    model = fit(_dropout_bn_model())
    with_eval = score(model, True)
    running = model[1].running_mean.clone()
    forgot = score(model, False)
    moved = not torch.equal(running, model[1].running_mean)
    again = score(model, True)
    claim.record("val_rmse_with_eval_MPa", with_eval, unit="MPa")
    claim.record("val_rmse_forgetting_eval_MPa", forgot, unit="MPa")
    claim.record("bn_running_stats_changed_by_the_forgetful_pass", moved)
    claim.record("val_rmse_with_eval_after_the_forgetful_pass_MPa", again, unit="MPa")
    # control: with no dropout or batch norm the mode cannot matter, trained or not
    torch.manual_seed(0)
    plain = mlp()
    same = score(plain, True) == score(plain, False)
    claim.record("plain_mlp_scores_equal_in_both_modes", same,
                 note="control: the notes' MLP has no dropout or batch norm")
    assert with_eval != forgot and abs(with_eval - forgot) > 0.05
    assert same
    assert np.isfinite([with_eval, forgot]).all()


# ------------------------------------------------------------------ JAX: the lecture's table
@pytest.mark.claim("MODE-09")
@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_jax_layers_take_train_or_eval_behaviour_as_an_argument(claim, api):
    """Lecture, "Side by side" (L:231-235): train or eval behaviour is model.train()/model.eval()
    in PyTorch and "an explicit argument, such as deterministic=True" in JAX. JAX itself has
    no layers; its layer library is flax, whose two APIs are the variants."""
    try:
        import flax
    except ImportError:
        pytest.skip("flax is not installed: JAX's dropout layers live in flax "
                    "(pip install -e '.[frameworks]')")
    import jax
    import jax.numpy as jnp
    claim.record("flax", flax.__version__)
    x = jnp.ones((N,))
    if api == "linen":
        from flax import linen
        layer = linen.Dropout(rate=P)
        variables = layer.init({"dropout": jax.random.key(0)}, x, deterministic=True)
        kept = layer.apply(variables, x, deterministic=True)
        dropped = layer.apply(variables, x, deterministic=False,
                              rngs={"dropout": jax.random.key(1)})
        module = linen.Module
    else:
        from flax import nnx
        layer = nnx.Dropout(P, rngs=nnx.Rngs(0))
        kept = layer(x, deterministic=True)
        dropped = layer(x, deterministic=False)
        module = nnx.Module
    dropped_share = float(jnp.mean(dropped == 0))
    claim.record("zero fraction, deterministic=True", float(jnp.mean(kept == 0)))
    claim.record("zero fraction, deterministic=False", dropped_share)
    # the argument is the switch: the same layer object, both behaviours, per call
    assert bool(jnp.all(kept == x)), "deterministic=True did not pass the input through"
    assert _binomial_ok(dropped_share), f"deterministic=False dropped {dropped_share:.3f}, not ~{P}"
    modes = [m for m in ("train", "eval") if callable(getattr(module, m, None))]
    claim.record("mode methods of the Module class", modes)
    if modes:
        # what such a method does: it sets the argument on the layer, which then keeps it
        layer.eval()
        claim.record("deterministic after layer.eval()", bool(layer.deterministic))
        claim.record("zero fraction after layer.eval(), no argument",
                     float(jnp.mean(layer(x) == 0)))
    assert not modes, (f"flax {api} Modules have a train/eval mode: Module.{'()/'.join(modes)}() "
                       "sets deterministic (and use_running_average) on every submodule, as "
                       "model.eval() does in PyTorch")


@control("MODE-09", what="JAX's dropout keeps every unit even with deterministic=False (its "
                         "random mask is all ones): the argument switches nothing")
def dropout_mask_keeps_everything(mp):
    import jax
    mp.setattr(jax.random, "bernoulli", lambda key, p=0.5, shape=None, **kwargs:
               jax.numpy.ones(shape if shape is not None else (), dtype=bool))
