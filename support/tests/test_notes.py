"""The notes, annotated: finding each claim's sentence by its fingerprint, and the pages.

The locator is tested on copies of the CI notes (``../shared/notes`` beside the checkout) edited
at run time in ``tmp_path``: lines inserted above a claim (moved), one sentence edited
(changed), one deleted (missing), paragraphs re-wrapped and a Markdown rendering (found). No
text of the notes is kept in the suite; the tests skip with the reason where the notes are
absent. The annotated page is opened in headless Chromium (the approach and helpers of
test_html_report.py).
"""
from __future__ import annotations

import html
import json
import re
import textwrap
from pathlib import Path

import pytest

from support.notes import errata, locate as notes, measured, pages
from support.reports.report import plain
from support.rules import verdicts
from support.rules.entries import load_entries
from support.tests.test_html_report import HAS_MPL, _browser, _render

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / ".." / "shared" / "notes"
FILES = {"lecture": "lecture-11-notes.txt", "sheet": "frameworks-summary.txt"}
# how every test that needs the notes' text says so where they are absent (a fresh clone with
# nothing beside it: support/tests/test_contributor.py runs the lints there)
NEEDS_NOTES = "needs the notes' text"


def notes_or_skip() -> dict[str, Path]:
    """{document: path} of the CI copies of the notes; skip, saying so, where they are absent."""
    paths = {doc: NOTES / name for doc, name in FILES.items()}
    absent = [str(p) for p in paths.values() if not p.exists()]
    if absent:
        pytest.skip(f"{NEEDS_NOTES}: the CI copies of the notes are not beside the checkout: "
                    f"{', '.join(absent)} (../shared/notes)")
    return paths


@pytest.fixture(scope="module")
def registry():
    return load_entries()


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {doc: p.read_text(encoding="utf-8") for doc, p in notes_or_skip().items()}


def _locate(registry, tmp_path: Path, texts: dict[str, str], suffix=".txt") -> dict:
    paths = []
    tmp_path.mkdir(parents=True, exist_ok=True)
    for doc, text in texts.items():
        path = tmp_path / f"{doc}{suffix}"
        path.write_text(text, encoding="utf-8")
        paths.append(f"{doc}={path}")
    return {loc.id: loc for loc in notes.locate_all(registry, paths)}


