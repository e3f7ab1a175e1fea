"""Lecture, "The tree that won on a leaky split" (L:329-352).

Figure 68 and the scaler-leak paragraph.

Protocol §7.3: seeds 0-4 x 5 folds under the lecture's GroupKFold on the mix and under
``KFold(5, shuffle=True, random_state=0)``; ``HistGradientBoostingRegressor(random_state=
seed)`` defaults on raw float32 inputs; the MLP of §3 at 400 epochs. Per model the mean
over 25 runs; the gap MLP - tree paired by (seed, fold), mean +- std(ddof 0)/sqrt(25),
"significant" when |gap| > 2 SE; the gain is a model's GroupKFold mean minus its KFold mean.
Stated: random split tree 4.44, MLP 4.87, gap 0.43 +- 0.09 "nearly five standard errors";
grouped 6.25 / 6.48, gap 0.23 +- 0.18, "less than two standard errors ... the two models
tie"; gains 1.81 vs 1.61. §7.4: 3 seeds x 5 grouped folds at 200 epochs, scaler fitted on
the training rows vs on all rows: 6.27 vs 6.23, difference -0.04 +- 0.06 (std ddof 1 /
sqrt(15)), "no measurable effect".

All 50 + 30 networks are trained by ``support.lab.batched`` (stacked, each with its own seed's
initialisation and shuffles, through torch's own modules, loss, autograd, Adam and sampler;
within rounding of one-at-a-time ``train``: support/tests/test_batched.py); figure 68's random
forest (300 trees, 25 runs per split) by ``support.lab.experiments.random_forests``. The
directional claims (a model gains from the leak, the tree gains most) are decided through
+- 2 SE intervals, n counting distinct runs: the same rule as the notes' "significant".
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from support.rules.controls import control
from support.lab import experiments, perturb
from support.lab.experiments import gap_and_se
from support.rules import tolerances


def mean_se(runs) -> tuple[float, float]:
    """Mean and standard error of (5 seeds, 5 folds) runs by the notes' convention (§7.3:
    std ddof 0 / sqrt(n)), n counting distinct runs: a model that ignores its seed (HGB,
    predict-the-mean: the same fit for every seed) has 5, one per fold, not 25."""
    runs = np.asarray(runs, dtype=float)
    v = runs[0] if np.all(runs == runs[0]) else runs.ravel()
    return float(v.mean()), float(v.std(ddof=0) / np.sqrt(v.size))


def gain(tvn, a, b=None) -> tuple[float, float]:
    """What the leak was worth: model ``a``'s GroupKFold mean minus its KFold mean, or with
    ``b`` that of the paired difference a - b (by seed and fold); with its SE, the two
    schemes' runs independent of each other."""
    parts = [mean_se(tvn[s][a] - (tvn[s][b] if b else 0)) for s in ("group", "kfold")]
    (g, se_g), (k, se_k) = parts
    return g - k, float(np.hypot(se_g, se_k))


def two_se(value_se) -> dict:
    """``claim.check`` arguments deciding a gain through its interval, +- 2 SE (the notes'
    significance rule): it holds when the whole interval lies beyond the bound, and is
    inconclusive while the interval straddles it."""
    value, se = value_se
    return {"value": value, "interval": (value - 2 * se, value + 2 * se), "unit": "MPa",
            "note": f"SE {se:.3f} MPa; interval +- 2 SE"}


def repeatability(data) -> float:
    """Test repeatability (protocol §6): pairs of rows equal in all 8 inputs with two
    distinct strengths, sqrt(mean(d^2)/2)."""
    groups: dict[tuple, list[float]] = {}
    for row in data.values:
        groups.setdefault(tuple(row[:8].tolist()), []).append(float(row[8]))
    d = np.array([abs(v[0] - v[1]) for v in groups.values() if len(v) == 2 and v[0] != v[1]])
    return float(np.sqrt(np.mean(d ** 2) / 2))


