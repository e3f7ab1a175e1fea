"""support.lab.cache: a stored result is reused only for the same key, --fresh recomputes except
for an entry written by the same xdist run, and the key covers the code that computes."""
from __future__ import annotations

import shutil

import pytest

from support.lab import cache

MOD = "support.lab.cache"


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
    files = cache.code_files("support.lab.experiments")
    # jaxutil is imported by train_jax only, inside a function: found all the same; the
    # imports cross wings (lab -> machine) and name modules of packages
    assert {"lab/experiments.py", "lab/batched.py", "lab/train_torch.py", "lab/train_jax.py",
            "lab/jaxutil.py", "lab/data.py", "machine/environment.py", "lab/__init__.py",
            "__init__.py", "paths.py", "resources/lecture_folds.txt"} <= set(files)
    assert "reports/report.py" not in files


def test_a_name_that_is_no_module_is_refused():
    with pytest.raises(ValueError, match="not a module of the suite"):
        cache.code_files("support.experiments")      # the module's name before the wings


def _copy(tmp_path, monkeypatch):
    copy = tmp_path / "support"
    shutil.copytree(cache.SUPPORT, copy, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    monkeypatch.setattr(cache, "SUPPORT", copy)
    return copy


def test_a_change_to_any_file_the_computation_reads_is_a_miss(tmp_path, monkeypatch):
    copy = _copy(tmp_path, monkeypatch)
    files = cache.code_files("support.lab.experiments")
    before = cache.key("t", {}, "support.lab.experiments")
    for name in files:
        path = copy / name
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        assert cache.key("t", {}, "support.lab.experiments") != before, name
        path.write_bytes(original)
    assert cache.key("t", {}, "support.lab.experiments") == before
    # a file outside the computation's imports does not move the key
    (copy / "reports" / "report.py").write_text("# changed\n")
    assert cache.key("t", {}, "support.lab.experiments") == before


@pytest.mark.parametrize("statement", ["from support.lab import extra",
                                       "from support.lab.extra import helper",
                                       "from . import extra", "import support.lab.extra"])
def test_a_module_added_to_a_wing_is_part_of_the_key_of_what_imports_it(tmp_path, monkeypatch,
                                                                         statement):
    copy = _copy(tmp_path, monkeypatch)
    (copy / "lab" / "extra.py").write_text("def helper():\n    return 1\n")
    batched = copy / "lab" / "batched.py"
    batched.write_text(batched.read_text() + f"\n\ndef _uses_extra():\n    {statement}\n")
    assert "lab/extra.py" in cache.code_files("support.lab.experiments")
    before = cache.key("t", {}, "support.lab.experiments")
    (copy / "lab" / "extra.py").write_text("def helper():\n    return 2\n")
    assert cache.key("t", {}, "support.lab.experiments") != before
