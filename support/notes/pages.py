"""The notes, annotated: each document's own text as one self-contained page, every claim's
sentence highlighted in its verdict's colour with its ID, plus ``errata.md``, ``notes.json``
and, with ``--patch``, ``<document>.patch``.

    python -m support notes reports/claims.json --notes ../shared/notes/lecture-11-notes.txt \\
        --notes ../shared/notes/frameworks-summary.txt -o reports/notes --patch

(support/commands/notes.py: its arguments, the report and notes it reads, what it prints).

The text is read at build time from the files given (the suite holds none of it); each claim
is found by its registry fingerprint (support/notes/locate.py), its mathematics rendered as
MathML (support/notes/tex.py). Opening a highlight shows the claim: stated vs measured, the
suggested correction of a known fails or drift, the reason, a kept run's verdict where this
run could not run it, the redrawn figure where one exists (support/reports/figures.py, when
matplotlib is installed), and, folded, the variants with their raw test output. The bar on
top counts the run's verdicts; "only what does not hold" leaves the highlights of error,
fails, drift, inconclusive and partial. Claims the file does not hold any more are listed at
the end.
"""
from __future__ import annotations

import base64
import html
import importlib.util
import json
import re
from pathlib import Path

from support.notes import errata, locate as notes_mod, measured, tex
from support.notes import patch as notes_patch
from support.reports import kept as kept_runs, runs
from support.reports.controlled import control_text
from support.reports.report import reason_text
from support.rules import verdicts
from support.rules.expectations import load_expectations
from support.rules.formatting import fmt

TITLES = {"lecture": "Lecture 11 notes", "sheet": "Summary sheet"}
LIGHT = {"not-testable", "not-run", "skipped", "partial", "inconclusive", "pending"}


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def figure_claims() -> dict[str, list[str]]:
    """{claim id: [figure names]}: the claims each figure of support/reports/panels.py draws."""
    from support.reports.panels import FIGURES
    out: dict[str, list[str]] = {}
    for name, _title, _fn, claims in FIGURES:
        for cid in claims:
            out.setdefault(cid, []).append(name)
    return out


def _figures(report: dict, want: bool) -> tuple[dict, dict, str]:
    """({figure name: {title, uri, note}}, {claim: [figure names]}, why none)."""
    if not want:
        return {}, {}, "figures not drawn (--no-figures)"
    if importlib.util.find_spec("matplotlib") is None:     # an optional extra
        return {}, {}, ("figures not drawn: matplotlib is not installed "
                        "(python -m pip install matplotlib)")
    from support.reports import figures
    drawn = figures.draw_all([("this run", report, [])])
    figs = {f["name"]: {"title": f["title"], "note": f["note"],
                        "uri": "data:image/png;base64," + base64.b64encode(f["png"]).decode()}
            for f in drawn}
    return figs, figure_claims(), ""


# --------------------------------------------------------------------------- one claim
def _stated_table(c: dict) -> str:
    rows = measured.stated_rows(c)
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{_e(r['variant'])}</td><td>{_e(r['name'])}</td><td>{_e(fmt(r['stated']))}</td>"
        f"<td>{_e(r['measured'])} {_e(r['unit'])}</td><td>{_e(r['tolerance'])}</td>"
        f"<td>{_e(r['outcome'])}</td></tr>" for r in rows)
    return ("<table><tr><th>variant</th><th>figure</th><th>notes</th><th>measured</th>"
            f"<th>tolerance</th><th>outcome</th></tr>{body}</table>")


def _variants(c: dict) -> str:
    items = "".join(
        f"<li><b class='v' style='--c:{verdicts.COLOURS.get(v['verdict'], '#999')}'>"
        f"{_e(v['verdict'])}</b> <code>{_e(v.get('test', ''))}</code>"
        f"{('<pre>' + _e(v['reason']) + '</pre>') if v.get('reason') else ''}"
        f"<div class='m'>{_e(fmt(v.get('measured')))}</div></li>" for v in c.get("variants", []))
    if not items:
        return ""
    return (f"<details><summary>variants and test output ({len(c.get('variants', []))})"
            f"</summary><ul>{items}</ul></details>")