def record_runs(claim, res, scheme):
    claim.record(f"{scheme}: MLP per (seed, fold)", np.round(res["mlp"], 3).tolist(), unit="MPa")
    claim.record(f"{scheme}: HGB per fold", np.round(res["hgb"][0], 3).tolist(), unit="MPa")


@pytest.fixture(scope="module")
def bars(trees_vs_nets, concrete, fresh):
    """Figure 68's four bars per scheme: predict-the-mean, the random forest, HGB, the MLP."""
    forests = experiments.random_forests(concrete, fresh=fresh)
    return {s: {**trees_vs_nets[s], "rf": forests[s]} for s in ("group", "kfold")}


pytestmark = pytest.mark.xdist_group("concrete-experiments")


@pytest.mark.claim("SPLIT-01")
def test_random_kfold_tree_4_44_and_mlp_4_87(concrete, claim, trees_vs_nets, fresh):
    res = trees_vs_nets["kfold"]
    claim.check('HGB, KFold mean of 25', float(res['hgb'].mean()), unit='MPa')
    claim.check('MLP, KFold mean of 25', float(res['mlp'].mean()), unit='MPa')
    claim.record('runs per model', res['mlp'].size,
                 note="the protocol's configuration, as the suite ran it (not a measurement)")
    record_runs(claim, res, "kfold")
    claim.record('HGB identical for every seed', experiments.hgb_seed_independent(concrete, fresh=fresh))
    assert experiments.hgb_seed_independent(concrete, fresh=fresh)


@control("SPLIT-01", "SPLIT-02", "SPLIT-03", "SPLIT-04", "SPLIT-05", "SPLIT-06", "SPLIT-08",
         "SPLIT-11", "RNG-12", scope="process", moves=("HGB, KFold mean of 25",),
         what="scikit-learn's HistGradientBoostingRegressor stops after 10 boosting iterations "
              "instead of its default 100: the tree is much weaker than the network under "
              "either split and gains little from the leak")
def boosted_tree_stops_after_ten_iterations(mp):
    # process scope: the trees are fitted once, with the shared experiments
    perturb.boosting_with(mp, max_iter=10)


@control("SPLIT-01", scope="process", moves=("HGB, KFold mean of 25",),
         what="scikit-learn's HistGradientBoostingRegressor stops after 93 boosting iterations "
              "instead of its default 100: the fewest iterations taken away that carry the "
              "tree's random-split mean of 25 past the printed 4.44's tolerance by more than a "
              "scikit-learn release moves the tree")
def boosted_tree_stops_after_ninety_three_iterations(mp):
    # the figure's own scale: the tree's mean of 25 just over its tolerance
    perturb.boosting_with(mp, max_iter=93)


@control("SPLIT-02", scope="process", moves=("gap / SE",),
         what="scikit-learn's HistGradientBoostingRegressor stops after 80 boosting iterations "
              "instead of its default 100: under the random split the tree's lead shrinks to "
              "fewer standard errors than 'nearly five' allows, and no further")
def boosted_tree_stops_after_eighty_iterations(mp):
    # the sentence's own scale: the gap's z just below what 'about 5' allows (a quarter less)
    perturb.boosting_with(mp, max_iter=80)


@control("SPLIT-04", "SPLIT-08", "SPLIT-11", scope="process",
         what="scikit-learn's HistGradientBoostingRegressor learns at rate 0.11, a tenth "
              "faster than its default: under the grouped split the tree's lead grows just "
              "past 2 standard errors, the notes' line between a tie and a win")
def boosted_tree_learns_a_tenth_faster(mp):
    # the sentences' own scale: the grouped gap just over 2 SE; the lowest seed's gap moves up
    # but stays within rounding's reach of 0 (SPLIT-08's other half undecided, not reached)
    perturb.boosting_with(mp, learning_rate=0.11)


