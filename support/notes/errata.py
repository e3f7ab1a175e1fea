"""The errata: what to correct in the notes, one entry per sentence, in the lecturer's words.

For each sentence that a claim of the run fails or drifts on: its line, the words that are
wrong (quoted), one plain sentence of what was found, the figure measured (with its interval,
at a precision that shows the difference from the printed one) and the suggested correction.
The correction is written once, beside the known verdict (the ``erratum`` of its entry in
claims/expectations.toml); the full reasons follow the table. The claims the run could not
decide (partial, inconclusive), and those it skipped that a kept run on another machine did
run, come after, the kept verdict labelled as that run's.

An erratum may quote several spans (a sentence false in two places, a figure and the reason
the next paragraph gives for it): each is found in the claim's sentence, else on the lines
its catalogue reference (or the span's own ``source``) names, and corrected in place;
``misquoted`` lists the spans whose words are not there.

The corrections written into the notes' own text are support/notes/patch.py's; a measured
figure as the errata write it, support/notes/measured.py's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from support.notes.measured import figure_text, outside, shown
from support.reports.report import plain
from support.reports.runs import selection
from support.rules.expectations import Erratum, Expectation, Span, erratum_of
from support.rules.formatting import md_cell

CORRECT = ("fails", "drift")             # the sentence is to be corrected
UNDECIDED = ("partial", "inconclusive")  # the run could not say
ERRATA = CORRECT + UNDECIDED


# --------------------------------------------------------------------------- corrections
@dataclass
class Place:
    """Where one span of an erratum stands in the notes (nowhere: ``offsets`` None)."""

    span: Span
    sentence: int | None = None
    offsets: tuple[int, int] | None = None     # the quoted words' offsets in the file's text
    line: int | None = None


@dataclass
class Correction:
    """One claim's correction (or the lack of one) of its sentence: every span its erratum
    quotes, each placed in the notes."""

    claim: dict
    verdict: str
    variants: list[dict]
    known: list[Expectation]         # the entries its variants' verdicts are known by
    erratum: Erratum | None
    document: str = ""
    sentence: int | None = None      # the sentence of the first quoted span (or the claim's)
    line: int | None = None
    places: list[Place] = field(default_factory=list)   # one per span of the erratum
    problem: str = ""                # why it cannot be applied to the text

    @property
    def id(self) -> str:
        return self.claim["id"]

    @property
    def placed(self) -> list[Place]:
        """The spans found in the notes, which the patch corrects."""
        return [p for p in self.places if p.offsets]

    @property
    def sentences(self) -> set[int]:
        """The sentences its spans edit."""
        return {p.sentence for p in self.placed}

    def figures(self) -> str:
        """The measured figures the correction rests on, at a precision that tells apart
        the values shown together (16.704 against 16.698)."""
        chosen = bool(self.erratum and self.erratum.show)
        names = list(self.erratum.show if chosen else
                     [n for e in self.known for n in e.measurements])
        picked = []
        for v in self.variants:
            figs = v.get("figures") or {}
            picked += [(n, figs[n]) for n in names or [n for n, m in figs.items() if outside(m)]
                       if isinstance(figs.get(n), dict)
                       # a yes-or-no figure the failure names is what the finding says in
                       # words; shown only where the erratum asks for it
                       and (chosen or not isinstance(figs[n].get("value"), bool))]
        values = {m.get("value") for _, m in picked if isinstance(m.get("value"), float)}
        for digits in range(4, 8):
            if len({shown(x, None, digits) for x in values}) == len(values):
                break
        return "; ".join(dict.fromkeys(figure_text(n, m, digits) for n, m in picked))

    def why(self) -> str:
        if self.known:
            return " ".join(dict.fromkeys(e.reason for e in self.known))
        return "; ".join(dict.fromkeys(
            f"{v.get('variant') + ': ' if v.get('variant') else ''}{plain(v.get('reason', ''))}"
            for v in self.variants if v.get("reason")))


def _quote_re(quote: str) -> re.Pattern:
    return re.compile(r"\s+".join(re.escape(w) for w in quote.split()))


def find_quote(notes, loc, source: str, quote: str) -> tuple[int, tuple[int, int]] | None:
    """(sentence index, offsets) of ``quote`` in the claim's sentence, else in the nearest
    sentence on the lines its catalogue reference names (a figure's caption, a table cell)."""
    from support.notes.locate import recorded_lines
    if loc is None or loc.sentence is None:
        return None
    home = notes.sentences[loc.sentence]
    near = sorted(notes.touching(set(recorded_lines(source, loc.document))),
                  key=lambda i: (abs(notes.sentences[i].first - home.first), i))
    rx = _quote_re(quote)
    for i in dict.fromkeys([loc.sentence, *near]):
        s = notes.sentences[i]
        m = rx.search(notes.text, s.start, s.end)
        if m:
            return i, (m.start(), m.end())
    return None


def corrections(report: dict, docs: dict, locations: dict,
                expectations: list[Expectation]) -> list[Correction]:
    """Every fails and drift of ``report``, with its correction located in the notes
    ``docs`` ({document: Notes}; ``locations``: {id: Location})."""
    versions = dict((report.get("environment") or {}).get("versions") or {},
                    python=(report.get("environment") or {}).get("python"))
    out = []
    for c in report.get("claims", []):
        if c.get("verdict") not in CORRECT:
            continue
        failing = [v for v in c.get("variants", []) if v.get("verdict") in CORRECT] or \
            [{"variant": "", "verdict": c["verdict"], "reason": c.get("reason", ""), "figures": {}}]
        found: dict = {}
        for v in failing:
            decisive = tuple(n for n, m in (v.get("figures") or {}).items() if outside(m))
            known, err = erratum_of(expectations, c["id"], v["verdict"], v.get("variant") or "",
                                    versions, decisive)
            key = err or (known.label() if known else None)
            if key not in found:
                found[key] = Correction(c, v["verdict"], [], [], err)
            found[key].variants.append(v)
            if known and known not in found[key].known:
                found[key].known.append(known)
        for corr in found.values():
            _place(corr, docs, locations)
            out.append(corr)
    return out


def _place(corr: Correction, docs: dict, locations: dict) -> None:
    loc = locations.get(corr.id)
    corr.document = corr.claim.get("document", "")
    notes = docs.get(corr.document)
    if loc is None or notes is None or loc.sentence is None:
        corr.problem = f"its sentence is not in the notes given ({loc.status if loc else 'not located'})"
        return
    corr.sentence, corr.line = loc.sentence, loc.line
    if corr.erratum is None:
        corr.problem = "no correction is written for this verdict (claims/expectations.toml)"
        return
    corr.places = []
    for span in corr.erratum.spans:
        hit = find_quote(notes, loc, span.source or corr.claim.get("source", ""), span.quote)
        corr.places.append(Place(span) if hit is None else
                           Place(span, hit[0], hit[1], notes.sentences[hit[0]].line))
    if corr.placed:
        corr.sentence, corr.line = corr.placed[0].sentence, corr.placed[0].line
    lost = [p.span.quote for p in corr.places if not p.offsets]
    if lost:
        corr.problem = (", ".join(f"the words \"{q}\"" for q in lost)
                        + f" {'are' if len(lost) == 1 else 'are each'} not in its sentence any "
                        "more (corrected already, or edited): correct "
                        + ("it" if len(lost) == 1 else "them") + " by hand")


def misquoted(expectations: list[Expectation], registry: dict, docs: dict) -> list[str]:
    """Every span of an erratum whose quoted words are not where they should be (its claim's
    sentence, the lines the claim's catalogue reference names, or the span's own ``source``)
    in the notes ``docs`` ({document: Notes}), one sentence each: the check of
    claims/expectations.toml against the notes. A document not given is not checked."""
    from support.notes.locate import locate_docs
    locs = {loc.id: loc for loc in locate_docs(registry, docs)}
    out = []
    for e in expectations:
        claim = registry.get(e.id)
        if e.erratum is None or claim is None or claim.document not in docs:
            continue
        loc = locs.get(e.id)
        for span in e.erratum.spans:
            where = span.source or claim.source
            if loc is None or loc.sentence is None:
                out.append(f"{e.label()}: its sentence is not in the notes given "
                           f"({loc.status if loc else 'not located'}), so \"{span.quote}\" "
                           "cannot be placed")
            elif find_quote(docs[claim.document], loc, where, span.quote) is None:
                out.append(f"{e.label()}: the erratum quotes \"{span.quote}\", which is not in "
                           f"its sentence (line {loc.line}) nor on the lines {where} names: "
                           "quote the words as the notes print them (’, ×, ⁻ included), or "
                           "give the span the source of the line that holds them")
    return out


# --------------------------------------------------------------------------- the page
@dataclass
class Entry:
    """One sentence of the notes and the corrections of the claims on it."""

    document: str
    line: int | None
    corrections: list[Correction] = field(default_factory=list)


def entries(corrs: list[Correction]) -> list[Entry]:
    """The corrections grouped by sentence, by document and line."""
    by: dict = {}
    for c in corrs:
        key = (c.document, c.sentence if c.sentence is not None else c.id)
        by.setdefault(key, Entry(c.document, c.line)).corrections.append(c)
    return sorted(by.values(), key=lambda e: (e.document != "lecture", e.document,
                                              e.line or 10 ** 9, e.corrections[0].id))


def environment_text(env: dict) -> str:
    v = env.get("versions", {})
    names = {"torch": "torch", "jax": "JAX", "optax": "optax", "numpy": "NumPy",
             "scikit-learn": "scikit-learn"}
    acc = sorted({d.get("name") or d.get("device", "") for d in env.get("devices", [])
                  if d.get("type") not in ("cpu", "error", None)})
    return (", ".join(f"{names[k]} {v[k]}" for k in names if k in v)
            + f" on Python {env.get('python', '?')} ({env.get('cpu') or 'CPU'}; "
            + (", ".join(acc) if acc else "no accelerator")
            + f"), suite {str(env.get('suite_commit') or '?')[:10]}")


def spans_text(corr: Correction, which: str, line: int | None = None) -> str:
    """The erratum's spans quoted (``which``: "quote" or "correction"), one after another,
    each on a line other than ``line`` named by its line: “a”; line 183: “b”."""
    places = corr.places or [Place(s) for s in corr.erratum.spans]
    return "; ".join((f"line {p.line}: " if p.line and line and p.line != line else "")
                     + f"“{getattr(p.span, which)}”" for p in places)


def _cells(e: Entry) -> list[str]:
    def each(fn):
        parts = [fn(c) for c in e.corrections]
        return "<br>".join(p for p in parts if p) or "-"

    def said(c):
        if c.erratum is None:
            return f"(the claim: {c.claim.get('paraphrase', '')})"
        return spans_text(c, "quote", e.line)

    def should(c):
        if c.erratum is None:
            return "none written yet: a verdict not known to claims/expectations.toml"
        return spans_text(c, "correction", e.line) + (f" ({c.problem})" if c.problem else "")

    def found(c):
        return c.erratum.finding if c.erratum else "An unexpected " + c.verdict + "; see below."

    ids = "<br>".join(f"{c.id} {c.verdict}" for c in e.corrections)
    return [str(e.line) if e.line else "not located", ids, each(said), each(should),
            each(found), each(Correction.figures)]


def markdown(report: dict, corrs: list[Correction], files: dict | None = None,
             kept: dict | None = None, locations: dict | None = None,
             patched: dict | None = None, earlier: list[Correction] | None = None) -> str:
    """errata.md. ``files``: {document: file name}; ``kept``: {id: kept_runs.Kept};
    ``patched``: {document: patch file name} where a patch was written; ``earlier``: the
    corrections a kept full run found of sentences this (partial) run did not check."""
    files, kept, locations, patched = files or {}, kept or {}, locations or {}, patched or {}
    env = report.get("environment", {})
    rows = entries(corrs)
    names = ", ".join(f"`{files[d]}`" for d in files) or "the notes"
    verdict_of = {c.id: c.claim["verdict"] for c in corrs}
    sel = selection(report)
    lines = [f"# Errata: {names}", "",
             f"Measured with {environment_text(env)}.", ""]
    if not sel.full:
        lines += [f"**This is {sel.text()}**: the sentences of those claims were not checked; "
                  "they are listed at the end, with what the last kept full run found of "
                  "them.", ""]
    lines += [f"{len(rows)} sentence(s) to correct ({list(verdict_of.values()).count('fails')} "
              f"claims fail, {list(verdict_of.values()).count('drift')} drift)"
              + (". " + " ".join(f"`{p}` applies the corrections to `{files.get(d, d)}` "
                                 f"(`patch -p1 < {p}` or `git apply {p}` beside it)."
                                 for d, p in patched.items()) if patched else ".") + "", ""]
    lines += _tables(rows, files)
    if not rows:
        lines += ["Nothing to correct: no claim fails or drifts.", ""]
    lines += undecided(report, kept, locations, files)
    lines += not_run(report, kept, locations, files, earlier or [])
    return "\n".join(lines).rstrip() + "\n"


def _tables(rows: list[Entry], files: dict, level: str = "##", run: dict | None = None) -> list[str]:
    """One table per document of the sentences to correct, then why; ``run``: {id: the kept
    run a row comes from}, a column of its own."""
    out = []
    for doc in dict.fromkeys([*files, *(e.document for e in rows)]):
        mine = [e for e in rows if e.document == doc]
        if not mine:
            continue
        extra = " kept run |" if run else ""
        out += [f"{level} {files.get(doc, doc)}", "",
                "| line | claim | the notes say | suggested correction | what was found | measured |"
                + extra, "|---|---|---|---|---|---|" + ("---|" if run else "")]
        out += ["| " + " | ".join(md_cell(x) for x in _cells(e) + (
            ["<br>".join(dict.fromkeys(run.get(c.id, "") for c in e.corrections))] if run else []))
            + " |" for e in mine]
        out += ["", "Why:", ""]
        out += [f"* **{c.id}** (line {c.line or '?'}, {c.verdict}): {md_cell(c.why())}"
                for e in mine for c in e.corrections]
        out.append("")
    return out


def not_run(report: dict, kept: dict, locations: dict, files: dict,
            earlier: list[Correction]) -> list[str]:
    """A partial run's claims that it did not select: the sentences a kept full run found
    wrong (with that run's correction, not in this run's patch), then every one of them with
    its last kept verdict."""
    sel = selection(report)
    if sel.full or not sel.not_run:
        return []
    last = {cid: k for cid, k in kept.items() if k.why == "not run"}
    out = [f"## Not run in this run ({len(sel.not_run)} claims)", "",
           f"This is {sel.text()}. Their verdicts below are the last kept full run's, not this "
           "run's; run every default tier to check them.", ""]
    if earlier:
        out += ["### Sentences the last kept full run found wrong", "",
                "Not checked by this run, and not in its patch.", ""]
        out += _tables(entries(earlier), files, "####",
                       {c.id: last[c.id].text() for c in earlier if c.id in last})
    out += ["### Every claim not run", "", "| where | claim | last kept verdict |", "|---|---|---|"]
    for cid in sel.not_run:
        loc = locations.get(cid)
        c = next((x for x in report.get("claims", []) if x["id"] == cid), {})
        where = (f"{files.get(c.get('document'), c.get('document'))} line {loc.line}"
                 if loc is not None and loc.line else c.get("source", ""))
        out.append("| " + " | ".join(md_cell(x) for x in (
            where, cid, last[cid].text() if cid in last else "none kept")) + " |")
    return out + [""]


def undecided(report: dict, kept: dict, locations: dict, files: dict) -> list[str]:
    """The claims this run could not decide, and those a kept run decided for it."""
    kept = {cid: k for cid, k in kept.items() if k.why == "accelerator"}
    rows = [c for c in report.get("claims", [])
            if c.get("verdict") in UNDECIDED or c["id"] in kept]
    if not rows:
        return []
    out = ["## Not decided in this run", "",
           "Partial or inconclusive here, or skipped here with a verdict in a run kept from "
           "another machine (shown as that run's, not as this one's).", "",
           "| where | claim | here | why | kept run |", "|---|---|---|---|---|"]
    for c in sorted(rows, key=lambda c: (c.get("document") != "lecture", c["id"])):
        loc = locations.get(c["id"])
        where = (f"{files.get(c.get('document'), c.get('document'))} line {loc.line}"
                 if loc is not None and loc.line else c.get("source", ""))
        k = kept.get(c["id"])
        out.append("| " + " | ".join(md_cell(x) for x in (
            where, c["id"], c["verdict"], plain(c.get("reason", "")) or "-",
            k.text() if k else "-")) + " |")
    return out + [""]

