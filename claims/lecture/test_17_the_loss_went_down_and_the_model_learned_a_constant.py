"""Lecture, "The loss went down and the model learned a constant" (L:315-328).

Fold 0 of the lecture's GroupKFold split, seed 0, 120 epochs (protocol §3, §7.1-7.2):
predicting the training mean scores 17.9 MPa, the working network 5.5 MPa; with the target
left as (64,) instead of (64, 1), MSELoss broadcasts to a 64 x 64 matrix, the network learns
a constant (17.7 MPa, prediction SD 0.26) and PyTorch warns once per batch, 1,560 times.

The buggy run's 17.7 MPa against the baseline (STORY-02) and the notebook showing the warning
once (SHAPE-12) are L:11's sentences too, tested in
``claims/lecture/test_01_why_this_matters.py``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from support.rules.controls import control
from support.lab import perturb, stories
from support.lab.data import lecture_split
from support.lab.stories import shape_bug_run
from support.lab.train_torch import baseline_rmse
from support.rules import error_models


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a share k/n."""
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return float(centre - half), float(centre + half)


#: the buggy curve's first-epochs drop: epochs 1-3 fall to the level it holds from epoch 4 on
TRANSIENT = 3


def trend(loss, start: int = TRANSIENT) -> dict:
    """How far a per-epoch curve falls from epoch ``start + 1`` to its end, read off the
    least-squares line through those epochs: the slope times the span, in units of the
    curve's own noise (the SD of the residuals about the line), with +- 2 SE of the slope.
    Beside it, the per-step reading (the share of epoch-to-epoch steps that fell, with its
    95 % Wilson interval), which is reported, not decided."""
    loss = np.asarray(loss, dtype=float)
    x, y = np.arange(start, len(loss), dtype=float), loss[start:]
    slope, icpt = np.polyfit(x, y, 1)
    resid = y - (slope * x + icpt)
    sigma = float(np.sqrt(resid @ resid / (len(y) - 2)))
    se = sigma / float(np.sqrt(np.sum((x - x.mean()) ** 2)))
    span = x[-1] - x[0]
    fall, half = -slope * span / sigma, 2 * se * span / sigma
    steps = np.diff(loss[start:])
    fell = int(np.sum(steps < 0))
    return {"fall": float(fall), "interval": (float(fall - half), float(fall + half)),
            "sigma": sigma, "fell": fell, "steps": len(steps), "share": fell / len(steps),
            "share_interval": wilson(fell, len(steps))}


def _mse_warnings(pred, target):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = torch.nn.MSELoss()(pred, target)
    return loss, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


WARNING_PREFIX = ("Using a target size (torch.Size([64])) that is different to the input size "
                  "(torch.Size([64, 1])). This will likely lead to incorrect results")


def _mse_quiet_after(mp, warned: int):
    """F.mse_loss (what nn.MSELoss calls) that stops warning about a target of another size
    once it has warned ``warned`` times."""
    real, count = torch.nn.functional.mse_loss, [0]

    def mse_loss(input, target, *args, **kwargs):
        if input.size() != target.size():
            count[0] += 1
            if count[0] > warned:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return real(input, target, *args, **kwargs)
        return real(input, target, *args, **kwargs)
    mp.setattr(torch.nn.functional, "mse_loss", mse_loss)