@control("SPLIT-01", "SPLIT-04", "LOOP-13", "RNG-13", scope="process",
         moves=("MLP, KFold mean of 25", "MLP, GroupKFold mean", "gap MLP - tree",
                "PyTorch mean", "PyTorch std", "mean", "std (ddof 0)"),
         what="torch.optim.Adam loses its first moment: every step follows the current "
              "gradient alone, as if beta1 were 0")
def batched_adam_loses_its_first_moment(mp):
    # process scope: the networks are the shared experiments' (batched and the stories' runs)
    perturb.steps_with(mp, torch.optim.Adam, "betas", lambda betas, n: (0.0, betas[1]))


@pytest.mark.claim("SPLIT-02")
def test_random_split_tree_wins_by_0_43_nearly_five_standard_errors(claim, trees_vs_nets):
    gap, se = gap_and_se(trees_vs_nets["kfold"])
    claim.check('gap MLP - tree', gap, unit='MPa')
    claim.check('SE', se, unit='MPa')
    # the tree wins beyond 2 SE, by nearly five: the figure's bound and its stated 5
    claim.check('gap / SE', gap / se, note="paired MLP - tree over std (ddof 0) / sqrt 25")


@pytest.mark.claim("SPLIT-03")
def test_random_split_scores_are_within_about_2_5_of_the_repeatability(concrete, claim,
                                                                        trees_vs_nets):
    rep = claim.check('repeatability', repeatability(concrete), unit='MPa')
    res = trees_vs_nets["kfold"]
    # "within about 2.5 MPa" of it, and worse than it: the figures' bounds
    claim.check('HGB - repeatability', float(res['hgb'].mean()) - rep, unit='MPa')
    claim.check('MLP - repeatability', float(res['mlp'].mean()) - rep, unit='MPa')


@pytest.mark.claim("SPLIT-04")
def test_grouped_split_tree_6_25_mlp_6_48_gap_within_two_se(claim, trees_vs_nets):
    res = trees_vs_nets["group"]
    claim.check('HGB, GroupKFold mean', float(res['hgb'].mean()), unit='MPa')
    claim.check('MLP, GroupKFold mean', float(res['mlp'].mean()), unit='MPa')
    gap, se = gap_and_se(res)
    claim.check('gap MLP - tree', gap, unit='MPa')
    claim.check('SE', se, unit='MPa')
    record_runs(claim, res, "group")
    # a tie under the honest split: within 2 SE (the figure's bound)
    claim.check("gap / SE", gap / se, note="paired MLP - tree over std (ddof 0) / sqrt 25")
    # contrast: the same rule does not call the leaky split's gap a tie
    kgap, kse = gap_and_se(trees_vs_nets["kfold"])
    claim.record("random split: gap / SE", kgap / kse)
    assert claim.figure("gap / SE").judge(kgap / kse)[0] == "broken", \
        "control: the leaky split's gap counts as a tie"


@pytest.mark.claim("SPLIT-05")
def test_both_models_lose_when_the_leak_closes_and_the_tree_more(claim, trees_vs_nets):
    # the printed figures: the same seeds and folds re-run, compared under their tolerance
    claim.check('HGB gain from the leak', gain(trees_vs_nets, "hgb")[0], unit='MPa')
    claim.check('MLP gain from the leak', gain(trees_vs_nets, "mlp")[0], unit='MPa')
    # the claim: both gain, the tree more, each beyond its noise
    claim.check("HGB gain, +- 2 SE", **two_se(gain(trees_vs_nets, "hgb")))
    claim.check("MLP gain, +- 2 SE", **two_se(gain(trees_vs_nets, "mlp")))
    claim.check("HGB gain - MLP gain, +- 2 SE", **two_se(gain(trees_vs_nets, "hgb", "mlp")))
    per_seed = [float((trees_vs_nets["group"]["hgb"][s]
                       - trees_vs_nets["group"]["mlp"][s]).mean()
                      - (trees_vs_nets["kfold"]["hgb"][s]
                         - trees_vs_nets["kfold"]["mlp"][s]).mean())
                for s in range(5)]
    claim.record("HGB gain - MLP gain per seed", np.round(per_seed, 3).tolist(), unit="MPa")


