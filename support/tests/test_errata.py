"""The errata, the patch of the notes, and kept GPU evidence reaching the reader.

On copies of the CI notes (``../shared/notes``; skipped with the reason where they are
absent): every span of every correction written in claims/expectations.toml quotes words of
its claim's sentence (or of the lines the span names), and a quote that is not there is
refused; applied to a copy, every claim is still located, the corrected sentences as
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
from support.notes import patch as notes_patch
from support.reports import kept as kept_runs, report as report_mod
from support.rules.expectations import Erratum, Expectation, Span, load_expectations
from support.rules.entries import EntryError
from support.tests.test_html_report import _browser, _render
from support.tests.test_notes import FILES, NOTES, _report, _variant, notes_or_skip

MAX_CELL = 400          # "no cell longer than a few sentences"


@pytest.fixture(scope="module")
def registry():
    from support.rules.entries import load_entries
    return load_entries()


@pytest.fixture(scope="module")
def expectations(registry):
    return load_expectations(registry=registry)


@pytest.fixture(scope="module")
def docs(registry):
    return notes.read_all(registry, list(notes_or_skip().values()))


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


# --------------------------------------------------------------------------- the erratum's form
_FAILS = '[[expect]]\nid = "JIT-18"\nverdict = "fails"\nmeasurement = "eager/jit"\nreason = "r"\n'


def _load(tmp_path, registry, erratum: str):
    (tmp_path / "e.toml").write_text(_FAILS + erratum + "\n", encoding="utf-8")
    return load_expectations(tmp_path / "e.toml", registry)


def test_an_erratum_quotes_one_span_or_several(registry, tmp_path):
    one = _load(tmp_path, registry, 'erratum = { quote = "a", correction = "b", finding = "f" }')
    assert one[0].erratum == Erratum((Span("a", "b"),), "f")
    several = _load(tmp_path, registry, 'erratum = { finding = "f", show = "eager/jit", spans = '
                    '[{ quote = "a", correction = "b" }, { quote = "c d", correction = "e", '
                    'source = "L:183" }] }')
    assert several[0].erratum == Erratum((Span("a", "b"), Span("c d", "e", "L:183")), "f",
                                         ("eager/jit",))


@pytest.mark.parametrize("erratum,message", [
    ('erratum = { finding = "f", spans = [] }', "spans is a list of one or more"),
    ('erratum = { finding = "f", spans = [{ quote = "a" }] }', "span 1: the erratum needs correction"),
    ('erratum = { finding = "f", spans = ["a -> b"] }', "a span is a table"),
    ('erratum = { finding = "f", spans = [{ quote = "a", correction = "b", fix = "c" }] }',
     "unknown span field"),
    ('erratum = { finding = "f", quote = "a", spans = [{ quote = "c", correction = "d" }] }',
     "an erratum with spans keeps quote in its spans"),
    ('erratum = { finding = "f", spans = [{ quote = "a", correction = "b" }, '
     '{ quote = "a", correction = "c" }] }', "quotes \\['a'\\] more than once"),
    ('erratum = { finding = "f", spans = [{ quote = "a", correction = "b", source = "183" }] }',
     "a span's source names the notes' line"),
    ('erratum = { finding = "f", spans = [{ quote = "a b", correction = " a  b" }] }',
     "repeats its quote"),
    ('erratum = { spans = [{ quote = "a", correction = "b" }] }', "the erratum needs finding"),
])
def test_a_malformed_span_is_refused(registry, tmp_path, erratum, message):
    with pytest.raises(EntryError, match=message):
        _load(tmp_path, registry, erratum)


# --------------------------------------------------------------------------- the corrections
def test_every_correction_quotes_words_of_its_claims_sentence(registry, docs, expectations):
    """Each span of each erratum is in its claim's sentence, or on a line its catalogue
    reference (or the span's own source) names (a caption, a table cell, the reason given
    under a table), so the patch can make it."""
    lost = errata.misquoted(expectations, registry, docs)
    assert not lost, "\n  ".join(["quoted words not found in the notes:"] + lost)
    assert sum(len(e.erratum.spans) > 1 for e in expectations if e.erratum) >= 3


def _with_spans(expectations, cid: str, *spans: Span) -> list[Expectation]:
    """The expectations with ``cid``'s erratum quoting ``spans`` instead."""
    out = []
    for e in expectations:
        if e.id == cid and e.erratum is not None:
            e = Expectation(e.id, e.verdict, e.reason, e.variant, e.versions, e.measurement,
                            Erratum(spans, e.erratum.finding, e.erratum.show))
        out.append(e)
    return out


FIX = "words no notes print"