def _correction(corr) -> str:
    if corr.erratum is None:
        return (f"<p><b>suggested correction:</b> none written yet ({_e(corr.verdict)} "
                "not known to claims/expectations.toml)</p>")
    e = corr.erratum
    places = corr.places or [errata.Place(s) for s in e.spans]
    fixes = "<br>".join(
        (f"<span class='m'>line {p.line}:</span> " if p.line and p.line != corr.line else "")
        + f"<del>{tex.render(p.span.quote)}</del> &rarr; <ins>{tex.render(p.span.correction)}</ins>"
        for p in places)
    return (f"<p><b>found:</b> {_e(e.finding)}</p><p class='fix'><b>suggested correction:</b> "
            f"{'<br>' if len(places) > 1 else ''}{fixes}"
            f"{(' <span class=m>(' + _e(corr.problem) + ')</span>') if corr.problem else ''}</p>")


def detail(c: dict, loc, figs: dict, fig_ids: list[str], corrs: list | None = None,
           kept=None) -> str:
    v = c.get("verdict") or "not-run"
    where = (f"{loc.status} at line {loc.line}" if loc and loc.line else
             f"{loc.status if loc else 'not located'}: {loc.reason if loc else ''}")
    reason = reason_text(c)
    parts = [
        f"<div class='detail' id='d-{_e(c['id'])}' data-id='{_e(c['id'])}'>",
        f"<h3>{_e(c['id'])} <b class='v' style='--c:{verdicts.COLOURS.get(v, '#999')}'>{_e(v)}"
        f"</b></h3><p class='m'>{_e(verdicts.MEANING.get(v, ''))}</p>",
        f"<p>{_e(c.get('paraphrase', ''))}</p>",
        f"<p class='m'>{_e(c.get('section', ''))} · source {_e(c.get('source', ''))} · "
        f"sentence {_e(where)} · kind {_e(c.get('kind', ''))} · tier {_e(c.get('tier', ''))}</p>",
        (f"<p class='kept'><b>not run in this run; its last verdict, in a kept full run:</b> "
         f"{_e(kept.text())}</p>" if kept.why == "not run" else
         f"<p class='kept'><b>kept run:</b> {_e(kept.text())} (not this run's verdict)</p>")
        if kept else "",
        (f"<p class='control'><b>negative control:</b>{_e(control_text(c))}</p>"
         if control_text(c) else ""),
        f"<p><b>stated:</b> {_e(c.get('stated') or '-')} · <b>measured:</b> "
        f"{_e(measured.measured_text(c, only_outside=False) or '-')}</p>",
        "".join(_correction(corr) for corr in corrs or []),
        f"<p><b>tolerance:</b> {_e(c.get('tolerance') or '-')}</p>", _stated_table(c),
        f"<p><b>reason:</b> {_e(reason)}</p>" if reason else "",
        _variants(c),
        "<p><b>tests:</b></p><ul>" + "".join(f"<li><code>{_e(t)}</code></li>"
                                            for t in c.get("tests", [])) + "</ul>",
    ]
    for name in fig_ids:
        if name in figs:
            parts.append(f"<figure><img class='figure' data-src='{_e(name)}' alt='{_e(name)}'>"
                         f"<figcaption>{_e(figs[name]['title'])} {_e(figs[name]['note'])}"
                         "</figcaption></figure>")
    return "".join(parts) + "</div>"


