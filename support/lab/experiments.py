"""The expensive shared results of the concrete-data stories, each computed once per process.

Every network here is trained by :func:`support.lab.batched.train_many` (the stacked version of
:func:`support.lab.train_torch.train`, through torch's own modules, loss, autograd, optimisers
and sampler; ``support/tests/test_batched.py`` bounds how far each job is from ``train``'s
numbers), and networks that share an epoch budget are trained together. The first request computes everything batched, in
a process pool of up to two workers (one per core) while this process fits the trees and runs the
JAX loop; later requests, from any test module, get the same objects. The bundle is kept
on disk by :mod:`support.lab.cache` (keyed by data, protocol, environment and this code);
``fresh=True`` (``--fresh``) recomputes it, sharing it only between the xdist workers of
the same run.

* :func:`adam_runs` - fold-0 120-epoch Adam runs, each with its per-epoch validation curve:
  the working loop for seeds 0-4 (the PyTorch side of the torch-vs-JAX comparison), no
  ``zero_grad``, raw inputs (protocol §7.1, §7.5, §7.6, §8.2); the seed-0 stories are
  :mod:`support.lab.stories`' runs, trained once.
* :func:`sgd_runs` - plain SGD, 120 epochs: the learning-rate sweep on seed 0, lr 1.0 and
  2.0 over seeds 0-5, and SGD on raw inputs (§7.6, §10).
* :func:`trees_vs_nets` - 5 seeds x 5 folds under the lecture's GroupKFold folds and under
  ``KFold(5, shuffle=True, random_state=0)``: the MLP at 400 epochs,
  ``HistGradientBoostingRegressor`` defaults on raw inputs, predict-the-mean (§7.3).
* :func:`scaler_leak` - 3 seeds x 5 grouped folds at 200 epochs, scaler on the training
  rows vs on all rows (§7.4).
* :func:`jax_runs` - the JAX/optax loop, seeds 0-4 (§8.2).
* :func:`grad_norms` - the gradient-norm probe, two 8-step sequential :func:`train` runs.

The stories' own runs (warnings and all) are sequential: ``support.lab.stories``.
"""
from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from support.lab import cache
from support.lab.batched import Spec, split, train_many
from support.lab.data import Concrete, fingerprint
from support.lab.train_torch import TrainResult, rmse_mpa, train
from support.machine.environment import cores

SEEDS_5 = range(5)
FOLDS = range(5)
SCHEMES = ("group", "kfold")
SWEEP_LRS = (1e-3, 1e-2, 0.1, 1.0, 2.0)
RAW_SGD_LRS = (1e-3, 1e-2, 0.1)

_lock = threading.RLock()
_memo: dict = cache.memo_store()


def _key(data: Concrete, name: str):
    return (fingerprint(data.values), name)


def _jobs() -> dict[str, tuple[list[Spec], dict]]:
    """Every batched job: name -> (networks, train_many arguments)."""
    jobs = {
        # seed 0 and the no-zero_grad and raw-input runs are the stories' (support.lab.stories)
        "adam": ([Spec(seed=s) for s in SEEDS_5 if s != 0],
                 dict(epochs=120, optimizer="adam", record=True)),
        "sgd": ([Spec(lr=lr) for lr in SWEEP_LRS]
                + [Spec(seed=s, lr=lr) for lr in (1.0, 2.0) for s in range(1, 6)]
                + [Spec(lr=lr, scale=False) for lr in RAW_SGD_LRS],
                dict(epochs=120, optimizer="sgd", record=True)),
        "leak": ([Spec(seed=s, fold=f, scaler_on_all=leak)
                  for leak in (False, True) for s in range(3) for f in FOLDS],
                 dict(epochs=200, optimizer="adam")),
    }
    for scheme in SCHEMES:
        jobs[f"tvn-{scheme}"] = ([Spec(seed=s, fold=f, scheme=scheme)
                                  for s in SEEDS_5 for f in FOLDS],
                                 dict(epochs=400, optimizer="adam"))
    return jobs


def _run_job(data: Concrete, job: tuple[list[Spec], dict]) -> list[TrainResult]:
    """One batched job, in a pool process: one intra-op thread (train_many sets it), so two
    jobs on two cores do not contend."""
    specs, kwargs = job
    return train_many(data, specs, threads=1, **kwargs)


def _run_job_in_pool(data: Concrete, job: tuple[list[Spec], dict]) -> list[TrainResult]:
    """:func:`_run_job` in a pool process, whose heap is then frozen: at exit the interpreter
    would otherwise walk everything torch left behind, 0.6 s per process on the path of the
    pool's shutdown (a later job's objects are still collected as usual)."""
    out = _run_job(data, job)
    gc.freeze()
    return out