@pytest.mark.parametrize("span,why", [
    (Span("because that is precisely what fusion removes", FIX, "L:183"), "words not printed"),
    # the reason under the table is not on the table's lines: without its source, not found
    (Span("because that is exactly what fusion removes", FIX), "the span's line not named"),
    # the notes print a typographic apostrophe
    (Span("JAX's by 4.4 × 10⁻¹⁶", FIX, "L:73"), "an ASCII apostrophe"),
])
def test_a_quote_not_in_the_notes_is_refused(registry, docs, expectations, span, why):
    """Negative control of the test above: a span whose words the notes do not print where
    the erratum says is named, with what to do, and is left out of the patch."""
    first = next(e for e in expectations if e.id == "JIT-18" and e.erratum).erratum.spans[0]
    changed = _with_spans(expectations, "JIT-18", first, span)
    lost = errata.misquoted(changed, registry, docs)
    assert len(lost) == 1 and f'quotes "{span.quote}", which is not in its sentence' in lost[0]
    corr = next(c for c in _every_correction(registry, docs, changed) if c.id == "JIT-18")
    assert [bool(p.offsets) for p in corr.places] == [True, False], why
    assert span.quote in corr.problem and "correct it by hand" in corr.problem
    text, problems = notes_patch.corrected_text(docs["lecture"].text, [corr])
    assert not problems and first.correction in text and span.correction not in text


def test_a_correction_of_several_spans_corrects_each_in_its_sentence(registry, docs,
                                                                     expectations):
    """JIT-18 corrects the table's row and the reason L:183 gives for it; AD-13 two spans of
    one sentence, side by side."""
    corrs = {c.id: c for c in _every_correction(registry, docs, expectations)}
    lecture = docs["lecture"]
    jit = corrs["JIT-18"]
    assert [p.line for p in jit.places] == [175, 183] and len(jit.sentences) == 2
    assert jit.line == 175 and not jit.problem
    text, problems = notes_patch.corrected_text(lecture.text, list(corrs.values()))
    assert not problems
    for cid in ("JIT-18", "AD-13"):
        for p in corrs[cid].places:
            assert p.span.correction in text, (cid, p.span.quote)
    for quote in ("because that is exactly what fusion removes", ", which is float64 epsilon"):
        assert quote not in text
    assert "twice float64 epsilon (2.2 × 10⁻¹⁶)" in text


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


def _edited(corrs) -> set[tuple[str, int]]:
    """(document, sentence) of every sentence the corrections' spans edit."""
    return {(c.document, i) for c in corrs for i in c.sentences}


def test_every_correction_applied_still_locates_every_claim(registry, docs, expectations,
                                                            tmp_path):
    corrs = _every_correction(registry, docs, expectations)
    folder = tmp_path / "corrected"
    folder.mkdir()
    for doc, name in FILES.items():
        text, problems = notes_patch.corrected_text(docs[doc].text, [c for c in corrs
                                                                 if c.document == doc])
        assert not problems
        (folder / name).write_text(text, encoding="utf-8")
    locs = _located(registry, folder)
    edited = _claims_on(registry, docs, _edited(corrs))
    wrong = {cid: (loc.status, loc.line) for cid, loc in locs.items()
             if loc.status != ("changed" if cid in edited else "found")}
    assert not wrong and len(edited) >= 20, wrong
    before = {loc.id: loc.line for loc in notes.locate_docs(registry, docs)}
    assert all(locs[cid].line == before[cid] for cid in edited)    # edited in place


def test_a_correction_keeps_the_wrapping_of_its_paragraph():
    matched = "four orders\n   of magnitude"        # the break stays at its word gap
    assert notes_patch._rewrapped(matched, "three and a half orders of magnitude") == \
        "three and\n   a half orders of magnitude"
    assert notes_patch._rewrapped("a\nb c d", "x") == "x"
    assert notes_patch._rewrapped("four orders", "three orders") == "three orders"
    diff = notes_patch.unified_diff("a\nb\nc", "a\nb\nd", "x.txt")
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
    assert "autodiff error 3.50 (notes: 4)" in md
    # every span of a correction, the one on another line than the row's named by its line
    jit = next(line for line in rows if "JIT-18 fails" in line)
    assert ("“a 10-step iterative update via lax.fori_loop”; line 183: “because that is "
            "exactly what fusion removes”") in jit
    assert "line 183: “because the un-jitted function retraces" in jit
    ad13 = next(line for line in rows if "AD-13 drift" in line)
    assert "”; “, which is float64 epsilon”" in ad13 and "twice float64 epsilon" in ad13
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
    applied = [c for c in res["corrections"] if c.placed]
    edited = _claims_on(registry, docs, _edited(applied))
    assert {cid for cid, loc in locs.items() if loc.status == "changed"} == edited
    assert {loc.status for cid, loc in locs.items() if cid not in edited} == {"found"}
    # the corrected words are there, one quote fewer (the same words may stand elsewhere),
    # every span of a correction of several
    text = (folder / FILES["lecture"]).read_text(encoding="utf-8")
    jit = next(c for c in applied if c.id == "JIT-18")
    assert len(jit.placed) == len(jit.erratum.spans) == 2
    for p in jit.placed:
        assert p.span.correction in text
        assert text.count(p.span.quote) == (docs["lecture"].text.count(p.span.quote) - 1
                                            + p.span.correction.count(p.span.quote))
    html = (out / "lecture.html").read_text(encoding="utf-8")
    assert html.count("<del>") == sum(len(c.places) for c in res["corrections"]
                                      if c.erratum and c.document == "lecture")


