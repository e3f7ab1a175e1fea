"""support.cache: a stored result is reused only for the same key, --fresh recomputes except
for an entry written by the same xdist run, and the key covers the code that computes."""
from __future__ import annotations

import shutil

from support import cache

MOD = "support.cache"


def test_same_key_hits_and_other_inputs_miss(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert cache.cached("t", {"a": 1}, MOD, compute, folder=tmp_path) == 1
    assert cache.cached("t", {"a": 1}, MOD, compute, folder=tmp_path) == 1
    assert cache.cached("t", {"a": 2}, MOD, compute, folder=tmp_path) == 2
    assert len(calls) == 2


def test_fresh_recomputes_unless_this_run_wrote_it(tmp_path, monkeypatch):
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-1")
    assert cache.cached("t", {}, MOD, compute, fresh=True, folder=tmp_path) == 1
    # a second worker of the same run shares it
    assert cache.cached("t", {}, MOD, compute, fresh=True, folder=tmp_path) == 1
    # a later run with --fresh does not
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-2")
    assert cache.cached("t", {}, MOD, compute, fresh=True, folder=tmp_path) == 2
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID")
    assert cache.cached("t", {}, MOD, compute, fresh=True, folder=tmp_path) == 3


def test_the_key_covers_the_environment():
    env = cache.environment()
    assert {"python", "torch", "numpy", "scikit-learn", "jax", "optax"} <= set(env)


def test_the_code_is_found_by_following_imports():
    files = cache.code_files("support.experiments")
    # jaxutil is imported by train_jax only, inside a function: found all the same
    assert {"experiments.py", "batched.py", "train_torch.py", "train_jax.py", "jaxutil.py",
            "data.py", "resources/lecture_folds.txt"} <= set(files)
    assert "report.py" not in files


def test_a_change_to_any_file_the_computation_reads_is_a_miss(tmp_path, monkeypatch):
    copy = tmp_path / "support"
    shutil.copytree(cache.HERE, copy, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    monkeypatch.setattr(cache, "HERE", copy)
    files = cache.code_files("support.experiments")
    before = cache.key("t", {}, "support.experiments")
    for name in files:
        path = copy / name
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        assert cache.key("t", {}, "support.experiments") != before, name
        path.write_bytes(original)
    assert cache.key("t", {}, "support.experiments") == before
    # a file outside the computation's imports does not move the key
    (copy / "report.py").write_text("# changed\n")
    assert cache.key("t", {}, "support.experiments") == before
