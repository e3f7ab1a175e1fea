"""support.cache: a stored result is reused only for the same key, and --fresh recomputes
except for an entry written by the same xdist run."""
from __future__ import annotations

from support import cache


def test_same_key_hits_and_other_inputs_miss(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert cache.cached("t", {"a": 1}, ["cache.py"], compute, folder=tmp_path) == 1
    assert cache.cached("t", {"a": 1}, ["cache.py"], compute, folder=tmp_path) == 1
    assert cache.cached("t", {"a": 2}, ["cache.py"], compute, folder=tmp_path) == 2
    assert len(calls) == 2


def test_fresh_recomputes_unless_this_run_wrote_it(tmp_path, monkeypatch):
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-1")
    assert cache.cached("t", {}, ["cache.py"], compute, fresh=True, folder=tmp_path) == 1
    # a second worker of the same run shares it
    assert cache.cached("t", {}, ["cache.py"], compute, fresh=True, folder=tmp_path) == 1
    # a later run with --fresh does not
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-2")
    assert cache.cached("t", {}, ["cache.py"], compute, fresh=True, folder=tmp_path) == 2
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID")
    assert cache.cached("t", {}, ["cache.py"], compute, fresh=True, folder=tmp_path) == 3


def test_the_key_covers_environment_and_code():
    k = cache.key("t", {"a": 1}, ["cache.py"])
    env = cache.environment()
    assert {"python", "torch", "numpy", "scikit-learn", "jax", "optax"} <= set(env)
    assert k != cache.key("t", {"a": 1}, ["cache.py", "batched.py"])
