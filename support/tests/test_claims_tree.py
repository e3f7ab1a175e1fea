"""The tree of claims/ is the notes' table of contents.

One folder per document; one pair of files per section, numbered in the document's order:
``claims/lecture/08_pytorch_records_a_tape.toml`` (the section's claims, in the order of their
sentences) beside ``claims/lecture/test_08_pytorch_records_a_tape.py`` (their tests). The
sheet's "Key ideas" is one such pair per bullet, numbered within it
(``01_key_ideas_07_modes``). A claim's tests live in its section's module, or in the one
module its entry names with the reason (``module``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import CLAIMS, ROOT
from support.rules import registry as reg
from support.rules import sources
from support.rules.scaffold import first_line


@pytest.fixture(scope="module")
def registry():
    return reg.load_registry()


def sections_out_of_order(files: list[Path]) -> list[str]:
    """Section files whose names, in order, do not follow the lines they cover (per folder)."""
    out = []
    for folder in sorted({p.parent for p in files}):
        mine = sorted((p for p in files if p.parent == folder), key=lambda p: p.stem)
        heads = [reg.tomllib.loads(p.read_text()) for p in mine]
        starts = [first_line(h["lines"], h["document"]) for h in heads]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            out.append(f"{folder.name}: {[p.stem for p in mine]} cover lines "
                       f"starting {starts}")
    return out


def test_the_section_files_follow_the_documents_order():
    files = reg.registry_files()
    assert len(files) >= 32
    assert not sections_out_of_order(files)


def test_the_order_lint_sees_a_section_out_of_place(tmp_path):
    for stem, lines in (("01_a", "L:50-60"), ("02_b", "L:10-20")):
        (tmp_path / f"{stem}.toml").write_text(f'document = "lecture"\nlines = "{lines}"\n')
    assert sections_out_of_order(sorted(tmp_path.glob("*.toml")))


def test_every_section_file_pairs_with_its_test_module_and_nothing_else_lives_there(registry):
    tomls = {p.with_name(f"test_{p.stem}.py") for p in reg.registry_files()}
    modules = {p for doc in reg.DOCUMENTS for p in (CLAIMS / doc).rglob("test_*.py")}
    assert not modules - tomls, f"test modules with no section file: {sorted(modules - tomls)}"
    tested = {Path(ROOT / c.test_module) for c in registry.values() if c.status == "testable"}
    assert not tested - modules, f"sections with claims to test and no module: {tested - modules}"
    others = [p for doc in reg.DOCUMENTS for p in (CLAIMS / doc).rglob("*")
              if p.is_file() and p.suffix in (".py", ".toml") and p not in modules
              and p.name != "__init__.py" and not reg.SECTION_FILE.match(p.stem)]
    assert not others, f"files that are not a section's pair: {others}"


def test_each_files_claims_sit_in_the_order_of_their_sentences():
    bad = []
    for path in reg.registry_files():
        data = reg.tomllib.loads(path.read_text())
        lines = [first_line(c["source"], data["document"]) for c in data["claim"]]
        if lines != sorted(lines):
            bad.append(f"{path.relative_to(ROOT)}: {[c['id'] for c in data['claim']]} at {lines}")
    assert not bad, "claims out of the order of their sentences:\n  " + "\n  ".join(bad)


def misplaced(registry, markers) -> list[str]:
    """Tests that live outside their claim's section module (and the module it names)."""
    out = []
    for cid, where in markers.items():
        if cid not in registry:
            continue
        allowed = registry[cid].test_modules()
        out += [f"{cid}: {w} (its section: {allowed[0]})" for w in where
                if w.split("::")[0] not in allowed]
    return out


def test_every_claim_is_tested_in_its_sections_module(registry):
    markers = sources.static_claim_markers()
    bad = misplaced(registry, markers)
    assert not bad, "\n  ".join(["claim tests outside their section's module:"] + bad)
    # the module an entry names holds a test of it: the exception is still needed
    stale = [cid for cid, c in registry.items() if c.module
             and not any(w.startswith(c.module["path"] + "::") for w in markers.get(cid, []))]
    assert not stale, f"entries naming a module that holds none of their tests: {stale}"


def test_the_placement_lint_sees_a_test_in_another_section(registry):
    markers = {"TAPE-07": ["claims/lecture/test_13_tensors_shapes_and_dtypes.py::test_x"]}
    assert misplaced(registry, markers) and not misplaced(
        registry, {"TAPE-07": [registry["TAPE-07"].test_module + "::test_x"]})


def _copy(tmp_path: Path) -> Path:
    """The checkout without its history, reports and environments."""
    dest = tmp_path / "suite"
    ignore = shutil.ignore_patterns(".git", ".venv", "reports", "history", "__pycache__",
                                    ".hypothesis", ".tox", "*.egg-info")
    for name in ("claims", "support"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def test_new_claim_writes_an_entry_and_a_passing_stub_in_sentence_order(tmp_path):
    """``python -m support new-claim`` in a copy of the suite: the entry lands between the
    claims of the sentences around it, the stub between their tests, and the stub runs (it
    skips, saying it is a stub) while the registry still loads."""
    suite = _copy(tmp_path)
    cmd = [sys.executable, "-m", "support", "new-claim", "PyTorch records a tape", "--id",
           "TAPE-99", "--source", "L:90", "--paraphrase", "The tape keeps one node per op."]
    out = subprocess.run(cmd, cwd=suite, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    toml = (suite / "claims/lecture/08_pytorch_records_a_tape.toml").read_text()
    ids = re.findall(r'(?m)^id = "([^"]+)"', toml)
    lines = [first_line(s, "lecture") for s in re.findall(r'(?m)^source = "([^"]+)"', toml)]
    at = ids.index("TAPE-99")
    assert lines[at - 1] <= 90 < lines[at + 1], (ids, lines)
    module = (suite / "claims/lecture/test_08_pytorch_records_a_tape.py").read_text()
    assert module.index('claim("TAPE-99")') < module.index(f'claim("{ids[at + 1]}")')
    assert 'control("TAPE-99"' in module
    run = subprocess.run([sys.executable, "-m", "pytest", "--claim", "TAPE-99", "-q", "-n", "0", "-p",
                          "no:randomly", f"--claims-report={tmp_path / 'report'}"],
                         cwd=suite, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "1 skipped" in run.stdout, run.stdout[-3000:]
    again = subprocess.run(cmd, cwd=suite, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "exists already" in again.stdout
