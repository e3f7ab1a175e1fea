"""Lecture, "Limitations and trade-offs": "Try a tree first on tabular data."

"A gradient-boosted tree on concrete trains in under a second, has no learning rate to
tune, no scaling requirement and no device to place, and ties the neural network." The tie
is SPLIT-11 (``test_tree_on_a_leaky_split.py``); here: the fit time, the learning rate and
the scaling. The tree is the one the notes compare, ``HistGradientBoostingRegressor``
defaults, fitted on the 824 training rows of the lecture's fold 0.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from support.harness.controls import control
from support.lab import experiments
from support.lab.experiments import fit_hgb
from support.lab.data import lecture_split
from support.lab.train_torch import train
from support.machine import timing

# one xdist worker (--dist loadgroup) shares the batched results of support.lab.experiments
pytestmark = pytest.mark.xdist_group("concrete-experiments")


def fold0(data):
    tr, va = lecture_split(0)
    X = data.X.astype(np.float32)
    y = data.y.astype(np.float32)
    return X[tr], y[tr], X[va]


@pytest.mark.claim("FW-09")
def test_the_tree_trains_on_concrete_in_under_a_second(concrete, claim):
    X, y, _ = fold0(concrete)
    # the suite's timing method (support/machine/timing.py) for an absolute time: each trial
    # with the delay other work on the machine can have caused it, so that a busy machine
    # widens the interval (inconclusive) instead of moving the figure
    fit = timing.compare({"fit": lambda: fit_hgb(X, y)}, repeats=3)
    best, lower = fit["fit"].min, float(fit["fit"].lower().min())
    # the sentence's figure: under a second (stated), and the catalogue's failure: over 3 s
    claim.check('HGB fit, 824 rows (min of 3)', best, unit='s', interval=(lower, best),
                timed=True, note="wall time of the fit on one thread, the minimum of 3 after a "
                                 f"warm-up; {fit['fit'].delayed} of 3 trials delayed by other work")
    # for scale, the network it replaces (3 epochs scaled to the 120 of the stories):
    # recorded, not compared. Warmed up first: a process's first train() imports
    # torch._dynamo (the optimizer) and scikit-learn (the scaler), two seconds that read as
    # a 48 s network
    train(concrete, epochs=1)
    start = time.perf_counter()
    train(concrete, epochs=3)
    claim.record("MLP, 120 epochs (estimated from 3)", (time.perf_counter() - start) / 3 * 120, unit="s")


@control("FW-09", what="scikit-learn's HistGradientBoostingRegressor takes five seconds more to "
                       "fit (it waits 5 s before fitting)")
def tree_fit_takes_five_seconds(mp):
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB
    real = HGB.fit

    def fit(self, *args, **kwargs):
        time.sleep(5.0)
        return real(self, *args, **kwargs)
    mp.setattr(HGB, "fit", fit)


@pytest.mark.claim("FW-10")
@pytest.mark.parametrize("model", ["HistGradientBoostingRegressor", "GradientBoostingRegressor"])
def test_the_tree_has_no_learning_rate_to_tune(claim, model):
    import sklearn.ensemble
    params = getattr(sklearn.ensemble, model)().get_params()
    claim.record("learning_rate parameter", params.get("learning_rate"))
    assert "learning_rate" not in params


SWEEP_LRS = (0.01, 0.03, 0.1, 0.3, 1.0)


@pytest.mark.slow
@pytest.mark.claim("FW-10")
def test_the_trees_default_learning_rate_needs_no_tuning(concrete, claim):
    """The sentence's evident meaning: the tree's defaults work without tuning. A sweep of
    HistGradientBoostingRegressor's learning rate (its other defaults kept) on the lecture's
    five grouped folds: the best rate of the sweep, chosen on the same folds (which can only
    flatter tuning), against the tree with its defaults (learning rate 0.1 in scikit-learn
    1.9)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from support.lab.batched import split
    from support.lab.train_torch import rmse_mpa
    X, y = concrete.X.astype(np.float32), concrete.y.astype(np.float32)
    rmse, default = np.zeros((len(SWEEP_LRS), 5)), np.zeros(5)
    for fold in range(5):
        tr, va = split(concrete, "group", fold)
        for i, lr in enumerate(SWEEP_LRS):
            model = fit_hgb(X[tr], y[tr], learning_rate=lr, random_state=0)
            rmse[i, fold] = rmse_mpa(model.predict(X[va]), y[va])
        default[fold] = rmse_mpa(fit_hgb(X[tr], y[tr], random_state=0).predict(X[va]), y[va])
    means = rmse.mean(axis=1)
    claim.record("default learning rate", HistGradientBoostingRegressor().learning_rate)
    claim.record("GroupKFold mean RMSE per learning rate",
                 {f"{lr:g}": round(float(m), 3) for lr, m in zip(SWEEP_LRS, means)}, unit="MPa")
    claim.record("GroupKFold mean RMSE, defaults", float(default.mean()), unit="MPa")
    best = int(np.argmin(means))
    gain = default - rmse[best]
    se = float(gain.std(ddof=0) / np.sqrt(gain.size))
    claim.record("best learning rate of the sweep", SWEEP_LRS[best])
    claim.record("gain from tuning", float(gain.mean()), unit="MPa",
                 note=f"default minus the best rate, paired by fold; SE {se:.3f} MPa")
    # the notes' own rule for "no measurable difference": within two standard errors
    claim.check("gain from tuning / SE", float(gain.mean()) / se if se else 0.0)
    # the rate is a real knob: far from the default it costs accuracy (the sweep can see it)
    assert max(means[0], means[-1]) > default.mean() + 1.0