def workers() -> int:
    """Processes for the batched jobs: one per available core, at most two
    (``LECTURE11_WORKERS`` overrides; 0 or 1 trains everything in this process)."""
    env = os.environ.get("LECTURE11_WORKERS")
    if env is not None:
        return int(env)
    return min(2, cores())


def _compute_all(data: Concrete, jobs: dict) -> dict:
    """Train every batched job, fit the trees and run JAX, overlapping where cores allow.

    With two workers the jobs go to a process pool (the standard library's, spawned: a fresh
    interpreter whatever started this one), longest first, while this process fits the
    trees and runs the JAX loop.
    """
    n = workers()
    if n <= 1:
        results = {k: _run_job(data, job) for k, job in jobs.items()}
        return {"jobs": results, "trees": _fit_trees(data), "jax": _run_jax(data)}
    cost = {k: len(job[0]) * job[1]["epochs"] for k, job in jobs.items()}
    # the pool's processes start with one OpenMP/MKL thread (read when torch loads there)
    with _environ(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"), \
            ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {k: pool.submit(_run_job_in_pool, data, jobs[k])
                   for k in sorted(jobs, key=lambda k: -cost[k])}
        trees, jax = _fit_trees(data), _run_jax(data)
        results = {k: f.result() for k, f in futures.items()}
    return {"jobs": results, "trees": trees, "jax": jax}