@pytest.mark.xdist_group("concrete-experiments")
@pytest.mark.claim("STORY-04")
def test_the_buggy_runs_training_loss_falls_steadily(concrete, claim, fresh):
    # the shape-bug run of this section (shared with STORY-02/03)
    bug = stories.run(concrete, "shape_bug", fresh=fresh)
    loss = np.asarray(bug.train_loss, dtype=float)
    claim.record("training loss per epoch", [round(float(v), 5) for v in loss])
    claim.record("training loss, epochs 1 and 4 and the last",
                 [float(loss[0]), float(loss[TRANSIENT]), float(loss[-1])])
    whole = float(loss[0] - np.mean(loss[-10:]))
    later = float(loss[TRANSIENT] - np.mean(loss[-10:]))
    claim.record("whole fall (epoch 1 - mean of the last 10)", whole)
    claim.record("share of the whole fall after epoch 4", later / whole)
    s = trend(loss)
    claim.record("noise of the curve from epoch 4 (residual SD)", s["sigma"])
    claim.record("share of epoch-to-epoch steps that fell, from epoch 4", s["share"],
                 note=f"{s['fell']} of {s['steps']}; 95 % Wilson interval "
                      f"[{s['share_interval'][0]:.3f}, {s['share_interval'][1]:.3f}]")
    # from epoch 2 the line still holds the tail of the first drop: reported, not decided
    claim.record("fall from epoch 2 to the end, in noise SDs", trend(loss, 1)["fall"])
    claim.check("fall from epoch 4 to the end, in noise SDs", s["fall"], interval=s["interval"],
                note=f"slope x span / residual SD, +- 2 SE: [{s['interval'][0]:.2f}, "
                     f"{s['interval'][1]:.2f}]")
    claim.note(f"The loss of the unshaped target falls from {loss[0]:.4f} to {loss[TRANSIENT]:.4f} "
               f"in its first three epochs (its floor is the target's variance, 1) and then "
               f"holds its level: from epoch 4 the line through it falls {s['fall']:.2f} noise "
               f"SDs in all, and {s['fell']} of {s['steps']} steps fell.")
    # the working loop's curve, measured the same way: the contrast that does fall steadily
    ok = trend(stories.run(concrete, "fixed", fresh=fresh).train_loss)
    claim.record("working loop: fall from epoch 4 to the end, in noise SDs", ok["fall"])
    falling = claim.figure("fall from epoch 4 to the end, in noise SDs")
    assert falling.judge(ok["fall"], ok["interval"])[0] == "within", \
        "control: the working loop's loss does not count as falling steadily"
    # "fell": over the run it went down (the steadiness is the figure's)
    assert np.mean(loss[-10:]) < loss[0], "the buggy run's loss did not fall over the run"
    claim.record("validation RMSE", bug.rmse, unit="MPa",
                 note="as bad as predicting the mean: STORY-02's sentence")


@control("STORY-04", what="torch's Adam climbs the loss instead of descending it (its own "
                          "maximize=True), so the training loss rises")
def adam_climbs_the_loss(mp):
    real = torch.optim.Adam.__init__

    def climbing(self, params, *args, **kwargs):
        real(self, params, *args, **{**kwargs, "maximize": True})
    mp.setattr(torch.optim.Adam, "__init__", climbing)


@control("STORY-04", what="torch's Adam stops stepping after the first epoch's 13 steps: the "
                          "training loss plateaus after epoch 1, its noise kept")
def adam_stops_after_the_first_epoch(mp):
    # the sentence's own scale: a drop, then a flat line with the run's noise
    perturb.stops_after_epoch(mp, torch.optim.Adam, 1)


@control("STORY-04", expect="holds",
         what="torch's Adam takes steps a twentieth of its lr, slow "
              "enough that the buggy network approaches its constant over the whole run: its "
              "loss keeps falling after epoch 4, the steady fall the sentence describes")
def adam_steps_a_twentieth(mp):
    perturb.steps_scaled(mp, torch.optim.Adam, 0.05)


@pytest.mark.claim("STORY-03")
def test_the_buggy_network_predicts_a_constant(concrete, claim, fresh):
    bug = shape_bug_run(concrete, fresh)
    fixed = stories.run(concrete, "fixed", fresh=fresh)
    claim.check('prediction SD', bug.pred_std, unit='MPa')
    claim.check("working network's prediction SD", fixed.pred_std, unit="MPa")


@control("STORY-03", "SPLIT-01", scope="process", moves=("prediction SD", "MLP, KFold mean of 25"),
         what="every strength reads 1.5 % high (a press calibrated 1.5 % high): figures in "
              "MPa scale with the strengths while the networks see the same standardised "
              "target, so the buggy network's prediction SD moves by about one printed digit "
              "of 0.26, and under the random split the networks' mean of 25 moves just past "
              "the tolerance of the printed 4.87")
