"""Fixtures that the claim modules of several sections read (so far all in claims/lecture/).

``adam_runs``, ``sgd_runs`` and ``trees_vs_nets`` are the expensive concrete experiments of
:mod:`support.lab.experiments` (the fold-0 Adam runs, the SGD runs, trees vs nets), which that
module computes once per process and keeps on disk: every section that quotes a figure of the
same runs (from "Four models that looked fine" to "Limitations and trade-offs") reads the same
results. ``net`` is the notes' toy network (:func:`support.lab.toy.draw`), the one the autodiff,
dtype-trap and limitations sections differentiate.
"""
from __future__ import annotations

import pytest

from support.lab import experiments, toy


@pytest.fixture(scope="module")
def adam_runs(concrete, fresh):
    return experiments.adam_runs(concrete, fresh=fresh)


@pytest.fixture(scope="module")
def sgd_runs(concrete, fresh):
    return experiments.sgd_runs(concrete, fresh=fresh)


@pytest.fixture(scope="module")
def net():
    return toy.draw()


@pytest.fixture(scope="module")
def trees_vs_nets(concrete, fresh):
    return experiments.trees_vs_nets(concrete, fresh=fresh)
