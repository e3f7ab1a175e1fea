"""What does not depend on Linux: the file lock falls back where fcntl is absent, the
data-parallel claims are not-applicable (with the reason) where process groups do not run,
and a non-editable install refuses to start with a message that says why."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, cwd: Path = ROOT, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_support_distributed_imports_and_shares_without_fcntl(tmp_path):
    # as on Windows without msvcrt: no file lock at all, so each worker computes its own
    out = _python(f"""
import sys
sys.modules["fcntl"] = None
sys.modules["msvcrt"] = None
from support.lab import distributed
from support.machine import locks
assert locks.fcntl is None and locks.msvcrt is None
with locks.file_lock({str(tmp_path / 'x.lock')!r}) as locked:
    assert locked is False
calls = []
for _ in range(2):
    distributed.once_per_run("probe", lambda: calls.append(1) or 7, {str(tmp_path)!r})
assert calls == [1, 1], calls
print("ok")
""", PYTEST_XDIST_WORKER="gw0")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_data_parallel_claims_are_not_applicable_where_process_groups_do_not_run(tmp_path):
    (tmp_path / "as_on_windows.py").write_text(
        "from support.lab import distributed\n"
        "distributed.unsupported_reason = lambda: 'Windows: no process groups here (simulated)'\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "as_on_windows",
         f"--claims-report={tmp_path}",
         "claims/sheet/test_01_key_ideas_10_data_parallel_training.py"], cwd=ROOT,
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    claims = {c["id"]: c for c in json.loads((tmp_path / "claims.json").read_text())["claims"]}
    ddp = {cid: c for cid, c in claims.items() if cid.startswith("DDP-") and c["tests"]}
    assert len(ddp) >= 5
    for cid, c in ddp.items():
        assert c["verdict"] == "not-applicable", (cid, c["verdict"])
        assert "Windows: no process groups here (simulated)" in c["reason"]


def test_a_non_editable_install_refuses_with_the_reason(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run(["cp", "-r", str(ROOT / "support"), str(src / "support")], check=True)
    # the wheel `pip install .` would install, built by the backend pyproject.toml names
    built = subprocess.run([sys.executable, "-c", "import setuptools.build_meta as b; "
                            f"print(b.build_wheel({str(tmp_path / 'dist')!r}))"],
                           cwd=src, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / "dist" / built.stdout.split()[-1]) as whl:
        whl.extractall(site)
    assert (site / "support" / "rules" / "entries.py").exists() and not (site / "claims").exists()
    out = _python("import support.rules.entries", cwd=tmp_path, PYTHONPATH=str(site))
    assert out.returncode != 0
    assert "runs from a checkout of the suite" in out.stderr
    assert "pip install -e ." in out.stderr


def test_a_fingerprint_asks_nothing_of_a_framework_the_run_never_imported():
    # a nested pytest run (the suite's own tests start many) must not import JAX to describe
    # itself; the fingerprint still names it, under not_loaded
    out = _python("""
import json, sys
from support.machine import fingerprint
fp = fingerprint.fingerprint()
assert "torch" not in sys.modules and "jax" not in sys.modules, sorted(sys.modules)
import torch
after = fingerprint.fingerprint()
assert "jax" not in sys.modules
print(json.dumps([fp["not_loaded"], fp["devices"], after["not_loaded"],
                  [d["framework"] for d in after["devices"]]]))
""")
    assert out.returncode == 0, out.stderr
    not_loaded, devs, after_not_loaded, after_frameworks = json.loads(out.stdout)
    assert not_loaded == ["torch", "jax"] and devs == []
    assert after_not_loaded == ["jax"] and set(after_frameworks) == {"torch"}
