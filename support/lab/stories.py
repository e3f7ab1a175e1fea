"""The seed-0, fold-0, 120-epoch runs the stories of the notes quote: the one PyTorch loop
(:func:`support.lab.train_torch.train`) with one switch flipped, trained once per run.

Several claims read the same run (STORY-02 and STORY-03 the shape-bug run, STORY-05 and the
contrasts of every story the fixed run, STORY-15 the warnings each story's loop
emits), and :mod:`support.lab.experiments` takes the fixed, no-``zero_grad`` and raw-input Adam
runs from here too. Each run is trained sequentially, the way a user's loop runs (so its
warnings are the loop's own), on one intra-op thread, and kept by :mod:`support.lab.cache`: the
xdist workers of one run share it, and ``--fresh`` (``fresh=True``) recomputes it.
"""
from __future__ import annotations

from support.lab import cache
from support.lab.data import Concrete, fingerprint
from support.lab.train_torch import TrainResult, train

#: story name -> the switches of train() that produce it (protocol §7)
STORIES: dict[str, dict] = {
    "fixed": {},
    "shape_bug": {"target_2d": False},
    "no_zero_grad": {"zero_grad": False},
    "adam_raw": {"scale": False},
}

_CACHE: dict[tuple, TrainResult] = cache.memo_store()


def run(data: Concrete, name: str, *, seed: int = 0, fold: int = 0, epochs: int = 120,
        fresh: bool = False) -> TrainResult:
    """The named story's run (per-epoch history and warnings recorded)."""
    key = (id(data), name, seed, fold, epochs)
    if key not in _CACHE:
        switches = STORIES[name]
        _CACHE[key] = cache.cached(
            f"story-{name}", {"data": fingerprint(data.values), "switches": switches,
                              "seed": seed, "fold": fold, "epochs": epochs},
            __name__, lambda: train(data, seed=seed, fold=fold, epochs=epochs, record=True,
                                    threads=1, **switches), fresh=fresh)
    return _CACHE[key]


def shape_bug_run(concrete, fresh):
    """The buggy run; a release that made MSELoss refuse the shapes is a failed claim."""
    try:
        return run(concrete, "shape_bug", fresh=fresh)
    except (RuntimeError, ValueError) as exc:   # torch refusing the shapes
        raise AssertionError(f"the unshaped-target loop no longer runs: "
                             f"{type(exc).__name__}: {exc}") from exc
