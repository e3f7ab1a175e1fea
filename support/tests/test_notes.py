"""The notes, annotated: finding each claim's sentence by its fingerprint, and the pages.

The locator is tested on copies of the CI notes (``../shared/notes`` beside the checkout) edited
at run time in ``tmp_path``: lines inserted above a claim (moved), one sentence edited
(changed), one deleted (missing), paragraphs re-wrapped and a Markdown rendering (found). No
text of the notes is kept in the suite; the tests skip with the reason where the notes are
absent. The annotated page is opened in headless Chromium (the approach and helpers of
test_html_report.py).
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from support.notes import errata, locate as notes, pages
from support.spec import verdicts
from support.spec.registry import load_registry
from support.tests.test_html_report import HAS_MPL, _browser, _render

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / ".." / "shared" / "notes"
FILES = {"lecture": "lecture-11-notes.txt", "sheet": "frameworks-summary.txt"}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    paths = {doc: NOTES / name for doc, name in FILES.items()}
    absent = [str(p) for p in paths.values() if not p.exists()]
    if absent:
        pytest.skip(f"the CI copies of the notes are not beside the checkout: {', '.join(absent)} "
                    "(../shared/notes); the locator needs them")
    return {doc: p.read_text(encoding="utf-8") for doc, p in paths.items()}


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


def test_measured_figures_are_rounded_as_the_notes_print_them():
    assert errata.as_printed(1.3874e-12, "1.4e-12") == "1.4e-12"
    assert errata.as_printed(4.441e-16, "1e-17") == "4.4e-16"
    assert errata.as_printed(2.98e-08, 6e-08) == "3e-08"
    assert errata.as_printed(0.5274, "0.8") == "0.5"
    assert errata.as_printed(419.6, "478") == "420"
    assert errata.as_printed(True, True) == "True"


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
            ROOT / "support" / "tests" / "test_notes.py"]
    held = " ".join(" ".join(notes.words(p.read_text(encoding="utf-8"))) for p in mine)
    for text in texts.values():                  # sentences, not headings (the registry's
        for s in notes.sentences(text):          # `section` names them)
            ws = notes.words(text[s.start:s.end])
            if len(ws) >= 8 and re.search(r"[.!?]\W*$", text[s.start:s.end]):
                assert " ".join(ws) not in held, f"a sentence of the notes is copied: {ws[:4]}..."


def _claim_at(registry, texts, locs, doc: str, words_at_least: int = 10):
    """A claim of ``doc`` whose sentence is long, held by no other sentence, and unlike any."""
    nt = notes.Notes(texts[doc])
    for cid, loc in locs.items():
        if loc.document != doc or loc.line is None or loc.line < 40:
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
def _report(registry) -> dict:
    """A run in which every verdict of the vocabulary occurs (one claim in twelve each, kind
    h not-testable), with a stated figure on the claims that drift."""
    claims = []
    cycle = [v for v in verdicts.ORDER if v != "not-testable"]
    for i, c in enumerate(registry.values()):
        v = "not-testable" if c.kind == "h" else cycle[i % len(cycle)]
        fig = {"value": 1.3874e-12 * (1 + (v == "drift")), "unit": "", "stated": "1.4e-12",
               "tolerance": {"key": "printed", "text": "printed"}, "within": v != "drift"}
        variant = {"test": f"claims/x.py::test_{i}", "params": {}, "variant": "", "verdict": v,
                   "reason": f"because {v}", "measured": {"best_error": fig["value"]},
                   "figures": {"best_error": fig}, "notes": []}
        claims.append({"id": c.id, "document": c.document, "section": c.section,
                       "source": c.source, "paraphrase": c.paraphrase, "kind": c.kind,
                       "tier": c.tier, "stated": c.stated, "measured": fig["value"],
                       "tolerance": c.tolerance, "verdict": v, "reason": f"because {v}",
                       "expected": None, "variants": [variant], "tests": [variant["test"]]})
    summary = {v: sum(1 for c in claims if c["verdict"] == v) for v in verdicts.ORDER}
    return {"schema": 1, "environment": {"python": "3.11", "versions": {"torch": "2.13.0"},
                                         "devices": [{"type": "cpu", "name": "test cpu"}]},
            "summary": summary, "claims": claims}


@pytest.fixture(scope="module")
def built(registry, texts, tmp_path_factory):
    out = tmp_path_factory.mktemp("notes")
    report = _report(registry)
    paths = [NOTES / name for name in FILES.values()]
    res = pages.build(report, paths, out, registry=registry, figures=HAS_MPL)
    return report, res, out


def test_errata_list_what_does_not_hold_rounded_as_printed(built):
    report, res, out = built
    md = (out / "errata.md").read_text()
    want = {c["id"] for c in report["claims"] if c["verdict"] in errata.ERRATA}
    listed = set(re.findall(r"^\| line \d+ \| ([A-Z]+-\d\d) \|", md, re.M))
    assert listed == want and len(want) > 20
    assert "best_error = 2.8e-12 (notes: 1.4e-12)" in md       # 2 x 1.3874e-12, as printed
    assert "Python 3.11" in md and "torch 2.13.0" in md


def test_notes_json_says_where_each_claim_is(built, registry):
    _report_, res, out = built
    data = json.loads((out / "notes.json").read_text())
    assert len(data["claims"]) == len(registry)
    assert all(c["found"] and c["status"] == "found" and c["line"] for c in data["claims"])
    assert set(data["summary"]) == set(FILES)


def test_the_annotated_page_renders_in_a_browser(built, tmp_path):
    browser = _browser()
    report, res, out = built
    located = {c["id"] for c in json.loads((out / "notes.json").read_text())["claims"]
               if c["found"] and c["document"] == "lecture"}
    attrs, console = _render(browser, out / "lecture.html", tmp_path / "profile")
    assert attrs["errors"] == "" and console == []
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
    attrs2, console2 = _render(browser, filtered, tmp_path / "profile2")
    visible2 = dict(kv.split(":") for kv in attrs2["visible"].split(",") if kv)
    assert attrs2["errors"] == "" and console2 == []
    assert set(visible2) == {v for v in verdicts.NOT_HOLDING if v in visible}
    assert all(visible2[v] == visible[v] for v in visible2)