def _statuses(locs: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for loc in locs.values():
        out[loc.status] = out.get(loc.status, 0) + 1
    return out


# --------------------------------------------------------------------------- without the notes
def test_words_ignore_markup_case_and_wrapping():
    plain = "The loss fell to 17.7 MPa, and loss.backward() ran; see Fig. 3 of scikit-learn’s docs."
    md = ("The **loss** fell to *17.7 MPa*, and `loss.backward()`\nran; see [Fig. 3]"
          "(https://example.org/a_(b)) of scikit-learn's <em>docs</em>.")
    assert notes.words(plain) == notes.words(md)
    assert notes.words("10⁻¹² and works¹.") == notes.words("10-12 and works.")
    assert notes.words("Fig. 65 The network") == notes.words("The network")


def test_a_fingerprint_names_the_words_and_how_alike_they_are():
    a = notes.fingerprint(notes.words("the best central difference manages a small error at "
                                      "a step of three over ten million in float64"))
    b = notes.fingerprint(notes.words("the best central difference manages a small error at "
                                      "a step of four over ten million in float64"))
    c = notes.fingerprint(notes.words("jax places arrays on the default device itself"))
    assert notes.FINGERPRINT_RE.match(a) and a[:8] != b[:8]
    assert notes.distance(a, b) <= notes.SIMILAR_BITS < notes.distance(a, c)


def test_a_markdown_table_is_read_cell_by_cell():
    md = "| concept | one |\n|---|---|\n| default float | `float32` |\n| next row | x |\n"
    plain = "concept\n\none\n\ndefault float\n\nfloat32\n\nnext row\n\nx\n"
    fps = [sorted(s.fp for s in notes.sentences(t)) for t in (md, plain)]
    assert fps[0] == fps[1]


def test_measured_figures_show_how_they_differ_from_the_printed_one():
    """Rounded to the notes' precision, 3.498 would read 3 against a printed 4 (or 4, as if
    it held): the errata show one decimal more than printed, three digits at least."""
    assert measured.shown(3.4982, 4) == "3.50"
    assert measured.shown(419.6, "478") == "419.6"
    assert measured.shown(0.5274, "0.8") == "0.527"
    assert measured.shown(5.4036, 5) == "5.40"
    assert measured.shown(0.04369, 0) == "0.0437"
    assert measured.shown(9.98e-07, "1.25e-7") == "9.98e-07"
    assert measured.shown(41.333333333333336) == "41.33" and measured.shown(30.0) == "30"
    assert measured.shown(16.704453, None, 5) != measured.shown(16.6981, None, 5)
    assert measured.shown(63, 206) == "63" and measured.shown(True, True) == "True"


def test_a_failure_message_loses_pytests_introspection():
    raw = ("AssertionError: mean is not better under the random split: KFold 16.704 MPa against "
           "GroupKFold 16.698 MPa assert np.float64(16.704453659057616) < np.float64(16.69810) "
           "+  where np.float64(16.70445) = <built-in method mean of numpy.ndarray object at "
           "0x7f24f19e1890>()")
    assert plain(raw) == ("mean is not better under the random split: KFold 16.704 MPa against "
                          "GroupKFold 16.698 MPa")
    assert plain("assert 0 == 1") == "assert 0 == 1"          # nothing but the assertion: kept
    assert plain("x = 5.4 is outside stated 5") == "x = 5.4 is outside stated 5"


def test_source_references_name_lines_of_one_document():
    assert notes.recorded_lines("L:43-47 Autodiff", "lecture") == [43, 44, 45, 46, 47]
    assert notes.recorded_lines("S:20,26; S:60; L:495", "sheet") == [20, 26, 60]
    assert notes.recorded_lines("S:17; L:393", "lecture") == [393]


def test_a_wrapped_paragraph_keeps_its_logical_line():
    flat = "\n".join(["Title", "", "word " * 40, "", "code = 1", "more = 2", "", "Last one."])
    wrapped = flat.replace("word " * 40, textwrap.fill("word " * 40, 30))
    # enough lines for the wrap width to show: pad both with short paragraphs
    pad = "\n\n".join(["filler sentence number %d here" % i for i in range(12)])
    firsts = [[s.first for s in notes.sentences(t + "\n\n" + pad)] for t in (flat, wrapped)]
    assert firsts[0] == firsts[1]


def test_every_registry_entry_has_a_fingerprint(registry):
    bad = [c.id for c in registry.values() if not notes.FINGERPRINT_RE.match(c.fingerprint)]
    assert not bad, ("no fingerprint; run python -m support pin --notes lecture=... "
                     f"--notes sheet=... --write: {bad}")


# --------------------------------------------------------------------------- on the CI notes
def test_the_ci_notes_locate_every_pinned_claim(registry, texts, tmp_path):
    locs = _locate(registry, tmp_path, texts)
    lost = {cid: (loc.status, loc.reason) for cid, loc in locs.items() if not loc.found}
    assert sum(loc.found for loc in locs.values()) >= 300, lost
    assert _statuses(locs) == {"found": len(registry)}, lost


def test_no_sentence_of_the_notes_is_in_the_notes_modules(texts):
    """The locator and its tests hold fingerprints, never sentences (the registry adds only
    24 hex digits per claim: test_every_registry_entry_has_a_fingerprint_and_no_text)."""
    mine = [*sorted((ROOT / "support" / "notes").glob("*.py")),
            *sorted((ROOT / "support" / "commands").glob("*.py")),
            ROOT / "support" / "tests" / "test_notes.py",
            ROOT / "support" / "tests" / "test_contributor.py"]
    held = " ".join(" ".join(notes.words(p.read_text(encoding="utf-8"))) for p in mine)
    for text in texts.values():                  # sentences, not headings (the registry's
        for s in notes.sentences(text):          # `section` names them)
            ws = notes.words(text[s.start:s.end])
            if len(ws) >= 8 and re.search(r"[.!?]\W*$", text[s.start:s.end]):
                assert " ".join(ws) not in held, f"a sentence of the notes is copied: {ws[:4]}..."


def _claim_at(registry, texts, locs, doc: str, words_at_least: int = 10):
    """A claim of ``doc`` whose sentence is long, held by no other sentence, and unlike any,
    and whose source names its line alone (a range would still touch it when lines move)."""
    nt = notes.Notes(texts[doc])
    for cid, loc in sorted(locs.items()):
        if loc.document != doc or loc.line is None or loc.line < 40 \
                or len(notes.recorded_lines(registry[cid].source, doc)) != 1:
            continue
        s = nt.sentences[loc.sentence]
        if s.first != s.last or len(notes.words(texts[doc][s.start:s.end])) < words_at_least:
            continue
        others = [o for o in nt.sentences if o is not s]
        if all(notes.distance(o.fp, s.fp) > notes.SIMILAR_BITS for o in others):
            return cid, s
    raise AssertionError("no suitable claim")


def test_lines_inserted_above_a_claim_move_it(registry, texts, tmp_path):
    before = _locate(registry, tmp_path / "a", texts)
    cid, s = _claim_at(registry, texts, before, "lecture")
    lines = texts["lecture"].split("\n")
    at = before[cid].line - 1
    edited = dict(texts, lecture="\n".join(lines[:at] + ["An inserted paragraph.", ""] + lines[at:]))
    after = _locate(registry, tmp_path / "b", edited)
    assert after[cid].status == "moved" and after[cid].line == before[cid].line + 2
    for other, loc in after.items():            # a reference naming several lines may
        if loc.document == "lecture":           # still touch the sentence two lines down
            if before[other].line < before[cid].line:
                assert (loc.status, loc.line) == ("found", before[other].line), (other, loc)
            else:
                assert loc.status in ("moved", "found") and loc.line == before[other].line + 2
    assert all(loc.status == "found" for loc in after.values() if loc.document == "sheet")


def _rewritten(texts, doc, s, replacement: str) -> dict:
    t = texts[doc]
    return dict(texts, **{doc: t[:s.start] + replacement + t[s.end:]})


def test_an_edited_sentence_is_changed_and_a_deleted_one_missing(registry, texts, tmp_path):
    before = _locate(registry, tmp_path / "a", texts)
    for doc in FILES:
        cid, s = _claim_at(registry, texts, before, doc)
        same = {c for c, loc in before.items() if loc.document == doc and loc.sentence ==
                before[cid].sentence}
        old = texts[doc][s.start:s.end]
        last = list(re.finditer(r"\w+", old))[-1]
        edited = old[:last.start()] + "otherwise" + old[last.end():]
        changed = _locate(registry, tmp_path / f"e{doc}", _rewritten(texts, doc, s, edited))
        gone = _locate(registry, tmp_path / f"d{doc}", _rewritten(texts, doc, s, ""))
        for c in same:
            assert changed[c].status == "changed" and changed[c].line == before[c].line, changed[c]
            assert gone[c].status == "missing" and gone[c].line is None, gone[c]
        assert all(changed[c].status == "found" for c in changed if c not in same)
        assert all(gone[c].status == "found" for c in gone if c not in same)
        revisit = notes.changed_claims(registry, [tmp_path / f"d{doc}" / f"{d}.txt" for d in FILES])
        assert {loc.id for loc in revisit} == same


def _paragraph(lines: list[str], k: int) -> bool:
    alone = (k == 0 or not lines[k - 1].strip()) and (k + 1 == len(lines) or not lines[k + 1].strip())
    return (alone or lines[k].lstrip()[:1] in "•-") and not re.search(r"\S {2,}\S", lines[k])


def _rewrap(text: str, width: int) -> str:
    """Each prose paragraph and list item filled to ``width`` (code lines left alone)."""
    lines, out = text.split("\n"), []
    for k, line in enumerate(lines):
        if len(line) > width and _paragraph(lines, k):
            indent = re.match(r"\s*", line).group(0)
            hang = indent + ("  " if line.lstrip()[:1] in "•-" else "")
            out.append(textwrap.fill(line, width, subsequent_indent=hang))
        else:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("width", [40, 72, 100])
def test_rewrapped_paragraphs_are_found_at_their_lines(registry, texts, tmp_path, width):
    wrapped = {doc: _rewrap(t, width) for doc, t in texts.items()}
    assert all(len(wrapped[d].split("\n")) > len(texts[d].split("\n")) for d in FILES)
    locs = _locate(registry, tmp_path, wrapped)
    assert _statuses(locs) == {"found": len(registry)}


def _code(line: str) -> bool:
    return bool(line.strip()) and not re.match(r"\s*[•-] |.*\$|.*\.$", line) and \
        bool(re.search(r"[=(@]|^\s|^(import|from|for|with|def|return)\b", line))


def _markdown(text: str) -> str:
    """A Markdown source of the plain-text notes, line for line: headings, bullets, inline
    math, code spans, bold figures, straight quotes, and fences on the blank lines around
    multi-line code."""
    lines = text.split("\n")
    out = []
    for k, line in enumerate(lines):
        s = line
        if s.endswith("#") and len(s) < 90 and _paragraph(lines, k):
            s = "## " + s[:-1]
        s = re.sub(r"^(\s*)•\s", r"\1- ", s)
        s = re.sub(r"\\\((.+?)\\\)", r"$\1$", s)
        s = s.replace("’", "'").replace("“", '"').replace("”", '"')
        s = re.sub(r"(?<![\w`$])(\w+(?:\.\w+)+\(\))", r"`\1`", s)
        s = re.sub(r"\b(\d+(?:\.\d+)? MPa)\b", r"**\1**", s)
        out.append(s)
    for k in range(1, len(lines) - 2):       # a block of code lines, between blank lines
        run = k
        while run < len(lines) and _code(lines[run]):
            run += 1
        if run - k >= 2 and not lines[k - 1].strip() and run < len(lines) and not lines[run].strip() \
                and out[k - 1] == "" and out[run] == "":
            out[k - 1], out[run] = "```python", "```"
    return "\n".join(out)


def test_a_markdown_source_of_the_notes_is_found(registry, texts, tmp_path):
    md = {doc: _markdown(t) for doc, t in texts.items()}
    assert "```python" in md["lecture"] and "## " in md["lecture"] and "**" in md["lecture"]
    locs = _locate(registry, tmp_path / "md", md, suffix=".md")
    assert _statuses(locs) == {"found": len(registry)}
    wrapped = {doc: _rewrap(t, 80) for doc, t in md.items()}
    locs = _locate(registry, tmp_path / "wrapped", wrapped, suffix=".md")
    assert _statuses(locs) == {"found": len(registry)}


def test_a_file_is_recognised_by_its_sentences(registry, texts, tmp_path):
    (tmp_path / "notes.md").write_text(_markdown(texts["sheet"]), encoding="utf-8")
    docs = notes.read_all(registry, [tmp_path / "notes.md"])
    assert list(docs) == ["sheet"]
    (tmp_path / "other.txt").write_text("Nothing of the notes here.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lecture=PATH"):
        notes.read_all(registry, [tmp_path / "other.txt"])


# --------------------------------------------------------------------------- the pages
def _env() -> dict:
    """This environment's versions, as a report records them (the known verdicts that apply
    here are keyed by them)."""
    from support.rules.entries import PACKAGES, installed_version
    versions = {p: str(installed_version(p)) for p in PACKAGES if installed_version(p)}
    return {"python": "3.11", "cpu": "test cpu", "versions": versions,
            "devices": [{"device": "cpu", "type": "cpu", "name": "test cpu"}]}


def _variant(i: int, v: str, variant: str = "", figures: dict | None = None,
             reason: str = "") -> dict:
    return {"test": f"claims/x.py::test_{i}" + (f"[{variant}]" if variant else ""), "params": {},
            "variant": variant, "verdict": v, "reason": reason or f"because {v}",
            "devices": [], "measured": {k: m["value"] for k, m in (figures or {}).items()},
            "figures": figures or {}, "notes": []}


def _known_variants(i: int, entries) -> list[dict]:
    """A variant per known fails or drift of a claim, failing as its entry says: the figure
    it names outside its tolerance, or an assertion message with pytest's introspection."""
    out = []
    for e in entries:
        figs = {m: {"value": 3.4982, "unit": "", "stated": 4, "outcome": "outside",
                    "rule": "stated 4 (atol 0.5)"} for m in e.measurements}
        msg = ("AssertionError: the sentence does not hold here assert np.float64(16.70445) < "
               "np.float64(16.69810) +  where np.float64(16.70445) = <built-in method mean of "
               "numpy.ndarray object at 0x7f24f19e1890>()")
        out.append(_variant(i, e.verdict, e.variant or "", figs, "" if figs else msg))
    return out


def _report(registry, expectations=None, verdict_of: dict | None = None) -> dict:
    """A run in which every verdict of the vocabulary occurs (one claim in twelve each, kind
    h not-testable), with a stated figure on the claims that drift; every known fails and
    drift of this environment (``expectations``) occurs as its entry names it, and
    ``verdict_of`` sets a claim's verdict."""
    claims = []
    cycle = [v for v in verdicts.ORDER if v not in ("not-testable", "fails", "drift")]
    known = {}
    for e in expectations or []:
        if e.verdict in errata.CORRECT and e.applies(e.variant or ""):
            known.setdefault(e.id, []).append(e)
    for i, c in enumerate(registry.values()):
        v = "not-testable" if c.kind == "h" else cycle[i % len(cycle)]
        v = (verdict_of or {}).get(c.id, v)
        if c.id in known and c.id not in (verdict_of or {}):
            variants = _known_variants(i, known[c.id])
            v = verdicts.worst([x["verdict"] for x in variants])
            expected = {"verdict": v, "label": known[c.id][0].label(),
                        "reason": next(e.reason for e in known[c.id] if e.verdict == v)}
        else:
            fig = {"value": 1.3874e-12 * (1 + (v == "drift")), "unit": "", "stated": "1.4e-12",
                   "tolerance": {"key": "printed", "text": "printed"},
                   "outcome": "outside" if v == "drift" else "within"}
            variants, expected = [_variant(i, v, figures={"best_error": fig})], None
        claims.append({"id": c.id, "document": c.document, "section": c.section,
                       "source": c.source, "paraphrase": c.paraphrase, "kind": c.kind,
                       "tier": c.tier, "stated": c.notes_words, "measured": None, "verdict": v,
                       "reason": "; ".join(x["reason"] for x in variants), "expected": expected,
                       "variants": variants, "tests": [x["test"] for x in variants]})
    summary = {v: sum(1 for c in claims if c["verdict"] == v) for v in verdicts.ORDER}
    return {"schema": 2, "environment": _env(), "summary": summary, "claims": claims}


@pytest.fixture(scope="module")
def expectations(registry):
    from support.rules.expectations import load_expectations
    return load_expectations(registry=registry)


@pytest.fixture(scope="module")
def built(registry, texts, expectations, tmp_path_factory):
    out = tmp_path_factory.mktemp("notes")
    report = _report(registry, expectations)
    paths = [NOTES / name for name in FILES.values()]
    res = pages.build(report, paths, out, registry=registry, figures=HAS_MPL, patch=True,
                      history=tmp_path_factory.mktemp("no-history"), expectations=expectations)
    return report, res, out


def test_notes_json_says_where_each_claim_is(built, registry):
    _report_, res, out = built
    data = json.loads((out / "notes.json").read_text())
    assert len(data["claims"]) == len(registry)
    assert all(c["found"] and c["status"] == "found" and c["line"] for c in data["claims"])
    assert set(data["summary"]) == set(FILES)
    assert data["files"] == FILES                     # file names: no path of this machine


def _render_page(browser, page: Path, profile: Path) -> dict:
    attrs, console = _render(browser, page, profile)
    assert attrs["errors"] == "" and console == [], (attrs["errors"], console)
    return attrs


def test_the_annotated_page_renders_in_a_browser(built, tmp_path):
    browser = _browser()
    report, res, out = built
    located = {c["id"] for c in json.loads((out / "notes.json").read_text())["claims"]
               if c["found"] and c["document"] == "lecture"}
    attrs = _render_page(browser, out / "lecture.html", tmp_path / "profile")
    assert set(attrs["ids"].split(",")) == located and attrs["duplicates"] == ""
    assert int(attrs["badges"]) == len(located)               # exactly one highlight each
    assert dict(kv.split(":") for kv in attrs["counts"].split(",")) == \
        {v: str(n) for v, n in report["summary"].items() if n}
    assert attrs["loaded"] == attrs["figures"]
    visible = dict(kv.split(":") for kv in attrs["visible"].split(","))
    assert int(visible.get("holds", 0)) > 0

    # the filter "only what does not hold", switched on as a reader would
    page = (out / "lecture.html").read_text()
    filtered = out / "filtered.html"
    filtered.write_text(page.replace("</body>", "<script>document.getElementById('only-open')"
                                                ".checked=true;</script></body>"))
    attrs2 = _render_page(browser, filtered, tmp_path / "profile2")
    visible2 = dict(kv.split(":") for kv in attrs2["visible"].split(",") if kv)
    assert set(visible2) == {v for v in verdicts.NOT_HOLDING if v in visible}
    assert all(visible2[v] == visible[v] for v in visible2)


@pytest.mark.skipif(bool(pages.tex.missing()), reason=pages.tex.missing() or "rendered")
def test_the_mathematics_is_rendered_and_headings_have_no_anchor_mark(built, tmp_path):
    """The reader sees formulas, not TeX: no \\frac, \\qquad or \\[ in the text as shown,
    every formula drawn with a width; headings without the '#' a web page's anchor left."""
    browser = _browser()
    _report_, res, out = built
    for doc in FILES:
        attrs = _render_page(browser, out / f"{doc}.html", tmp_path / f"profile-{doc}")
        assert attrs["rawtex"] == "", f"{doc}: TeX shown as text: {attrs['rawtex']}"
        assert int(attrs["math"]) >= 10 and attrs["drawn"] == attrs["math"], attrs
        assert attrs["stray"] == "0"
    assert int(_render_page(browser, out / "lecture.html", tmp_path / "p")["headings"]) >= 10
    page = (out / "lecture.html").read_text()
    assert "<title>Lecture 11 notes (lecture-11-notes.txt), annotated</title>" in page

    # negative controls: formulas left as TeX and a heading with its mark are both seen
    raw = re.sub(r"<math title='([^']*)'.*?</math>", lambda m: html.unescape(m.group(1)), page,
                 flags=re.S)
    raw = re.sub(r"(<span class='h'>[^<]*)</span>", r"\1#</span>", raw, count=1)
    (out / "raw.html").write_text(raw)
    attrs = _render_page(browser, out / "raw.html", tmp_path / "raw")
    assert "\\" in attrs["rawtex"] and attrs["math"] == "0" and attrs["stray"] == "1"


def test_without_latex2mathml_the_page_says_so_and_shows_tex(registry, monkeypatch, tmp_path):
    monkeypatch.setattr(pages.tex, "missing", lambda: "latex2mathml is not installed (test)")
    out = pages.tex.render(r"a \(\frac{1}{2}\) b")
    assert out == "a <code class='tex'>\\frac{1}{2}</code> b"
    notes_text = "Title#\n\n" + "The loss is \\(L = (y - t)^2\\) here.\n" * 3
    (tmp_path / "n.txt").write_text(notes_text)
    report = {"environment": _env(), "summary": {}, "claims": []}
    res = pages.build(report, [f"lecture={tmp_path / 'n.txt'}"], tmp_path / "out",
                      registry=registry, figures=False, history=tmp_path)
    page = res["pages"][0].read_text()
    assert "id='no-math'" in page and "<math" not in page