# --------------------------------------------------------------------------- the page
def _marks(text: str, sentences: list, marked: dict[int, list[tuple[dict, object]]],
           kept: dict | None = None) -> str:
    """The text as HTML, with each claimed sentence wrapped in a highlight and its badges
    (and a kept run's verdict beside a claim this run could not run)."""
    kept = kept or {}
    stray = _stray(text)
    out, pos = [], 0
    for i in sorted(marked, key=lambda i: sentences[i].start):
        s, claims = sentences[i], marked[i]
        vs = [c.get("verdict") or "not-run" for c, _ in claims]
        worst = verdicts.worst(vs)
        is_open = any(v in verdicts.NOT_HOLDING for v in vs)
        changed = any(loc.status == "changed" for _, loc in claims)
        badges = "".join(
            f"<a class='cid{' light' if (c.get('verdict') or '') in LIGHT else ''}' "
            f"href='#d-{_e(c['id'])}' data-id='{_e(c['id'])}' "
            f"data-verdict='{_e(c.get('verdict'))}' data-status='{_e(loc.status)}' "
            f"data-open='{int(c.get('verdict') in verdicts.NOT_HOLDING)}' "
            f"style='--c:{verdicts.COLOURS.get(c.get('verdict'), '#999')}'>{_e(c['id'])}</a>"
            + (f"<span class='kept-run' data-id='{_e(c['id'])}' title='{_e(kept[c['id']].text())}'"
               f" style='--c:{verdicts.COLOURS.get(kept[c['id']].verdict, '#999')}'>"
               f"{'last full run' if kept[c['id']].why == 'not run' else 'kept run'}: "
               f"{_e(kept[c['id']].verdict)}</span>" if c["id"] in kept else "")
            for c, loc in claims)
        out.append(_gap(text, pos, s.start, stray))
        out.append(f"<mark class='claim{' changed' if changed else ''}' data-verdict='{worst}' "
                   f"data-open='{int(is_open)}' style='--c:{verdicts.COLOURS.get(worst, '#999')}'>"
                   f"{_piece(text, s.start, s.end, stray)}{badges}</mark>")
        pos = s.end
    out.append(_gap(text, pos, len(text), stray))
    return "".join(out)


_HEAD = re.compile(r"(?m)^(#{1,6} [^\n]+|[^\s#][^\n]{0,118}#)$")   # Markdown, or "Title#"
# the anchor mark a web page's headings and captions end with ("Why this matters#"), kept by a
# copy of its text: not the author's
_STRAY = re.compile(r"(?m)(?<=[^\s#])#$")


def _stray(text: str) -> set[int]:
    return {m.start() for m in _STRAY.finditer(text)}


def _piece(text: str, a: int, b: int, stray: set[int]) -> str:
    """``text[a:b]`` as HTML: escaped, formulas rendered, stray heading marks left out."""
    cut = sorted(i for i in stray if a <= i < b)
    raw = "".join(text[x:y] for x, y in zip([a] + [i + 1 for i in cut], cut + [b]))
    return tex.render(raw)


def _gap(text: str, a: int, b: int, stray: set[int]) -> str:
    """The text between highlights as HTML, its headings shown as headings."""
    out, pos = [], a
    for m in _HEAD.finditer(text, a, b):
        out.append(_piece(text, pos, m.start(), stray))
        out.append(f"<span class='h'>{_piece(text, m.start(), m.end(), stray)}</span>")
        pos = m.end()
    out.append(_piece(text, pos, b, stray))
    return "".join(out)


def _bar(report: dict, located: int, total: int, statuses: dict, name: str) -> str:
    counts = "".join(
        f"<span class='count{' light' if v in LIGHT else ''}' data-verdict='{v}' data-count='{n}' "
        f"style='--c:{verdicts.COLOURS.get(v, '#999')}' title='{_e(verdicts.MEANING.get(v, ''))}'>"
        f"{v} <b>{n}</b></span>"
        for v, n in sorted(report.get("summary", {}).items(),
                           key=lambda kv: verdicts.ORDER.index(kv[0])
                           if kv[0] in verdicts.ORDER else 99) if n)
    st = ", ".join(f"{k} {n}" for k, n in statuses.items() if n)
    no_math = tex.missing()
    sel = runs.selection(report)
    partial = ("" if sel.full else
               f" <span class='m' id='partial'><b>{_e(sel.text())}</b>: their sentences show "
               "the last verdict of a kept full run, dashed, where one exists</span>")
    return (f"<div id='bar'><div class='counts'>{counts}</div>"
            "<label><input type='checkbox' id='only-open'> only what does not hold ("
            f"{', '.join(verdicts.NOT_HOLDING)})</label> <span class='m'>{_e(name)}: {located} of "
            f"{total} claims located ({_e(st)})</span>"
            + (f" <span class='m' id='no-math'>{_e(no_math)}</span>" if no_math else "")
            + partial + "</div>")