@control("FW-10", what="scikit-learn's HistGradientBoostingRegressor defaults to a learning rate "
                       "of 0.01, which needs tuning (100 trees of it underfit)")
def tree_default_learning_rate_0_01(mp):
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB
    mp.setattr(HGB.__init__, "__kwdefaults__", {**HGB.__init__.__kwdefaults__,
                                                "learning_rate": 0.01})


@pytest.fixture
def reference(concrete):
    # function-scoped (one fit per variant, 0.3 s): a control of the tree reaches it too
    X, y, Xv = fold0(concrete)
    model = fit_hgb(X, y)
    # validation rows with a feature exactly on one of the tree's split thresholds (a
    # midpoint between two training values: 101 between 100 and 102): the only rows whose
    # side of a split a rounding can change
    edges = model._bin_mapper.bin_thresholds_
    on_edge = np.zeros(len(Xv), dtype=bool)
    for j, t in enumerate(edges):
        on_edge |= np.isin(Xv[:, j].astype(np.float64), t)
    return X, y, Xv, model.predict(Xv), on_edge, {}


# each example fits 100 boosted trees (~0.3 s on one core). "exact": the rescaled inputs are
# computed exactly (float32 values times float32 factors in float64: 24 + 24 significant bits
# fit in 53), so nothing but the scale changes. "float32": the products rounded to float32, as
# a float32 pipeline computes them; a row whose value sits exactly on a split threshold (a
# midpoint between two training values) can then land on the other side.
@pytest.mark.claim("FW-11")
@pytest.mark.parametrize("rescale", ["exact", "float32"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scales=st.lists(st.floats(0.001, 1000.0), min_size=8, max_size=8))
def test_tree_predictions_do_not_depend_on_feature_scaling(concrete, claim, reference, scales,
                                                          rescale):
    X, y, Xv, pred, on_edge, tally = reference
    _, val_idx = lecture_split(0)
    yv = concrete.y[val_idx]
    s = np.array(scales, dtype=np.float32)
    if rescale == "exact":
        Xs, Xvs = X.astype(np.float64) * s.astype(np.float64), Xv.astype(np.float64) * s
    else:
        Xs, Xvs = X * s, Xv * s
    scaled = fit_hgb(Xs, y).predict(Xvs)
    moved = np.abs(scaled - pred) > 1e-9
    rmse = lambda p: float(np.sqrt(np.mean((p - yv) ** 2)))  # noqa: E731
    change = abs(rmse(scaled) - rmse(pred))
    claim.check("share of validation rows whose prediction moved", float(np.mean(moved)),
                reduce="max")
    seen = tally.setdefault(rescale, [0, 0])     # over every example of this variant
    seen[0] += int(np.sum(moved & on_edge))
    seen[1] += int(np.sum(moved))
    claim.record("moved rows with a value exactly on a split threshold",
                 f"{seen[0]} of {seen[1]}", note=(
                     f"over all examples; {int(np.sum(on_edge))} of {len(on_edge)} validation "
                     "rows have a feature exactly on a split threshold of the unscaled tree"))
    claim.record("largest change of a prediction", float(np.max(np.abs(scaled - pred))), reduce="max", unit="MPa")
    # the qualitative claim: no systematic change of the score (the registry's bound)
    claim.check("change of the validation RMSE", change, reduce="max", unit="MPa")
    if rescale == "exact":
        # a positive rescaling that changes nothing else gives the same splits, to the bit
        assert not moved.any(), (f"an exact rescaling by {s.tolist()} moved {int(moved.sum())} "
                                 "predictions")


@control("FW-11", what="scikit-learn's HistGradientBoostingRegressor rounds every input to a "
                       "whole number before it bins and predicts: its resolution depends on "
                       "the features' scale")
def tree_rounds_its_inputs(mp):
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB
    fit, predict = HGB.fit, HGB.predict
    mp.setattr(HGB, "fit", lambda self, X, y, *args, **kwargs: fit(self, np.round(X), y,
                                                                     *args, **kwargs))
    mp.setattr(HGB, "predict", lambda self, X: predict(self, np.round(X)))


@pytest.mark.claim("FW-11")
def test_the_network_does_need_scaling(concrete, claim, fresh):
    # the negative control of the property above: the MLP of the same notes, same fold
    runs = experiments.adam_runs(concrete, fresh=fresh)
    raw = claim.record("MLP, raw inputs", runs["raw"].rmse, unit="MPa")
    scaled = claim.record("MLP, scaled inputs", runs["fixed"].rmse, unit="MPa")
    assert raw > 1.1 * scaled