def test_a_patch_that_is_not_the_notes_is_refused_by_patch(built, tmp_path):
    """Negative control of the test above: the same patch on edited notes does not apply."""
    if not shutil.which("patch"):
        pytest.skip("patch is not installed")
    report, res, out = built
    folder = _copy_notes(tmp_path / "other")
    lecture = folder / FILES["lecture"]
    lecture.write_text(re.sub(r"exactly what fusion removes", "what fusion removes",
                              lecture.read_text(encoding="utf-8")), encoding="utf-8")
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


# --------------------------------------------------------------------------- a partial run
def test_a_partial_run_names_the_sentences_it_did_not_check(registry, docs, expectations,
                                                             tmp_path):
    """A fast-tier run leaves MEM-07 and JIT-18 not run; the newest kept full run found
    MEM-07 drifting (its known drift, with its correction) and JIT-18 holding: the errata,
    the page and the terminal say so, as that run's verdicts."""
    from support.tests.test_notes import _known_variants
    history = tmp_path / "history"
    drift = [e for e in expectations if e.id == "MEM-07" and e.verdict == "drift"]
    full = {"schema": 2, "environment": {"python": "3.11", "cpu": "AMD EPYC", "versions": {
        "torch": "2.15.0", "jax": "0.10.2"}, "devices": []}, "summary": {}, "claims": [
        {"id": "MEM-07", "document": "lecture", "verdict": "drift", "reason": "",
         "variants": _known_variants(0, drift)},
        {"id": "JIT-18", "document": "lecture", "verdict": "holds", "reason": "",
         "variants": [_variant(1, "holds")]}]}
    (history / "2026-12-01-latest-cpu2core").mkdir(parents=True)
    (history / "2026-12-01-latest-cpu2core" / "claims.json").write_text(json.dumps(full))
    report = _report(registry, verdict_of={"MEM-07": "not-run", "JIT-18": "not-run"})
    for c in report["claims"]:
        if c["verdict"] == "not-run" and c["id"] not in ("MEM-07", "JIT-18"):
            c["verdict"] = "holds"
    report["selection"] = {"tiers": ["fast"], "default_tiers": ["fast", "slow", "gpu"],
                           "claims": [], "keyword": "", "markexpr": "", "paths": [],
                           "last_failed": False}
    res = pages.build(report, [NOTES / name for name in FILES.values()], tmp_path / "out",
                      registry=registry, figures=False, patch=True, history=history,
                      expectations=expectations)
    md = res["errata"].read_text()
    assert "**This is a partial run: tiers fast; 2 claims not run**" in md
    gone = md[md.index("## Not run in this run (2 claims)"):]
    wrong = gone[:gone.index("### Every claim not run")]
    assert "MEM-07 drift" in wrong and "JIT-18" not in wrong
    assert "drift on AMD EPYC with torch 2.15.0, JAX 0.10.2, kept run of 2026-12-01" in wrong
    assert "420 MB" in wrong                      # its correction, from its erratum
    assert re.search(r"\| JIT-18 \| holds on AMD EPYC .* \(2026-12-01-latest-cpu2core\) \|",
                     gone)
    patch = tmp_path / "out" / "lecture.patch"          # this run's corrections only
    assert not patch.exists() or "420 MB" not in patch.read_text()
    page = (tmp_path / "out" / "lecture.html").read_text()
    assert "last full run: drift</span>" in page and "id='partial'" in page
    report.update(expected_verdicts=0, unexpected=[], stale_expectations=[])
    tr = _Terminal()
    report_mod.terminal(tr, report, [], history=history)
    out = "\n".join(tr.lines)
    assert "a partial run: tiers fast; 2 claims not run: JIT-18, MEM-07" in out \
        or "a partial run: tiers fast; 2 claims not run: MEM-07, JIT-18" in out
    assert "their last verdicts, from kept full runs (not this run's): drift 1, holds 1" in out
    assert re.search(r"^  MEM-07 +drift on AMD EPYC", out, re.M)