CSS = """
body{font:15px/1.5 Georgia,serif;margin:0;color:#222}
#bar{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ccc;padding:.5em 1em;
font:13px system-ui,sans-serif;z-index:2}
.count,.cid,b.v{display:inline-block;background:var(--c);color:#fff;border-radius:3px;
padding:0 .4em;margin:0 .2em .2em 0;font:12px system-ui,sans-serif;text-decoration:none}
.light{color:#222}
.kept-run{display:inline-block;border:1px dashed var(--c);color:#222;border-radius:3px;
padding:0 .4em;margin:0 .2em .2em 0;font:11px system-ui,sans-serif}
#wrap{display:flex}#text{flex:3;white-space:pre-wrap;padding:1em 1.5em;max-width:60em}
#panel{flex:2;position:sticky;top:4em;align-self:flex-start;max-height:85vh;overflow:auto;
padding:1em;font:13px system-ui,sans-serif;border-left:1px solid #ddd}
mark.claim{background:color-mix(in srgb,var(--c) 22%,transparent);border-bottom:2px solid var(--c);
cursor:pointer}mark.claim.changed{outline:1px dashed var(--c)}
body.only-open mark.claim[data-open='0']{background:none;border:none}
body.only-open .cid[data-open='0'],body.only-open .kept-run{display:none}
.h{font-weight:bold;font-size:1.15em}#panel code,#panel pre{word-break:break-all;white-space:pre-wrap}
math{font-size:1.05em}math[display='block']{margin:.3em 0}
.fix del{background:#fdd}.fix ins{background:#dfd;text-decoration:none}
.m{color:#666;font-size:.9em}table{border-collapse:collapse}td,th{border:1px solid #ddd;
padding:2px 5px;font-size:12px}#claims .detail{border-top:1px solid #eee;padding:.3em 1em}
#claims,#unlocated{font:13px system-ui,sans-serif;padding:0 1.5em}figure img{max-width:100%}
"""

