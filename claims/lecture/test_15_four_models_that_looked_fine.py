"""Lecture, "Four models that looked fine" (L:295-298).

The stories' reference setup is fold 0 of the lecture's GroupKFold split, seed 0, 120 epochs
(protocol §3, §7.1-7.2).
"""
from __future__ import annotations

import pytest

from support.lab.data import lecture_split


def _validation_sets(data, runs) -> set[tuple[int, ...]]:
    """The distinct validation row sets of ``runs``, (scheme, fold) pairs."""
    from support.lab.batched import split
    return {tuple(split(data, scheme, fold)[1].tolist()) for scheme, fold in runs}


@pytest.mark.claim("STORY-16")
def test_the_four_stories_use_one_dataset_network_and_validation_fold(concrete, claim):
    """"All of them use the same dataset, the same small network, and the same validation
    fold": the runs each story reports, as the protocol trains them (support/lab/stories.py
    and support/lab/experiments.py's jobs, §7)."""
    from support.lab import experiments
    jobs = experiments._jobs()

    def job(name):
        return [(s.scheme, s.fold) for s in jobs[name][0]]
    # story -> the (scheme, fold) of every run whose number the story quotes
    runs = {"the loss went down and the model learned a constant": [("group", 0)] * 2,
            "the tree that won on a leaky split": (job("tvn-group") + job("tvn-kfold")
                                                  + job("leak")),
            "the loop that forgot zero_grad()": [("group", 0)] * 2,
            "Adam on raw inputs": [("group", 0)] * 2}
    sets = {story: _validation_sets(concrete, r) for story, r in runs.items()}
    fold0 = tuple(lecture_split(0)[1].tolist())
    claim.record("validation row sets per story", {k: len(v) for k, v in sets.items()})
    claim.record("stories validated on the lecture's fold 0 alone",
                 [k for k, v in sets.items() if v == {fold0}])
    # the same dataset and network hold as the protocol is built: every run trains
    # train()'s MLP on the one table (a run's Spec has no field for either)
    from support.lab.train_torch import mlp
    claim.record("network of every run", f"8-64-64-1 MLP, "
                 f"{sum(p.numel() for p in mlp().parameters())} parameters")
    differ = [k for k, v in sets.items() if v != {fold0}]
    claim.check("every story validated on the lecture's fold 0", not differ,
                note="; ".join(f"{k}: {len(sets[k])} validation sets" for k in differ))