@control("SPLIT-05", scope="process",
         what="scikit-learn's HistGradientBoostingRegressor stops after 33 boosting iterations "
              "instead of its default 100: the weakened tree gains less from the leak than the "
              "network, the gain difference's interval just clear of 0 on the network's side, "
              "so the tree no longer gains faster; fewer iterations taken away leave the "
              "interval across 0 or clear of it by less than a build moves the networks")
def boosted_tree_stops_after_thirty_three_iterations(mp):
    # the sentence's own scale: 'the tree faster' through the notes' +- 2 SE rule, the gain
    # difference's interval just under 0
    perturb.boosting_with(mp, max_iter=33)


@control("SPLIT-05", scope="process", moves=("HGB gain from the leak",),
         what="scikit-learn's HistGradientBoostingRegressor stops after 96 boosting iterations "
              "instead of its default 100: the tree's gain from the leak moves just outside the "
              "printed 1.81's tolerance, while the gain difference's interval stays across 0")
def boosted_tree_stops_after_ninety_six_iterations(mp):
    # the printed figure's own scale, seen though the claim's comparison is undecided: a
    # moved figure is reported beside an undecided interval, and a control sees it there
    perturb.boosting_with(mp, max_iter=96)


@pytest.mark.claim("SPLIT-06")
@pytest.mark.parametrize("model", ["mean", "rf", "hgb", "mlp"])
def test_every_model_does_better_under_the_random_split(concrete, claim, bars, model):
    g, k = bars["group"][model], bars["kfold"][model]
    claim.record("runs per bar", g.size,
                 note="the protocol's configuration, as the suite ran it (not a measurement)")
    claim.record("GroupKFold mean", float(g.mean()), unit="MPa")
    claim.record("KFold mean", float(k.mean()), unit="MPa")
    if model != "mean":
        claim.check("gain from the random split, +- 2 SE", **two_se(gain(bars, model)))
        return
    # predict-the-mean: its gain is the folds' own noise, recorded; whether a leak of the
    # inputs can help it is decided by whether it reads them (scikit-learn's own
    # predict-the-mean, fitted on the inputs as given and on every column shuffled)
    value, se = gain(bars, model)
    claim.record("gain from the random split", value, unit="MPa",
                 note=f"SE {se:.3f} MPa; +- 2 SE [{value - 2 * se:.3f}, {value + 2 * se:.3f}]")
    from sklearn.dummy import DummyRegressor

    from support.lab.batched import split
    from support.lab.train_torch import rmse_mpa
    X, y = concrete.X.astype(np.float32), concrete.y.astype(np.float32)
    shuffled = np.random.default_rng(0).permuted(X, axis=0)
    tr, va = split(concrete, "kfold", 0)
    as_given = DummyRegressor().fit(X[tr], y[tr]).predict(X[va])
    on_shuffled = DummyRegressor().fit(shuffled[tr], y[tr]).predict(shuffled[va])
    claim.record("DummyRegressor, fold 0 of the random split", rmse_mpa(as_given, y[va]),
                 unit="MPa", note=f"the bar's own fold-0 run: {k[0, 0]:.3f} MPa")
    claim.check("predict-the-mean reads the inputs", not np.array_equal(as_given, on_shuffled))


@pytest.mark.claim("SPLIT-06")
def test_the_gradient_boosting_bar_improves_most(claim, bars):
    claim.record("gain from the random split (GroupKFold - KFold)",
                 {m: round(gain(bars, m)[0], 3) for m in ("mean", "rf", "hgb", "mlp")},
                 unit="MPa")
    for other, label in (("mean", "mean"), ("rf", "RF"), ("mlp", "MLP")):
        claim.check(f"HGB gain - {label} gain, +- 2 SE", **two_se(gain(bars, "hgb", other)))