JS = r"""
(function(){
  var errors=[];
  window.addEventListener('error',function(e){errors.push(String(e.message));});
  function figs(root){var ims=root.querySelectorAll('img.figure[data-src]');
    for(var i=0;i<ims.length;i++){var f=document.getElementById('fig-'+ims[i].getAttribute('data-src'));
      if(f&&!ims[i].src){ims[i].src=f.getAttribute('src');}}}
  function show(id){var d=document.getElementById('d-'+id);var p=document.getElementById('panel');
    if(d&&p){p.innerHTML=d.innerHTML;figs(p);}}
  function filter(){document.body.classList.toggle('only-open',
    document.getElementById('only-open').checked);}
  document.addEventListener('click',function(e){
    var a=e.target.closest('.cid');var m=e.target.closest('mark.claim');
    if(a){e.preventDefault();show(a.getAttribute('data-id'));}
    else if(m){var b=m.querySelector('.cid');if(b){show(b.getAttribute('data-id'));}}});
  document.getElementById('only-open').addEventListener('change',filter);
  function check(){
    filter();figs(document);
    var b=document.querySelectorAll('#text .cid'),seen={},dup=[],vis={};
    for(var i=0;i<b.length;i++){var id=b[i].getAttribute('data-id');
      if(seen[id]){dup.push(id);}seen[id]=1;
      if(b[i].offsetParent!==null){var v=b[i].getAttribute('data-verdict');vis[v]=(vis[v]||0)+1;}}
    var c=document.querySelectorAll('#bar .count'),counts=[];
    for(var j=0;j<c.length;j++){counts.push(c[j].getAttribute('data-verdict')+':'+c[j].getAttribute('data-count'));}
    var ims=document.querySelectorAll('img.figure[src]'),ok=0;
    for(var k=0;k<ims.length;k++){if(ims[k].complete&&ims[k].naturalWidth>0){ok++;}}
    var vl=[];for(var key in vis){vl.push(key+':'+vis[key]);}
    // what a reader sees of the text: no TeX source, no heading ending in its anchor mark
    var seen_text=document.getElementById('text').innerText;
    var raw=seen_text.match(/\\[A-Za-z]+|\\[\[\]()]|\$[^$\s][^$\n]*\$/g)||[];
    var hs=document.querySelectorAll('#text .h'),stray=0;
    for(var h=0;h<hs.length;h++){if(/#\s*$/.test(hs[h].innerText)){stray++;}}
    var ms=document.querySelectorAll('#text math'),drawn=0;
    for(var q=0;q<ms.length;q++){if(ms[q].getBoundingClientRect().width>0){drawn++;}}
    var kept=document.querySelectorAll('#text .kept-run'),kl=[];
    for(var r=0;r<kept.length;r++){kl.push(kept[r].getAttribute('data-id')+':'+kept[r].textContent);}
    var el=document.getElementById('render-check');
    el.setAttribute('data-badges',b.length);el.setAttribute('data-ids',Object.keys(seen).join(','));
    el.setAttribute('data-duplicates',dup.join(','));el.setAttribute('data-visible',vl.join(','));
    el.setAttribute('data-counts',counts.join(','));el.setAttribute('data-figures',ims.length);
    el.setAttribute('data-loaded',ok);el.setAttribute('data-errors',errors.join(' | '));
    el.setAttribute('data-rawtex',raw.slice(0,5).join(' | '));el.setAttribute('data-math',ms.length);
    el.setAttribute('data-drawn',drawn);el.setAttribute('data-headings',hs.length);
    el.setAttribute('data-stray',stray);el.setAttribute('data-kept',kl.join(','));
    el.textContent='render-check done';}
  window.addEventListener('load',check);
})();
"""


def page(doc: str, notes, report: dict, located: dict, figs: dict, fig_of: dict,
         unlocated: list[tuple[dict, str]], corrs: dict | None = None,
         kept: dict | None = None) -> str:
    """One document's page. ``located``: {id: (claim, Location)} for claims found in it;
    ``corrs``: {id: [errata.Correction]}; ``kept``: {id: kept_runs.Kept}."""
    corrs, kept = corrs or {}, kept or {}
    marked: dict[int, list] = {}
    for c, loc in located.values():
        marked.setdefault(loc.sentence, []).append((c, loc))
    statuses = {s: sum(1 for _, loc in located.values() if loc.status == s)
                for s in notes_mod.STATUSES}
    total = len(located) + len(unlocated)
    shown = [c for c, _ in located.values()] + [c for c, _ in unlocated]
    details = "".join(detail(c, (located.get(c["id"]) or (None, None))[1], figs,
                             fig_of.get(c["id"], []), corrs.get(c["id"]), kept.get(c["id"]))
                      for c in shown)
    missing = "".join(f"<li><a class='cid' href='#d-{_e(c['id'])}' style='--c:"
                      f"{verdicts.COLOURS.get(c.get('verdict'), '#999')}'>{_e(c['id'])}</a> "
                      f"{_e(c.get('source', ''))}: {_e(why)}</li>" for c, why in unlocated)
    used = {n for c in shown for n in fig_of.get(c["id"], [])}
    store = "".join(f"<figure><img class='store' id='fig-{_e(n)}' src='{f['uri']}' alt='{_e(n)}'>"
                    f"<figcaption>{_e(f['title'])} {_e(f['note'])}</figcaption></figure>"
                    for n, f in figs.items() if n in used)
    name = notes.path.name if notes.path else doc
    return "".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(TITLES.get(doc, doc))} ({_e(name)}), annotated</title><style>{CSS}</style>"
        "</head><body>",
        _bar(report, len(located), total, statuses, name),
        "<div id='wrap'><div id='text'>", _marks(notes.text, notes.sentences, marked, kept),
        "</div><aside id='panel'><p class='m'>Click a highlighted sentence or an ID to see the "
        "claim: stated vs measured, the suggested correction, the reason, variants and tests."
        "</p></aside></div>",
        f"<section id='unlocated'><h2>Claims not located in this file ({len(unlocated)})</h2>"
        f"<ul>{missing}</ul></section>" if unlocated else "",
        f"<section id='claims'><h2>Every claim of this document ({total})</h2>{details}</section>",
        f"<section id='figures'><h2>Figures redrawn from this run</h2>{store}</section>"
        if store else "",
        "<p class='m'><span id='render-check'>render-check pending</span></p>",
        f"<script>{JS}</script></body></html>"])


