"""The errata, the patch of the notes, and kept GPU evidence reaching the reader.

On copies of the CI notes (``../shared/notes``; skipped with the reason where they are
absent): every correction written in claims/expectations.toml quotes words of its claim's
sentence; applied to a copy, every claim is still located, the corrected sentences as
``changed``; the patch ``python -m support notes --patch`` writes applies with ``patch``
(or ``git apply``). The errata read as a list of corrections, not a log. A kept run made
here for the test (never one in claims/history/) stands for a GPU machine's: its verdicts
reach the terminal summary, claims.md, the errata and the annotated page, labelled as
that run's.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.notes import errata, locate as notes, pages
from support.reports import kept as kept_runs, report as report_mod
from support.rules.expectations import load_expectations
from support.tests.test_html_report import _browser, _render
from support.tests.test_notes import FILES, NOTES, _report, _variant

MAX_CELL = 400          # "no cell longer than a few sentences"


@pytest.fixture(scope="module")
def registry():
    from support.rules.registry import load_registry
    return load_registry()


@pytest.fixture(scope="module")
def expectations(registry):
    return load_expectations(registry=registry)


@pytest.fixture(scope="module")
def docs(registry):
    paths = [NOTES / name for name in FILES.values()]
    absent = [str(p) for p in paths if not p.exists()]
    if absent:
        pytest.skip(f"the CI copies of the notes are not beside the checkout: {', '.join(absent)}")
    return notes.read_all(registry, paths)


@pytest.fixture(scope="module")
def built(registry, docs, expectations, tmp_path_factory):
    out = tmp_path_factory.mktemp("errata")
    report = _report(registry, expectations)
    res = pages.build(report, [NOTES / name for name in FILES.values()], out, registry=registry,
                      figures=False, patch=True, history=tmp_path_factory.mktemp("none"),
                      expectations=expectations)
    return report, res, out


def _copy_notes(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES.values():
        (dest / name).write_text((NOTES / name).read_text(encoding="utf-8"), encoding="utf-8")
    return dest


def _located(registry, folder: Path) -> dict:
    return {loc.id: loc for loc in notes.locate_all(
        registry, [f"{doc}={folder / name}" for doc, name in FILES.items()])}


def _claims_on(registry, docs, sentences: set) -> set[str]:
    """The claims whose pinned sentence is one of ``sentences`` ({(document, index)})."""
    return {c.id for c in registry.values() for d, i in sentences
            if c.document == d and docs[d].sentences[i].exact == c.fingerprint[:8]}


# --------------------------------------------------------------------------- the corrections
def test_every_correction_quotes_words_of_its_claims_sentence(registry, docs, expectations):
    """Each erratum's quote is in its claim's sentence, or on a line its catalogue reference
    names (a caption, a table cell), so the patch can make it."""
    locs = {loc.id: loc for loc in notes.locate_docs(registry, docs)}
    lost = [e.label() for e in expectations if e.erratum is not None
            and errata.find_quote(docs[registry[e.id].document], locs[e.id],
                                  registry[e.id].source, e.erratum.quote) is None]
    assert not lost, f"quoted words not found in the notes: {lost}"


def _every_correction(registry, docs, expectations) -> list[errata.Correction]:
    """Every erratum of the file placed in the notes, whatever versions it is keyed by."""
    locs = {loc.id: loc for loc in notes.locate_docs(registry, docs)}
    out = []
    for e in expectations:
        if e.erratum is None:
            continue
        corr = errata.Correction({"id": e.id, "document": registry[e.id].document,
                                  "source": registry[e.id].source}, e.verdict, [], [e], e.erratum)
        errata._place(corr, docs, locs)
        out.append(corr)
    return out


def test_every_correction_applied_still_locates_every_claim(registry, docs, expectations,
                                                            tmp_path):
    corrs = _every_correction(registry, docs, expectations)
    folder = tmp_path / "corrected"
    folder.mkdir()
    for doc, name in FILES.items():
        text, problems = errata.corrected_text(docs[doc].text, [c for c in corrs
                                                                 if c.document == doc])
        assert not problems
        (folder / name).write_text(text, encoding="utf-8")
    locs = _located(registry, folder)
    edited = _claims_on(registry, docs, {(c.document, c.sentence) for c in corrs})
    wrong = {cid: (loc.status, loc.line) for cid, loc in locs.items()
             if loc.status != ("changed" if cid in edited else "found")}
    assert not wrong and len(edited) >= 20, wrong
    before = {loc.id: loc.line for loc in notes.locate_docs(registry, docs)}
    assert all(locs[cid].line == before[cid] for cid in edited)    # edited in place


def test_a_correction_keeps_the_wrapping_of_its_paragraph():
    matched = "four orders\n   of magnitude"        # the break stays at its word gap
    assert errata._rewrapped(matched, "three and a half orders of magnitude") == \
        "three and\n   a half orders of magnitude"
    assert errata._rewrapped("a\nb c d", "x") == "x"
    assert errata._rewrapped("four orders", "three orders") == "three orders"
    diff = errata.unified_diff("a\nb\nc", "a\nb\nd", "x.txt")
    assert diff.endswith("-c\n\\ No newline at end of file\n+d\n\\ No newline at end of file\n")


# --------------------------------------------------------------------------- the errata
def test_the_errata_are_corrections_not_a_log(built, expectations):
    report, res, out = built
    md = (out / "errata.md").read_text()
    known = {c["id"] for c in report["claims"] if c["expected"]
             and c["verdict"] in errata.CORRECT}
    assert len(known) > 15
    rows = [line for line in md.splitlines() if re.match(r"^\| \d+ \|", line)]
    listed = {cid for line in rows for cid in re.findall(r"\b([A-Z]+-\d\d) (?:fails|drift)\b", line)}
    assert listed == known
    cells = [cell for line in rows for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
    assert max(len(c) for c in cells) <= MAX_CELL, max(cells, key=len)
    assert "none written yet" not in md                 # every known verdict has its correction
    for text in ("assert np.float64", "object at 0x", "half a unit in its last digit"):
        assert text not in md, text
    assert not re.search(r"\w\.\.\.(?: \||$)", md, re.M)       # nothing cut mid-word
    assert md.count("Measured with ") == 1 and "torch" in md.split("\n\n")[1]
    assert "/" not in md.splitlines()[0]                # the notes named by file name
    # the figure shown as measured, at a precision that shows the difference
    assert "orders worse than autodiff 3.50 (notes: 4)" in md
    # the full reason, never cut
    for e in expectations:
        if e.id in known and e.applies(e.variant or ""):
            assert e.reason in md.replace("\\|", "|"), e.label()


def _apply(patch: Path, folder: Path) -> None:
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "-i", str(patch)]
    elif shutil.which("git"):
        cmd = ["git", "apply", str(patch)]
    else:
        pytest.skip("neither patch nor git is installed: the patch cannot be applied")
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_patch_applies_and_the_patched_notes_locate_every_claim(built, registry, docs,
                                                                    tmp_path):
    report, res, out = built
    assert {p.name for p in res["patches"]} == {f"{d}.patch" for d in FILES}
    assert not res["patch_problems"]
    folder = _copy_notes(tmp_path / "notes")
    for p in res["patches"]:
        _apply(p, folder)
    locs = _located(registry, folder)
    applied = [c for c in res["corrections"] if c.span]
    edited = _claims_on(registry, docs, {(c.document, c.sentence) for c in applied})
    assert {cid for cid, loc in locs.items() if loc.status == "changed"} == edited
    assert {loc.status for cid, loc in locs.items() if cid not in edited} == {"found"}
    # the corrected words are there, one quote fewer (the same words may stand elsewhere)
    text = (folder / FILES["lecture"]).read_text(encoding="utf-8")
    ad14 = next(c for c in applied if c.id == "AD-14")
    assert ad14.erratum.correction in text
    assert text.count(ad14.erratum.quote) == docs["lecture"].text.count(ad14.erratum.quote) - 1


def test_a_patch_that_is_not_the_notes_is_refused_by_patch(built, tmp_path):
    """Negative control of the test above: the same patch on edited notes does not apply."""
    if not shutil.which("patch"):
        pytest.skip("patch is not installed")
    report, res, out = built
    folder = _copy_notes(tmp_path / "other")
    lecture = folder / FILES["lecture"]
    lecture.write_text(re.sub(r"orders of magnitude", "orders", lecture.read_text()))
    proc = subprocess.run(["patch", "-p1", "--dry-run", "--forward", "-i",
                           str(out / "lecture.patch")], cwd=folder, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0


# --------------------------------------------------------------------------- kept GPU evidence
GPU = {"device": "cuda", "type": "cuda", "framework": "torch", "name": "NVIDIA H200",
       "cuda": "12.8", "torch": "2.13.0+cu128"}


def _kept_run(history: Path, folder: str, devices: list[dict], claims: dict[str, str]) -> None:
    """A run kept in ``history`` (a folder made for the test): ``claims`` {id: verdict},
    each run on the device of its run."""
    dev = devices[-1]["device"]
    data = {"schema": 2, "environment": {"python": "3.11", "versions": {
        "torch": "2.13.0+cu128", "jax": "0.10.2"}, "devices": devices},
        "summary": {}, "claims": [
            {"id": cid, "document": "lecture", "verdict": v, "reason": "",
             "variants": [dict(_variant(0, v), devices=[dev])]} for cid, v in claims.items()]}
    (history / folder).mkdir(parents=True)
    (history / folder / "claims.json").write_text(json.dumps(data))


@pytest.fixture()
def history(tmp_path):
    h = tmp_path / "history"
    cpu = {"device": "cpu", "type": "cpu", "name": "AMD EPYC"}
    _kept_run(h, "2026-12-01-gpu-run-h200", [cpu, GPU],
              {"DEV-04": "holds", "AMP-10": "drift", "DEV-01": "holds", "TAPE-07": "fails"})
    # an older GPU run, and a newer CPU-only run: neither speaks for these claims
    _kept_run(h, "2026-11-20-gpu-run-h200", [cpu, GPU], {"DEV-04": "fails"})
    _kept_run(h, "2026-12-05-latest-cpu2core", [cpu], {"DEV-04": "holds", "AMP-10": "holds"})
    return h


HERE = {"DEV-04": "skipped", "AMP-10": "partial", "DEV-01": "partial", "TAPE-07": "holds"}


def test_a_kept_gpu_run_speaks_for_the_claims_skipped_here(registry, history):
    report = _report(registry, verdict_of=HERE)
    kept = kept_runs.evidence(report, history)
    assert set(kept) == {"DEV-04", "AMP-10", "DEV-01"}         # TAPE-07 held here: not shown
    assert kept["DEV-04"].text() == ("holds on NVIDIA H200 with torch 2.13.0+cu128 (CUDA 12.8), "
                                     "kept run of 2026-12-01 (2026-12-01-gpu-run-h200)")
    assert kept["AMP-10"].verdict == "drift"
    assert kept_runs.evidence(report, history / "nothing-here") == {}


class _Terminal:
    def __init__(self):
        self.lines = []

    def section(self, title, sep="="):
        self.lines.append(f"== {title}")

    def write_line(self, line, **_markup):
        self.lines.append(line)


def test_the_terminal_and_claims_md_show_the_kept_verdict_as_that_runs(registry, history):
    report = _report(registry, verdict_of=HERE)
    report.update(expected_verdicts=0, unexpected=[], stale_expectations=[])
    tr = _Terminal()
    report_mod.terminal(tr, report, [], history=history)
    out = "\n".join(tr.lines)
    assert ("DEV-04    skipped here; holds on NVIDIA H200 with torch 2.13.0+cu128 (CUDA 12.8), "
            "kept run of 2026-12-01") in out
    assert re.search(r"^AMP-10 +partial ", out, re.M)         # this run's verdict stays its own
    assert "AMP-10    partial here; drift on NVIDIA H200" in out
    md = report_mod.markdown(report, kept_runs.evidence(report, history))
    assert "* DEV-04: holds on NVIDIA H200 with torch 2.13.0+cu128 (CUDA 12.8), kept run of " \
           "2026-12-01" in md
    assert re.search(r"\| skipped \(kept run: holds on NVIDIA H200", md)
    tr2 = _Terminal()                                          # no kept run: no such line
    report_mod.terminal(tr2, report, [], history=history / "nothing-here")
    assert not any("kept run" in line for line in tr2.lines)


def test_the_errata_and_the_page_show_the_kept_verdict_as_that_runs(registry, docs, history,
                                                                     tmp_path):
    report = _report(registry, verdict_of=HERE)
    res = pages.build(report, [NOTES / name for name in FILES.values()], tmp_path / "out",
                      registry=registry, figures=False, history=history)
    md = res["errata"].read_text()
    undecided = md[md.index("## Not decided in this run"):]
    assert re.search(r"\| DEV-04 \| skipped \| .* \| holds on NVIDIA H200 with torch "
                     r"2\.13\.0\+cu128 \(CUDA 12\.8\), kept run of 2026-12-01", undecided)
    assert re.search(r"\| AMP-10 \| partial \| .* \| drift on NVIDIA H200", undecided)
    lecture = (tmp_path / "out" / "lecture.html").read_text()
    assert "kept run: drift</span>" in lecture and "(not this run's verdict)" in lecture
    browser = _browser()
    attrs, console = _render(browser, tmp_path / "out" / "lecture.html", tmp_path / "profile")
    assert attrs["errors"] == "" and console == []
    assert set(attrs["kept"].split(",")) == {"AMP-10:kept run: drift", "DEV-01:kept run: holds"}
    counts = dict(kv.split(":") for kv in attrs["counts"].split(","))
    assert counts == {v: str(n) for v, n in report["summary"].items() if n}  # this run's counts
