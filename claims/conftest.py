"""Fixtures that the claim modules of several sections read.

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


# --------------------------------------------------------------------------- every section's
# the run's --fresh, one intra-op thread, and the CUDA device of a gpu-tier test
@pytest.fixture(scope="session")
def fresh(request) -> bool:
    """True when shared expensive results must be recomputed (--fresh)."""
    return bool(request.config.getoption("--fresh"))


@pytest.fixture
def one_torch_thread():
    """Run the test with one intra-op thread (small tensors on a shared machine)."""
    from support.lab.train_torch import torch_threads
    with torch_threads(1):
        yield


@pytest.fixture
def cuda():
    """The CUDA device of a gpu-tier test (which carries ``@device_marks.needs("cuda")``, so it
    skips with the reason where there is none): torch seeded with 0 first, the work
    finished and the allocator's cached blocks released after, so every test's allocator
    readings start from the same state."""
    import torch
    torch.manual_seed(0)
    yield torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
