"""Lecture, "Limitations and trade-offs": "The framework does not check your intent. ...
none of the five stories above raised an error. One printed a warning, which the notebook
displayed once and then hid."

The five stories are the gradient check with a careless dtype and the four trained models
(unshaped target, leaky split, missing zero_grad, Adam on raw inputs). Each runs here with
every warning recorded; exactly one of them (the unshaped target) may warn.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from support.harness.controls import control
from support.lab import stories, toy
from support.lab.batched import split
from support.lab.experiments import fit_hgb
from support.lab.train_torch import train


def _leaky_split_story(concrete) -> list[str]:
    """One (seed 0, fold 0) cell of the random-KFold comparison: the tree and the MLP."""
    tr, va = split(concrete, "kfold", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_hgb(concrete.X[tr].astype(np.float32), concrete.y[tr].astype(np.float32), random_state=0)
    net = train(concrete, seed=0, epochs=400, train_idx=tr, val_idx=va)
    return [str(w.message) for w in caught] + net.warnings


def _gradient_check_story() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = toy.draw()
        err = toy.max_abs_diff(toy.torch_gradient(t, careless=True), toy.hand_gradient(t.params, t.x, t.y))
    assert err > 1e-9  # the careless branch really is the buggy one
    return [str(w.message) for w in caught]


@pytest.mark.claim("STORY-15")
def test_none_of_the_five_stories_raises_and_only_one_warns(concrete, claim, fresh):
    counts = {}
    try:
        counts["gradient check, careless dtype"] = len(_gradient_check_story())
        counts["unshaped target"] = stories.run(concrete, "shape_bug", fresh=fresh).n_warnings
        counts["leaky split"] = len(_leaky_split_story(concrete))
        counts["missing zero_grad"] = stories.run(concrete, "no_zero_grad", fresh=fresh).n_warnings
        counts["Adam on raw inputs"] = stories.run(concrete, "adam_raw", fresh=fresh).n_warnings
    except (RuntimeError, ValueError) as exc:   # a framework refusing a step (the sentence
        # says none does); any other exception is an error of the test, not a verdict
        raise AssertionError(f"a story raised {type(exc).__name__}: {exc}") from exc
    for name, n in counts.items():
        claim.record(f"warnings: {name}", n)
    warned = [name for name, n in counts.items() if n]
    claim.check('stories that warned', len(warned))
    assert warned == ["unshaped target"]


@control("STORY-15", what="torch's MSELoss refuses a (64,) target beside a (64, 1) output with an "
                          "error instead of broadcasting the two and warning, so one story raises")
def mse_loss_refuses_mismatched_shapes(mp):
    real = torch.nn.functional.mse_loss

    def refusing(input, target, *args, **kwargs):
        if target.size() != input.size():
            raise RuntimeError(f"target size {tuple(target.size())} differs from input size "
                               f"{tuple(input.size())}")
        return real(input, target, *args, **kwargs)
    mp.setattr(torch.nn.functional, "mse_loss", refusing)


@control("STORY-15", what="scikit-learn's HistGradientBoostingRegressor warns whenever it is "
                          "fitted, so a second story prints a warning")
def tree_fit_warns(mp):
    from sklearn.ensemble import HistGradientBoostingRegressor
    real = HistGradientBoostingRegressor.fit

    def warning_fit(self, X, y, *args, **kwargs):
        warnings.warn("the tree saw an unscaled input", UserWarning)
        return real(self, X, y, *args, **kwargs)
    mp.setattr(HistGradientBoostingRegressor, "fit", warning_fit)