def strengths_read_one_and_a_half_percent_high(mp):
    # the figures' own scale: one printed digit (0.01 MPa) off 0.26, and a mean of 25 just
    # past its tolerance; errors in MPa follow the strengths' scale while the networks see the
    # same standardised target. Adam's lr cannot do this for the mean of 25: a small change of
    # its steps moves the mean far less than its tolerance, and stopping early moves it by a
    # different amount from one step to the next. Process scope: the mean comes from the
    # shared experiments
    perturb.read_scaled(mp, "strength_mpa", 1.015)


@pytest.mark.claim("SHAPE-08")
def test_mse_of_64x1_against_64_is_the_all_pairs_mean(claim):
    torch.manual_seed(0)
    pred, y = torch.randn(64, 1), torch.randn(64)
    loss, _ = _mse_warnings(pred, y)
    pairs = ((pred - y[None, :]) ** 2)
    claim.check('broadcast_shape', list((pred - y).shape))
    claim.check('diff_to_all_pairs_mean', abs(loss.item() - pairs.mean().item()))
    claim.check("diff_to_element_wise_mean", abs(loss.item() - ((pred[:, 0] - y) ** 2).mean().item()))


@control("SHAPE-08", what="MSELoss matches a (64, 1) prediction to a (64,) target element by "
                          "element instead of broadcasting them")
def mse_matches_the_shapes(mp):
    real = torch.nn.functional.mse_loss
    mp.setattr(torch.nn.functional, "mse_loss", lambda input, target, *args, **kwargs: real(
        input.reshape(target.shape), target, *args, **kwargs))


@pytest.mark.claim("SHAPE-09")
def test_all_pairs_mse_is_minimised_by_the_batch_mean(claim):
    @given(st.integers(0, 2**32 - 1), st.integers(2, 50))
    def prop(seed, n):
        rng = np.random.default_rng(seed)
        y = torch.tensor(rng.normal(size=n) * 10)
        p = torch.full((n, 1), y.mean().item(), dtype=torch.float64, requires_grad=True)
        loss = ((p - y[None, :]) ** 2).mean()
        loss.backward()
        gmax = p.grad.abs().max().item()
        # 0 in exact arithmetic; the rounding of the mean and of the sum over the n pairs
        # is relative to (2/n^2) sum_j (|p| + |y_j|) (support/rules/error_models.py)
        model = error_models.model("shape:all-pairs-mean-float64")
        magnitude = 2.0 / n**2 * float((p.detach()[0, 0].abs() + y.abs()).sum())
        share = model.share(gmax, magnitude, n=n)
        claim.record("max_grad_at_mean", gmax, reduce="max")
        claim.check("share_of_rounding_bound", share, reduce="max", note=model.describe(n),
                    halt=True)
        other = torch.tensor(rng.normal(size=(n, 1)) * 10)
        assert loss.item() <= ((other - y[None, :]) ** 2).mean().item()
    prop()
    claim.check('worst_grad_at_mean', claim.measurements['max_grad_at_mean']['value'])


@pytest.mark.claim("SHAPE-10")
def test_mse_warns_about_the_target_size(claim):
    _, msgs = _mse_warnings(torch.randn(64, 1), torch.randn(64))
    claim.record("warning", msgs[0] if msgs else "")
    assert len(msgs) == 1 and msgs[0].startswith(WARNING_PREFIX)


@control("SHAPE-10", what="PyTorch stays silent about a target whose size differs from the "
                          "input's")
def mse_silent_about_the_target_size(mp):
    _mse_quiet_after(mp, 0)


@pytest.mark.claim("SHAPE-11")
def test_the_warning_fires_once_per_batch_1560_times(claim, concrete, fresh):
    """The story's own 120-epoch run (train(target_2d=False)), shared with STORY-02 through
    support.lab.stories, so the suite trains it once per process."""
    res = stories.run(concrete, "shape_bug", fresh=fresh)
    n = sum(m.startswith("Using a target size") for m in res.warnings)
    claim.check('batches_per_epoch', res.steps / 120)
    claim.check('warnings_in_120_epochs', n)
    assert n == res.steps                # once per batch, every batch
    # contrast: the fixed loop warns nothing
    assert not stories.run(concrete, "fixed", fresh=fresh).warnings


# the story trains inside the test (one thread, no worker process): under a test-scope control
# support.lab.cache.isolated() makes it train afresh, so no session of its own is needed
@control("SHAPE-11", what="PyTorch warns about the target size only the first time, not on "
                          "every batch")
