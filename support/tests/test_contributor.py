"""The contributor's path (claims/README.md), re-run as the guide writes it.

* The worked example (TAPE-07): the entry, test and control the guide shows are the files' own,
  and its three commands (``check-claim``, ``pytest --claim``, ``controls --claim``) pass in a
  copy of the checkout.
* A new sentence: in a copy of the checkout, the guide's ``new-claim`` command for a sentence the
  notes just gained assigns the next free ID (marked suite-added), pins that entry alone, and
  writes a stub that ``check-claim`` refuses; with the test body and the control written (and
  nothing else edited by hand), ``check-claim`` and ``pytest --claim`` pass.
* ``pin --claim ID --write`` rewrites one entry and leaves every other byte of the section files
  as it was, while a full pin would change others.
* ``check-claim`` fails a claim out of order, misplaced, unpinned or without a control.
* A fresh clone with no ``../shared`` beside it passes the lints that read ``../shared``,
  skipping with the reason only those that need the notes' text (and the catalogue comparison,
  which needs the catalogue).

The copies of the checkout lie in ``tmp_path``, with nothing beside them, so these tests read
no catalogue; the notes are copies made here (the lecture's, where it is beside the checkout,
with the new sentence added; otherwise a file holding the new sentence alone).
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from support.commands import claim_checks
from support.notes import locate as notes
from support.paths import ROOT
from support.rules import entries as reg
from support.rules import scaffold
from support.tests.test_notes import NEEDS_NOTES

GUIDE = ROOT / "claims" / "README.md"
SECTION = ROOT / "claims" / "lecture" / "08_pytorch_records_a_tape.toml"
MODULE = SECTION.with_name(f"test_{SECTION.stem}.py")
LECTURE = notes.default_paths()[0] if notes.default_paths() else None
NEEDS_CATALOGUE = "needs the catalogue"          # test_registry_lints.py's one such skip
# what a clone leaves out: .gitignore's paths, anywhere and at the top (and the checkout's
# own history, where asked)
_IGNORED = {".git", ".venv", "__pycache__", ".benchmarks", ".hypothesis", ".tox", "build",
            ".pytest_cache", "bench"}
_IGNORED_AT_TOP = {"reports", "data"}


def fresh_copy(dest: Path, history: bool = False) -> Path:
    """The working tree as a clone of it has it (``.gitignore``'s paths left out), at ``dest``."""
    def ignore(folder, names):
        out = {n for n in names if n in _IGNORED or n.endswith((".egg-info", ".pyc"))}
        if Path(folder) == ROOT:
            out |= _IGNORED_AT_TOP & set(names)
        if not history and Path(folder) == ROOT / "claims":
            out |= {"history"} & set(names)
        return out
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


def _env(copy: Path) -> dict:
    """This interpreter's environment for a command in ``copy``: its suite first on the path,
    no trace of the pytest session around it, no data named outside the copy."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "COV_")) and k != "CONCRETE_DATA"}
    env["PYTHONPATH"] = str(copy)
    return env


def _run(line: str, copy: Path, extra: list[str] = (), timeout: int = 300):
    """A command line of the guide, run in ``copy`` (``python`` is this interpreter)."""
    argv = shlex.split(line)
    argv = [sys.executable if argv[0] == "python" else argv[0], *argv[1:], *extra]
    return subprocess.run(argv, cwd=copy, env=_env(copy), capture_output=True, text=True,
                          timeout=timeout)


def _section(heading: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end != -1 else None]


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


# --------------------------------------------------------------------------- the worked example
def test_the_worked_example_shows_the_files_own_entry_test_and_control():
    section = _section("## A worked example: TAPE-07")
    toml_block, = _blocks(section, "toml")
    test_block, control_block = _blocks(section, "python")
    head, entry = toml_block.split("\n\n", 1)
    text = SECTION.read_text(encoding="utf-8")
    assert all(line in text.split("[[claim]]")[0].splitlines() for line in head.splitlines())
    assert entry in text, "the guide's TAPE-07 entry is not the section file's"
    module = MODULE.read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(module).body if isinstance(n, ast.FunctionDef)
              and n.name == "test_backward_twice_holds_exactly_twice_the_gradient")
    lines = module.splitlines()
    own = "\n".join(lines[fn.decorator_list[0].lineno - 1:fn.end_lineno]) + "\n"
    assert test_block == own, "the guide's TAPE-07 test is not the module's"
    shown = [line for line in control_block.splitlines() if not line.lstrip().startswith("...")]
    start = lines.index(shown[0])
    assert lines[start:start + len(shown)] == shown, "the guide's control is not the module's"


def _shared_beside(tmp_path: Path) -> Path:
    """A copy of the checkout with the folder beside the checkout (the notes, the catalogue)
    beside it too, where there is one, as CI has it."""
    copy = fresh_copy(tmp_path / "box" / "suite")
    if (ROOT.parent / "shared").is_dir():
        (tmp_path / "box" / "shared").symlink_to(ROOT.parent / "shared")
    return copy


def test_the_worked_example_runs_as_written(tmp_path):
    """The guide's three commands for TAPE-07, line by line, in a copy of the checkout."""
    copy = _shared_beside(tmp_path)
    lines, = (b.strip().splitlines() for b in _blocks(
        _section("## A worked example: TAPE-07"), "bash"))
    assert [w[3] if w[2] == "support" else w[2] for w in map(str.split, lines)] == [
        "check-claim", "pytest", "controls"], lines
    check = _run(lines[0], copy)
    assert check.returncode == 0 and "-> passes" in check.stdout, check.stdout + check.stderr
    run = _run(lines[1], copy, ["-n", "0", "-p", "no:randomly"], timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report = json.loads((copy / "reports" / "claims.json").read_text())
    verdict = {c["id"]: c["verdict"] for c in report["claims"]}["TAPE-07"]
    assert verdict == "holds", verdict
    controls = _run(lines[2], copy, ["--workers", "0"], timeout=600)
    assert controls.returncode == 0, controls.stdout[-3000:] + controls.stderr[-2000:]
    found = json.loads((copy / "reports" / "controls" / "controls.json").read_text())
    outcomes = {r["name"]: r["results"]["TAPE-07"]["outcome"] for r in found["controls"]
                if "TAPE-07" in r["results"]}
    assert outcomes and set(outcomes.values()) <= {"red", "green", "level"}, outcomes


# --------------------------------------------------------------------------- a new sentence
def _new_sentence() -> tuple[str, str]:
    """(the command, the sentence the notes gain) of the guide's "A new claim"."""
    section = _section("## A new claim")
    command, = (b.strip() for b in _blocks(section, "bash"))
    sentence = re.search(r'\*"(.+?)"\*', section, re.S).group(1)
    return command, " ".join(sentence.split())


def _notes_with(sentence: str, line: int, dest: Path) -> Path:
    """The lecture (where beside the checkout) with ``sentence`` opening the paragraph of
    ``line``; else a file holding that sentence alone, on that line."""
    text = LECTURE.read_text(encoding="utf-8") if LECTURE else "\n" * (line + 1)
    lines = text.split("\n")
    lines[line - 1] = f"{sentence} {lines[line - 1]}".strip()
    dest.write_text("\n".join(lines), encoding="utf-8")
    return dest


def _stubs_written(module: Path, cid: str) -> None:
    """What the contributor writes by hand: the test's measurement and the control."""
    text = module.read_text(encoding="utf-8")
    body = ('    w = torch.ones(3, requires_grad=True)\n'
            '    (w * w).sum().backward()\n'
            '    w.grad.zero_()\n'
            '    claim.record("largest entry after zero_", w.grad.abs().max().item())\n'
            '    assert torch.count_nonzero(w.grad) == 0\n')
    text, n = re.subn(rf'    pytest\.skip\("{cid} is a stub.*?\)\n', lambda _: body, text,
                      flags=re.S)
    assert n == 1
    tag = cid.lower().replace("-", "_")
    text, n = re.subn(
        rf'@control\("{cid}", what=.*?\n(def {tag}_sentence_made_false\(mp\):\n    """.*?"""\n)',
        lambda m: f'@control("{cid}", what="Tensor.zero_ halves each entry instead of setting '
                  f'it to 0")\n{m.group(1)}    mp.setattr(torch.Tensor, "zero_", lambda self: '
                  'self.mul_(0.5))\n', text, flags=re.S)
    assert n == 1
    module.write_text(text, encoding="utf-8")


def test_a_new_sentence_takes_the_contributors_path(tmp_path):
    copy = fresh_copy(tmp_path / "suite")
    command, sentence = _new_sentence()
    line = int(re.search(r"--source L:(\d+)", command).group(1))
    lecture = _notes_with(sentence, line, tmp_path / "lecture.txt")
    notes_arg = ["--notes", f"lecture={lecture}"]
    registry = reg.load_entries()
    expected = scaffold.next_id("TAPE", set(registry))
    before = {p: p.read_bytes() for p in (copy / "claims").rglob("*") if p.is_file()}

    made = _run(command, copy, notes_arg)
    assert made.returncode == 0, made.stdout + made.stderr
    cid = made.stdout.split()[0]
    assert cid == expected and f"{cid} (the next free TAPE ID, marked suite-added" in made.stdout
    assert expected in _section("## A new claim"), "the guide names another ID"
    changed = {p for p in before if p.read_bytes() != before[p]}
    toml, module = copy / SECTION.relative_to(ROOT), copy / MODULE.relative_to(ROOT)
    assert changed == {toml, module}, changed
    # the section file gained one entry, with the fingerprint of the sentence, and lost nothing
    entry = re.search(rf'(?ms)^\[\[claim\]\]\nid = "{cid}"\n.*?\n\n', toml.read_text()).group(0)
    assert toml.read_text().replace(entry, "") == before[toml].decode()
    words = notes.words(sentence)
    assert f'fingerprint = "{notes.fingerprint(words)}"' in entry, entry
    assert f'source = "L:{line} (suite-added)"' in entry
    paraphrase = re.search(r'--paraphrase "([^"]+)"', command).group(1)
    name = scaffold.stub_name(paraphrase)
    assert f"def {name}(claim):" in module.read_text()

    stub = _run(f"python -m support check-claim {cid}", copy, notes_arg)
    assert stub.returncode == 1, stub.stdout
    assert f"{name} is still new-claim's stub" in stub.stdout
    assert "perturbs nothing yet" in stub.stdout

    _stubs_written(module, cid)
    checked = _run(f"python -m support check-claim {cid}", copy, notes_arg)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "fingerprint  ok" in checked.stdout and "control      ok" in checked.stdout
    run = _run(f"python -m pytest --claim {cid}", copy, ["-n", "0", "-p", "no:randomly"],
               timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report = json.loads((copy / "reports" / "claims.json").read_text())
    assert {c["id"]: c["verdict"] for c in report["claims"]}[cid] == "holds"


def test_a_line_with_no_sentence_is_refused_and_nothing_is_written(tmp_path):
    copy = fresh_copy(tmp_path / "suite")
    empty = tmp_path / "lecture.txt"
    empty.write_text("\n" * 120, encoding="utf-8")
    before = {p: p.read_bytes() for p in (copy / "claims").rglob("*.to*") if p.is_file()}
    out = _run('python -m support new-claim lecture/08 --source L:89 --paraphrase p', copy,
               ["--notes", f"lecture={empty}"])
    assert out.returncode == 2 and "no sentence on line(s) L:89" in out.stdout, out.stdout
    assert all(p.read_bytes() == b for p, b in before.items())


def test_without_the_notes_the_entry_is_written_unpinned_and_says_how_to_pin_it(tmp_path):
    copy = fresh_copy(tmp_path / "suite")
    out = _run('python -m support new-claim lecture/08 --source L:89 --id TAPE-99 '
               '--paraphrase p', copy)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not pinned: no notes" in out.stdout and "pin --claim TAPE-99 --write" in out.stdout
    # the catalogue is not beside the copy: an ID given is taken as the catalogue's
    assert 'source = "L:89"\nparaphrase' in (copy / SECTION.relative_to(ROOT)).read_text()
    check = _run("python -m support check-claim TAPE-99", copy)
    assert check.returncode == 1 and "its entry holds none: python -m support pin --claim " \
        "TAPE-99 --write" in check.stdout, check.stdout


# --------------------------------------------------------------------------- pin one claim
def test_pinning_one_claim_leaves_every_other_entry_as_it_was(tmp_path):
    if LECTURE is None:
        pytest.skip(f"{NEEDS_NOTES}: the CI copies are not beside the checkout "
                    "(../shared/notes)")
    copy = fresh_copy(tmp_path / "suite")
    paths = [f"--notes={p}" for p in notes.default_paths()]
    listed = _run("python -m support pin", copy, paths)
    would = re.findall(r"(?m)^  ([A-Z]+-\d\d) ", listed.stdout)
    toml = copy / SECTION.relative_to(ROOT)
    before = {p: p.read_bytes() for p in (copy / "claims").rglob("*.toml")}
    toml.write_text(re.sub(r'(id = "TAPE-07"\nsource = "L:89"\n)fingerprint = "[0-9a-f]+"\n',
                           r"\1", toml.read_text()))
    out = _run("python -m support pin --claim TAPE-07 --write", copy, paths)
    assert out.returncode == 0 and "1 fingerprints written" in out.stdout, out.stdout
    assert {p for p in before if p.read_bytes() != before[p]} == set(), \
        f"pinning TAPE-07 changed other bytes (a full pin would change {would})"


# --------------------------------------------------------------------------- pieces
@pytest.mark.parametrize("paraphrase,name", [
    ("model.train()/model.eval() switch dropout", "test_model_train_or_model_eval_switch_dropout"),
    ("30/4 = 7.5 and the tree wins by 0.43 +/- 0.09",
     "test_30_over_4_equals_7_5_and_the_tree_wins_by_0_43_plus_minus_0_09"),
    ("Multi-age mixes hold 76% of rows; a -0.04 gap",
     "test_multi_age_mixes_hold_76_percent_of_rows_a_minus_0_04_gap"),
    ("loss >= 1e-3 -> fails, float32's eps ~ 1e-7",
     "test_loss_at_least_1e_3_to_fails_float32s_eps_about_1e_7"),
])
def test_a_stub_is_named_after_every_mark_of_its_paraphrase(paraphrase, name):
    assert scaffold.stub_name(paraphrase) == name


def test_the_next_id_is_past_every_id_taken_and_a_tie_of_prefixes_is_refused(tmp_path):
    assert scaffold.next_id("TAPE", {"TAPE-03", "TAPE-11", "JIT-40"}) == "TAPE-12"
    assert scaffold.next_id("NEW", set()) == "NEW-01"
    with pytest.raises(scaffold.ScaffoldError, match="no free ID"):
        scaffold.next_id("AB", {"AB-99"})
    (tmp_path / "01_s.toml").write_text('[[claim]]\nid = "AB-01"\n[[claim]]\nid = "CD-02"\n')
    with pytest.raises(scaffold.ScaffoldError, match="--prefix"):
        scaffold.section_prefix(tmp_path / "01_s.toml")


def _tiny(root: Path, entry: str = "", test: str = "") -> Path:
    """A checkout of one section: AB-01 on L:5 with its test and control, AB-02 on L:9."""
    (root / "claims" / "lecture").mkdir(parents=True)
    (root / "claims" / "lecture" / "01_s.toml").write_text(
        'document = "lecture"\nsection = "S"\nlines = "L:1-20"\n\n'
        '[[claim]]\nid = "AB-01"\nsource = "L:5"\nfingerprint = "' + "0" * 24 + '"\n'
        'paraphrase = "p"\nkind = "a"\ntier = "fast"\n'
        'figures = [{ name = "n", stated = 3, tol = "exact" }]\n\n' + (entry or
        '[[claim]]\nid = "AB-02"\nsource = "L:9"\nfingerprint = "' + "0" * 24 + '"\n'
        'paraphrase = "q"\nkind = "h"\ntier = "fast"\nstatus = "not-testable"\n'
        'reason = "It is a matter of taste, which no test can decide."\n'))
    (root / "claims" / "lecture" / "test_01_s.py").write_text(
        "import pytest\nfrom support.rules.controls import control\n\n\n"
        + (test or '@pytest.mark.claim("AB-01")\ndef test_n(claim):\n    claim.check("n", 3)\n\n\n'
                   '@control("AB-01", what="three becomes four in the library")\n'
                   'def four(mp):\n    mp.setattr("math.pi", 4)\n'))
    return root


def _fails(root: Path, cid: str = "AB-01") -> dict[str, list[str]]:
    found = claim_checks.check_claims([cid], root=root, catalogue=root / "none.md")[cid]
    return {c: [f.text for f in found if f.check == c and f.status == "FAIL"]
            for c in claim_checks.CHECKS}


def test_check_claim_passes_a_claim_in_place(tmp_path):
    assert not any(_fails(_tiny(tmp_path)).values())


@pytest.mark.parametrize("case,check,said", [
    ("entry out of order", "order", "out of order"),
    ("test in another section", "placement", "its section"),
    ("no control", "control", "no negative control"),
    ("unpinned", "fingerprint", "pin --claim AB-01 --write"),
    ("figure unchecked", "entry", "no test checks it"),
])
def test_check_claim_fails_what_the_lints_would(tmp_path, case, check, said):
    root = _tiny(tmp_path)
    toml, test = root / "claims/lecture/01_s.toml", root / "claims/lecture/test_01_s.py"
    if case == "entry out of order":
        toml.write_text(toml.read_text().replace('source = "L:9"', 'source = "L:2"'))
    elif case == "test in another section":
        (root / "claims/lecture/02_t.toml").write_text(
            'document = "lecture"\nsection = "T"\nlines = "L:30-40"\n\n[[claim]]\nid = "CD-01"\n'
            'source = "L:30"\nparaphrase = "r"\nkind = "a"\ntier = "fast"\nstatus = "pending"\n')
        (root / "claims/lecture/test_02_t.py").write_text(
            'import pytest\n\n\n@pytest.mark.claim("AB-01")\ndef test_elsewhere(claim):\n'
            '    claim.check("n", 3)\n')
    elif case == "no control":
        test.write_text(test.read_text().split("@control")[0])
    elif case == "unpinned":
        toml.write_text(toml.read_text().replace('fingerprint = "' + "0" * 24 + '"\n', "", 1))
    elif case == "figure unchecked":
        test.write_text(test.read_text().replace('claim.check("n", 3)', 'claim.record("m", 3)'))
    fails = _fails(root)
    assert any(said in text for text in fails[check]), fails
    assert not any(v for k, v in fails.items() if k != check), fails


# --------------------------------------------------------------------------- without ../shared
LINTS_THAT_READ_SHARED = ("test_registry_lints.py", "test_claims_tree.py", "test_notes.py",
                          "test_errata.py", "test_after_a_release.py")


def test_a_fresh_clone_without_shared_passes_the_lints_skipping_only_what_needs_the_notes(
        tmp_path):
    """The lints that read ``../shared`` (the notes, the catalogue), run in a clone with
    nothing beside it: every one passes or skips, and each skip says it needs the notes' text
    (or, for the catalogue comparison, the catalogue)."""
    copy = fresh_copy(tmp_path / "clone" / "suite", history=True)
    assert not (copy.parent / "shared").exists()
    xml = tmp_path / "lints.xml"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", *[f"support/tests/{m}" for m in LINTS_THAT_READ_SHARED],
         "-q", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    cases = ET.parse(xml).getroot().iter("testcase")
    skipped = {f"{c.get('classname')}::{c.get('name')}": c.find("skipped").get("message", "")
               for c in cases if c.find("skipped") is not None}
    other = {t: why for t, why in skipped.items()
             if NEEDS_NOTES not in why and NEEDS_CATALOGUE not in why}
    assert not other, f"skipped for another reason than the notes' text: {other}"
    catalogue = [t for t, why in skipped.items() if NEEDS_CATALOGUE in why]
    assert [t.rsplit("::", 1)[1] for t in catalogue] == [
        "test_registry_has_one_entry_per_catalogue_id"]
    assert len(skipped) < 40 and "passed" in out.stdout, out.stdout[-500:]