@contextlib.contextmanager
def _environ(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _bundle(data: Concrete, fresh: bool = False) -> dict:
    """Everything above, once per process; from the disk cache unless ``fresh`` (then
    shared only between the workers of this run)."""
    with _lock:
        k = _key(data, "bundle")
        if k not in _memo:
            jobs = _jobs()
            _memo[k] = cache.cached(
                "concrete-experiments", {"data": fingerprint(data.values), "jobs": repr(jobs)},
                __name__, lambda: _compute_all(data, jobs), fresh=fresh)
        return _memo[k]


def _job(data: Concrete, name: str, fresh: bool = False) -> tuple[list[Spec], list[TrainResult]]:
    return _jobs()[name][0], _bundle(data, fresh)["jobs"][name]


def adam_runs(data: Concrete, fresh: bool = False) -> dict[str, TrainResult]:
    """``fixed`` (= seed 0), ``seed0``..``seed4``, ``no_zero_grad``, ``raw``: seeds 1-4
    batched, the others the stories' runs (``train``'s, which the batched networks follow to
    within rounding: test_batched)."""
    from support.lab import stories
    specs, res = _job(data, "adam", fresh)
    out = {f"seed{s.seed}": r for s, r in zip(specs, res)}
    out["seed0"] = out["fixed"] = stories.run(data, "fixed", fresh=fresh)
    out["no_zero_grad"] = stories.run(data, "no_zero_grad", fresh=fresh)
    out["raw"] = stories.run(data, "adam_raw", fresh=fresh)
    return out


def sgd_runs(data: Concrete, fresh: bool = False) -> dict[tuple, TrainResult]:
    """Keys ``("lr", lr, seed)`` on scaled inputs and ``("raw", lr, 0)`` on raw inputs."""
    specs, res = _job(data, "sgd", fresh)
    return {("lr" if s.scale else "raw", s.lr, s.seed): r for s, r in zip(specs, res)}


def scaler_leak(data: Concrete, fresh: bool = False) -> dict[str, np.ndarray]:
    """``honest`` and ``leaky`` final RMSEs, each (3 seeds, 5 folds)."""
    specs, res = _job(data, "leak", fresh)
    rm = np.array([r.rmse for r in res]).reshape(2, 3, 5)
    return {"honest": rm[0], "leaky": rm[1]}


def fit_hgb(X: np.ndarray, y: np.ndarray, **kw):
    """``HistGradientBoostingRegressor`` with its defaults (``kw`` passed on), fitted on one
    thread: at 824 rows OpenMP's spinning threads cost far more than they give."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return HistGradientBoostingRegressor(**kw).fit(X, y)


def _fit_trees(data: Concrete) -> dict:
    """HGB defaults on raw float32 inputs and predict-the-mean, per scheme and fold.

    ``HistGradientBoostingRegressor(random_state=seed)``: at 824 training rows
    ``early_stopping="auto"`` is off and no feature subsampling is on, so the seed reaches
    nothing and the fit is the same for all five seeds. It is fitted once per fold, and
    ``seed_check`` records, for fold 0 of each scheme, that seeds 0 and 4 predict
    identically (the tests assert it).

    Predictions run on one thread too: this runs beside the pool's two processes, where
    OpenMP's threads, spinning at each prediction's barrier for a thread the scheduler has
    parked, made the 12 fits and predictions take 8 CPU-seconds instead of 1.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _fit_trees_on_one_thread(data)


def _fit_trees_on_one_thread(data: Concrete) -> dict:
    X = data.X.astype(np.float32)
    y = data.y.astype(np.float32)
    out = {"hgb": {}, "mean": {}, "seed_check": {}, "early_stopping": set()}
    for scheme in SCHEMES:
        for fold in FOLDS:
            tr, va = split(data, scheme, fold)
            m = fit_hgb(X[tr], y[tr], random_state=0)
            out["early_stopping"].add(bool(m.do_early_stopping_))
            pred = m.predict(X[va]).astype(np.float32)
            out["hgb"][scheme, fold] = rmse_mpa(pred, y[va])
            mean = y[tr].mean(dtype=np.float32)
            out["mean"][scheme, fold] = rmse_mpa(np.full(len(va), mean, np.float32), y[va])
            if fold == 0:
                m4 = fit_hgb(X[tr], y[tr], random_state=4)
                out["seed_check"][scheme] = bool(np.array_equal(m4.predict(X[va]), m.predict(X[va])))
    return out


def trees_vs_nets(data: Concrete, fresh: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Per scheme (``group``, ``kfold``): ``mlp``, ``hgb`` and ``mean`` RMSEs as
    (5 seeds, 5 folds) arrays, paired by (seed, fold)."""
    trees = _bundle(data, fresh)["trees"]
    out = {}
    for scheme in SCHEMES:
        specs, res = _job(data, f"tvn-{scheme}", fresh)
        mlp = np.array([r.rmse for r in res]).reshape(5, 5)
        hgb = np.array([[trees["hgb"][scheme, f] for f in FOLDS] for _ in SEEDS_5])
        mean = np.array([[trees["mean"][scheme, f] for f in FOLDS] for _ in SEEDS_5])
        out[scheme] = {"mlp": mlp, "hgb": hgb, "mean": mean}
    return out


def trees_vs_nets_networks() -> int:
    """How many networks :func:`trees_vs_nets` trains (its jobs' specs; nothing is trained
    here, so a timing test can count them without computing the bundle while it runs alone)."""
    return sum(len(_jobs()[f"tvn-{scheme}"][0]) for scheme in SCHEMES)


def hgb_seed_independent(data: Concrete, fresh: bool = False) -> bool:
    t = _bundle(data, fresh)["trees"]
    return all(t["seed_check"].values()) and t["early_stopping"] == {False}


def jax_runs(data: Concrete, fresh: bool = False) -> list[float]:
    """Final RMSE of the JAX loop for seeds 0-4 (fold 0, 120 epochs, x64 on)."""
    return _bundle(data, fresh)["jax"]


def _run_jax(data: Concrete) -> list[float]:
    from support.lab.train_jax import train_jax
    return [train_jax(data, seed=s).rmse for s in SEEDS_5]


def grad_norms(data: Concrete) -> dict[str, list[float]]:
    """First-layer weight-gradient norm after each of the first 8 steps, seed 0, fold 0."""
    with _lock:
        key = _key(data, "grad_norms")
        if key not in _memo:
            _memo[key] = {
                name: train(data, zero_grad=zg, max_steps=8, probe_grad_norm=True).grad_norms
                for name, zg in (("with", True), ("without", False))}
        return _memo[key]


def random_forests(data: Concrete, fresh: bool = False) -> dict[str, np.ndarray]:
    """Figure 68's fourth bar: ``RandomForestRegressor(n_estimators=300,
    random_state=seed, n_jobs=-1)`` on raw float32 inputs (protocol §7.3, figure only), per
    scheme a (5 seeds, 5 folds) array of validation RMSEs. About a second a forest; kept on
    disk like the bundle, apart from it, so that only the claims that read it pay for it."""
    with _lock:
        k = _key(data, "random_forests")
        if k not in _memo:
            _memo[k] = cache.cached("random-forests", {"data": fingerprint(data.values)},
                                    __name__, lambda: _fit_forests(data), fresh=fresh)
        return _memo[k]


def _fit_forests(data: Concrete) -> dict[str, np.ndarray]:
    from sklearn.ensemble import RandomForestRegressor

    X = data.X.astype(np.float32)
    y = data.y.astype(np.float32)
    out = {}
    for scheme in SCHEMES:
        rm = np.zeros((len(SEEDS_5), len(FOLDS)))
        for fold in FOLDS:
            tr, va = split(data, scheme, fold)
            for seed in SEEDS_5:
                m = RandomForestRegressor(n_estimators=300, random_state=seed, n_jobs=-1)
                rm[seed, fold] = rmse_mpa(m.fit(X[tr], y[tr]).predict(X[va]), y[va])
        out[scheme] = rm
    return out


SQRT25 = 5.0


def gap_and_se(res):
    """Paired MLP - tree over the 25 (seed, fold) runs: mean and std(ddof 0)/sqrt(25)."""
    gap = (res["mlp"] - res["hgb"]).ravel()
    return float(gap.mean()), float(gap.std(ddof=0) / SQRT25)