def mse_warns_only_once(mp):
    _mse_quiet_after(mp, 1)


@pytest.mark.claim("SHAPE-13")
@pytest.mark.parametrize("fix", ["target_y[:, None]", "pred.squeeze()"])
def test_matching_shapes_removes_the_warning(claim, fix):
    torch.manual_seed(0)
    pred, y = torch.randn(64, 1), torch.randn(64)
    loss, msgs = _mse_warnings(*((pred, y[:, None]) if fix.startswith("target") else
                                 (pred.squeeze(), y)))
    elementwise = ((pred[:, 0] - y) ** 2).mean()
    claim.check('warnings', len(msgs))
    assert not msgs and torch.allclose(loss, elementwise, rtol=0, atol=0)


@control("SHAPE-13", what="squeeze() leaves a (64, 1) prediction as it is, so the squeezed "
                          "fix still broadcasts")
def squeeze_does_nothing(mp):
    mp.setattr(torch.Tensor, "squeeze", lambda self, *dims: self)


@pytest.mark.claim("STORY-05")
def test_shaping_the_target_gives_5_5_with_predictions_spread_like_the_data(concrete, claim, fresh):
    fixed = stories.run(concrete, "fixed", fresh=fresh)
    _, val_idx = lecture_split(0)
    claim.check('RMSE', fixed.rmse, unit='MPa')
    claim.check('prediction SD', fixed.pred_std, unit='MPa')
    claim.record("validation target SD", float(np.std(concrete.y[val_idx], ddof=1)), unit="MPa")
    claim.check('warnings', fixed.n_warnings)
    claim.check("RMSE / baseline", fixed.rmse / baseline_rmse(concrete))


@control("STORY-05", moves=("RMSE", "prediction SD"),
         what="torch's Adam takes steps 2 % shorter than its lr: "
              "a single run's RMSE and prediction spread, printed as 5.5 and 16.2, move by "
              "about their printed digit under so small a change of its steps, the figures' "
              "own scale")
def adam_steps_two_percent_shorter(mp):
    # the figures' own scale: a single run's RMSE, printed to 0.1 MPa
    perturb.steps_scaled(mp, torch.optim.Adam, 0.98)


@pytest.mark.claim("SHAPE-14")
def test_a_shape_assertion_catches_the_bug_on_the_first_batch(claim):
    from torch.utils.data import DataLoader, TensorDataset

    from support.lab.train_torch import mlp
    torch.manual_seed(0)
    X, y = torch.randn(832, 8), torch.randn(832)       # the story's target: shape (N,)

    def first_failing_batch(target) -> tuple[int | None, str]:
        """Run an epoch with the notes' assertion at the loss; the batch it stops at."""
        model = mlp()
        for i, (xb, yb) in enumerate(DataLoader(TensorDataset(X, target), batch_size=64), 1):
            pred = model(xb)
            try:
                assert pred.shape == yb.shape
            except AssertionError:
                return i, f"{tuple(pred.shape)} != {tuple(yb.shape)}"
            torch.nn.functional.mse_loss(pred, yb)
        return None, ""
    caught_at, shapes = first_failing_batch(y)
    fixed_at, _ = first_failing_batch(y[:, None])
    claim.record("batch at which the assertion stopped the buggy loop", caught_at, note=shapes)
    claim.record("batch at which it stopped the fixed loop", fixed_at if fixed_at else "none",
                 note="13 batches of 64")
    assert caught_at == 1, f"the shape assertion stopped the buggy loop at batch {caught_at}"
    assert fixed_at is None, "control: the assertion stopped the fixed loop"


@control("SHAPE-14", what="a tensor's .shape leaves out trailing axes of length 1, so a (64, 1) "
                          "prediction reports the shape of a (64,) target")
def shape_hides_trailing_ones(mp):
    real = torch.Tensor.shape                # the C attribute, read through its descriptor

    def shape(self):
        dims = tuple(real.__get__(self))
        while len(dims) > 1 and dims[-1] == 1:
            dims = dims[:-1]
        return torch.Size(dims)
    mp.setattr(torch.Tensor, "shape", property(shape))
