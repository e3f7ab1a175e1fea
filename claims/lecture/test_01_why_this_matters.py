"""Lecture, "Why this matters" (L:7-16).

L:11 measures the shape bug before the stories tell it. Fold 0 of the lecture's GroupKFold
split, seed 0, 120 epochs (protocol §3, §7.1-7.2): predicting the training mean scores 17.9
MPa, the working network 5.5 MPa; with the target left as (64,) instead of (64, 1), the
network learns a constant (17.7 MPa) and PyTorch warns once per batch, 1,560 times, which a
notebook shows only once (SHAPE-12).
"""
from __future__ import annotations

import warnings

import pytest
import torch

from support.rules.controls import control
from support.lab import stories
from support.lab.stories import shape_bug_run
from support.lab.train_torch import baseline_rmse

WARNING_TEXT = ("Using a target size (torch.Size([64])) that is different to the input size "
                "(torch.Size([64, 1])). This will likely lead to incorrect results")


@pytest.mark.claim("SHAPE-12")
def test_a_repeated_warning_is_shown_once(claim):
    """Python's default filter shows a warning once per call site; a notebook uses it too."""
    counts = {}
    for action in ("default", "always"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.simplefilter(action)
            for _ in range(5):
                torch.nn.MSELoss()(torch.randn(64, 1), torch.randn(64))
        counts[action] = sum("Using a target size" in str(w.message) for w in caught)
    claim.check('times_shown_for_5_calls', counts['default'])
    claim.record("times_with_always_filter", counts["always"])
    assert counts["always"] == 5


@control("SHAPE-12", what="Python's default warning filter shows every repetition of a "
                          "warning, as 'always' does")
def default_filter_shows_every_warning(mp):
    real = warnings.simplefilter
    mp.setattr(warnings, "simplefilter", lambda action, *args, **kwargs: real(
        "always" if action == "default" else action, *args, **kwargs))


@pytest.mark.claim("STORY-02")
def test_unshaped_target_trains_without_error_to_the_mean_baseline(concrete, claim, fresh):
    bug = shape_bug_run(concrete, fresh)
    base = baseline_rmse(concrete)
    fixed = stories.run(concrete, "fixed", fresh=fresh).rmse
    claim.check('buggy RMSE', bug.rmse, unit='MPa')
    claim.check('baseline', base, unit='MPa')
    claim.check('better than the baseline by', 100 * (1 - bug.rmse / base), unit='%')
    claim.check('warnings', bug.n_warnings)
    claim.check('steps', bug.steps)
    quoted = sum(1 for w in bug.warnings if w.startswith(WARNING_TEXT))
    claim.record("warnings with the quoted text", quoted)
    claim.record("first warning", bug.warnings[0] if bug.warnings else "")
    # one warning per step, with the text the notes quote for the full batches (the last
    # batch of each epoch, 56 rows, names its own sizes)
    assert bug.n_warnings == bug.steps
    claim.check("every full batch warns in the notes' words",
                quoted == bug.steps - len(bug.history))       # one 56-row batch per epoch
    # the contrast: the same loop with the target shaped
    claim.check("shaped target's RMSE / baseline", fixed / base)


@control("STORY-02", "STORY-03",
         what="torch's MSELoss lines a (64,) target up with the (64, 1) output, silently, "
              "instead of broadcasting the two to a 64 x 64 matrix: the unshaped loop trains "
              "like the working one")
def mse_loss_aligns_the_target(mp):
    real = torch.nn.functional.mse_loss

    def aligned(input, target, *args, **kwargs):
        if target.size() != input.size() and target.numel() == input.numel():
            target = target.reshape(input.size())
        return real(input, target, *args, **kwargs)
    mp.setattr(torch.nn.functional, "mse_loss", aligned)