@pytest.mark.claim("SPLIT-07")
def test_scaler_fitted_on_all_rows_makes_no_measurable_difference(concrete, claim, fresh):
    leak = experiments.scaler_leak(concrete, fresh=fresh)
    honest, leaky = leak["honest"].ravel(), leak["leaky"].ravel()
    diff = leaky - honest
    mean, se = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size))
    claim.record('runs', diff.size,
                 note="the protocol's configuration, as the suite ran it (not a measurement)")
    claim.check('honest (scaler on training rows)', float(honest.mean()), unit='MPa')
    claim.check('leaky (scaler on all rows)', float(leaky.mean()), unit='MPa')
    claim.check('difference leaky - honest', mean, unit='MPa')
    claim.check('SE', se, unit='MPa')
    claim.record("honest per run", np.round(honest, 3).tolist(), unit="MPa")
    claim.record("leaky per run", np.round(leaky, 3).tolist(), unit="MPa")
    # "no measurable effect": the difference lies within 2 SE of zero (the entry's bound)
    claim.check("difference / SE", mean / se,
                note="mean paired difference over its standard error (std ddof 1 / sqrt 15)")
    claim.check("paired runs that differ", int(np.count_nonzero(diff)))


@control("SPLIT-07", scope="process",
         moves=("honest (scaler on training rows)", "leaky (scaler on all rows)"),
         what="torch's Adam steps 2 % longer than its lr on every parameter group: the fifteen "
              "runs of each arm end elsewhere, their means outside the printed figures' "
              "mpa:mean tolerance")
def adam_steps_two_percent_longer_on_the_scaler_runs(mp):
    # the figures' own scale: a mean of fifteen runs moved just past the tolerance every mean
    # of the protocol takes (the batched networks read the lr per parameter group)
    perturb.steps_scaled(mp, torch.optim.Adam, 1.02)


@pytest.mark.claim("SPLIT-08")
def test_a_single_seed_could_show_the_mlp_winning_on_the_grouped_split(claim, trees_vs_nets):
    res = trees_vs_nets["group"]
    per_seed = (res["mlp"] - res["hgb"]).mean(axis=1)
    claim.record("gap MLP - tree per seed (mean over 5 folds)", np.round(per_seed, 3).tolist(), unit="MPa")
    claim.record("seeds on which the MLP beats the tree", [s for s, g in enumerate(per_seed) if g < 0])
    # some seed shows the MLP winning: the lowest seed's gap below 0, decided only beyond
    # rounding's reach (seed 0's gap changes sign between AVX2 and AVX-512 kernels)
    lowest = float(per_seed.min())
    claim.check("lowest seed's gap MLP - tree (mean over 5 folds)", lowest, unit="MPa",
                **tolerances.within_reach(lowest, "mpa:mean of 5"))
    # "five seeds show a tie": the 25 runs' gap within 2 SE (the figure's bound)
    gap, se = gap_and_se(res)
    claim.check("five seeds' gap / SE", gap / se, note="paired MLP - tree over std (ddof 0) / sqrt 25")


@control("SPLIT-08", "RNG-12", scope="process", expect="holds",
         what="scikit-learn's HistGradientBoostingRegressor needs 15 rows in a leaf instead of "
              "its default 20: the tree weakens on the grouped folds just enough that a single "
              "seed shows the MLP winning beyond rounding's reach of a tie, while the five "
              "seeds' mean stays a tie")
def boosted_tree_needs_fifteen_rows_a_leaf(mp):
    # the single-seed sentence made true at its own threshold: the lowest seed's gap carried
    # just past the reach that keeps it undecided as measured, where no tree setting moves
    # every seed alike by more (the networks are left as they are)
    perturb.boosting_with(mp, min_samples_leaf=15)
