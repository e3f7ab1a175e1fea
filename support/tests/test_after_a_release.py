"""The lecturer's page, claims/after-a-release.md, runs as written: its command block, line by
line, in a copy of the checkout, after a stand-in for ``tox -e latest`` (a kept run put where
tox writes its report), with the Python a lecturer has after ``pip install tox``: one that
cannot import pytest, NumPy, the frameworks or matplotlib. Each line must exit 0 or with the
status the page documents for it, and leave what the page says it leaves."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from venv import EnvBuilder

import pytest

from support.paths import ROOT
from support.tests.test_notes import notes_or_skip

PAGE = ROOT / "claims" / "after-a-release.md"
HISTORY = ROOT / "claims" / "history"
BASELINE = "2026-11-30-latest-cpu2core"        # kept: what last:latest finds
FRESH = "2026-12-01-latest-cpu2core"           # stands for the fresh tox -e latest run
NOTES = ROOT.parent / "shared" / "notes"


def block(heading: str = "## Watching a release") -> list[str]:
    """The page's first bash block under ``heading``, one command per line (a trailing
    backslash joins lines)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    body = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()]


def test_the_page_names_every_step_of_the_watch_in_order():
    lines = block()
    kinds = [("pip" if "pip install" in c else c.split()[0] if not c.startswith("python -m support")
              else c.split()[3]) for c in lines]
    assert kinds == ["pip", "tox", "diff", "notes", "keep", "git"], lines
    assert lines[1] == "tox -e latest"
    # the paths are the ones tox writes (tox.ini: --claims-report={toxinidir}/reports/{envname})
    assert all("reports/latest" in c for c in lines[2:5]), lines
    assert "--claims-report={toxinidir}/reports/{envname}" in (ROOT / "tox.ini").read_text()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the checkout, a git repository of one commit, with one run kept under the
    label latest, a fresh run's report where ``tox -e latest`` writes it, and the notes
    where the suite looks for them, where they are beside this checkout (its report records
    that path)."""
    root = tmp_path / "checkout"
    for name in ("support", "claims"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns(
            "__pycache__", "history", "tests"))
    for name in ("pyproject.toml", "tox.ini", "README.md", "conftest.py"):
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(HISTORY / BASELINE, root / "claims" / "history" / BASELINE)
    if NOTES.is_dir():
        shutil.copytree(NOTES, tmp_path / "shared" / "notes")
    data = json.loads((HISTORY / FRESH / "claims.json").read_text())
    data["notes"]["paths"] = [str(tmp_path / "shared" / "notes" / n)
                              for n in ("lecture-11-notes.txt", "frameworks-summary.txt")]
    (root / "reports" / "latest").mkdir(parents=True)
    (root / "reports" / "latest" / "claims.json").write_text(json.dumps(data))
    shutil.copy2(HISTORY / FRESH / "claims.md", root / "reports" / "latest" / "claims.md")
    git = ["git", "-c", "user.name=lecturer", "-c", "user.email=lecturer@example.org"]
    (root / ".gitignore").write_text("/reports/\n__pycache__/\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the suite"]):
        subprocess.run(git + cmd, cwd=root, check=True, capture_output=True)
    return root


def _environment(tmp_path: Path) -> dict:
    """``python`` as the lecturer has it after ``pip install tox``: a virtual environment of
    this interpreter with no package but ``packaging`` (which tox brings), first on PATH."""
    import packaging
    venv = tmp_path / "lecturer"
    EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(venv)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    lib = tmp_path / "lecturer-lib"
    shutil.copytree(Path(packaging.__file__).parent, lib / "packaging")
    Path(purelib, "packaging.pth").write_text(str(lib) + "\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "COV_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
               GIT_AUTHOR_NAME="lecturer", GIT_AUTHOR_EMAIL="lecturer@example.org",
               GIT_COMMITTER_NAME="lecturer", GIT_COMMITTER_EMAIL="lecturer@example.org")
    return env


def test_the_watch_runs_line_by_line_with_the_python_that_has_tox(checkout, tmp_path):
    notes_or_skip()              # the page's `notes` line annotates them
    env = _environment(tmp_path)
    probe = subprocess.run(["python", "-c", "import packaging, importlib.util as u; print("
                            "[m for m in ('pytest', 'numpy', 'torch', 'jax', 'matplotlib') "
                            "if u.find_spec(m)])"], cwd=checkout, env=env, capture_output=True,
                           text=True)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stderr
    lines = block()
    # the two installs are the lecturer's (pip, then tox itself), stood in for here
    assert lines[0].startswith("python -m pip install") and lines[1] == "tox -e latest"
    # documented exit statuses: diff 1 when a claim changed, 0 when none did
    allowed = {"diff": (0, 1), "notes": (0,), "keep": (0,), "git": (0,)}
    seen = {}
    for line in lines[2:]:
        out = subprocess.run(["bash", "-c", line], cwd=checkout, env=env, capture_output=True,
                             text=True, timeout=300)
        what = line.split()[3] if line.startswith("python -m support") else line.split()[0]
        seen[what] = out
        assert out.returncode in allowed[what], f"{line}\n{out.stdout}\n{out.stderr}"
        assert "Traceback" not in out.stderr, f"{line}\n{out.stderr}"
    # diff: against the kept run, each change with its cause, the suite commits shown
    text = seen["diff"].stdout
    assert f"claims/history/{BASELINE}" in text and "by cause:" in text
    assert re.search(r"^  suite ", text, re.M), text[:2000]
    latest = checkout / "reports" / "latest"
    assert (latest / "diff.md").is_file() and (latest / "diff.html").is_file()
    # notes: found where the run found them, written beside the run, figures said not drawn
    assert "matplotlib is not installed" in seen["notes"].stdout
    for name in ("errata.md", "lecture.html", "sheet.html", "notes.json", "lecture.patch"):
        assert (latest / "notes" / name).is_file(), name
    # keep: the run kept under its label, the next diff's baseline; git commits it
    kept = [p for p in (checkout / "claims" / "history").iterdir() if p.name != BASELINE]
    assert len(kept) == 1 and re.fullmatch(r"\d{4}-\d\d-\d\d-latest-cpu2core", kept[0].name), kept
    assert "* selection: every default tier" in (kept[0] / "NOTE.md").read_text()
    log = subprocess.run(["git", "log", "--oneline", "-1"], cwd=checkout, env=env,
                         capture_output=True, text=True).stdout
    assert "latest: torch X, JAX Y" in log


def test_notes_says_in_one_line_what_is_wrong_with_its_inputs(checkout, tmp_path):
    """Each wrong input is refused before any notes are read: the notes are not needed."""
    env = _environment(tmp_path)
    cases = {
        "reports/missing": "reports/missing: no such file",
        "claims": "claims: holds no claims.json",
        "reports/latest --notes nowhere.txt": "--notes: no such file: nowhere.txt",
        "README.md": "README.md: not readable as JSON",
    }
    for args, said in cases.items():
        out = subprocess.run(["bash", "-c", f"python -m support notes {args}"], cwd=checkout,
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.strip().splitlines() == [out.stderr.strip()] and said in out.stderr, \
            (args, out.stderr)