def build(report: dict, paths, out: Path, registry: dict | None = None,
          figures: bool = True, patch: bool = False, history: Path | None = None,
          expectations: list | None = None) -> dict:
    """Write ``<document>.html`` per notes file, ``errata.md``, ``notes.json`` and, with
    ``patch``, ``<document>.patch`` (the corrections as a unified diff of its file) into
    ``out``. ``history``: where kept runs are (default claims/history)."""
    from support.rules.entries import load_entries
    registry = registry if registry is not None else load_entries()
    expectations = expectations if expectations is not None else load_expectations()
    docs = notes_mod.read_all(registry, paths)
    locs = {loc.id: loc for loc in notes_mod.locate_docs(registry, docs)}
    corrs = errata.corrections(report, docs, locs, expectations)
    by_id: dict[str, list] = {}
    for corr in corrs:
        by_id.setdefault(corr.id, []).append(corr)
    kept = kept_runs.evidence(report, history)
    # the sentences this run did not check that the last kept full run found wrong
    earlier: list = []
    for run in dict.fromkeys(k.run for k in kept.values() if k.why == "not run"):
        mine = [k for k in kept.values() if k.run == run and k.why == "not run"]
        earlier += errata.corrections({"environment": mine[0].env,
                                       "claims": [k.claim for k in mine]}, docs, locs,
                                      expectations)
    figs, fig_of, why_no_figs = _figures(report, figures)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for doc, notes in docs.items():
        located, unlocated = {}, []
        for c in report.get("claims", []):
            if c.get("document") != doc:
                continue
            loc = locs.get(c["id"])
            if loc is None:
                unlocated.append((c, "not in the registry"))
            elif loc.sentence is None:
                unlocated.append((c, f"{loc.status}: {loc.reason}"))
            else:
                located[c["id"]] = (c, loc)
        path = out / f"{doc}.html"
        path.write_text(page(doc, notes, report, located, figs, fig_of, unlocated, by_id, kept),
                        encoding="utf-8")
        written.append(path)
    files = {d: n.path.name if n.path else d for d, n in docs.items()}
    patched, problems = {}, []
    if patch:
        for doc, (diff, trouble) in notes_patch.patches(corrs, docs).items():
            problems += trouble
            if diff:
                (out / f"{doc}.patch").write_text(diff, encoding="utf-8")
                patched[doc] = f"{doc}.patch"
    (out / "errata.md").write_text(errata.markdown(report, corrs, files, kept, locs, patched,
                                                   earlier), encoding="utf-8")
    summary = {d: {s: sum(1 for loc in locs.values() if loc.document == d and loc.status == s)
                   for s in notes_mod.STATUSES} for d in docs}
    (out / "notes.json").write_text(json.dumps({
        "schema": 1, "files": files, "summary": summary,
        "claims": [dict(loc.as_json(), file=files.get(loc.document, ""))
                   for loc in locs.values()]}, indent=1), encoding="utf-8")
    return {"pages": written, "errata": out / "errata.md", "notes": out / "notes.json",
            "patches": [out / p for p in patched.values()], "patch_problems": problems,
            "corrections": corrs, "kept": kept, "earlier": earlier, "locations": locs,
            "summary": summary,
            "misquoted": errata.misquoted(expectations, registry, docs),
            "figures": why_no_figs or len(figs)}
