"""One report page, two renderers: a page is a list of blocks (headings, paragraphs, tables,
figures), written once by the module that knows the content (the matrix, the diff) and
rendered here as Markdown or as one self-contained HTML page (inline CSS and script, figures
as PNG data URIs, nothing fetched). A new output format is a new renderer in this module.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

from support.rules.formatting import md_cell
from support.rules.verdicts import COLOURS


@dataclass
class Cell:
    text: str
    cls: str = ""          # HTML class (a verdict colours its cell)
    note: str = ""         # a second, smaller line
    title: str = ""        # HTML tooltip


@dataclass
class Row:
    cells: list
    cls: str = ""          # HTML class of the row ("claim" rows are filterable)
    strong: bool = False   # the row stands out (Markdown: its first cell in bold)


@dataclass
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass
class Para:
    text: str
    cls: str = ""


@dataclass
class Bullets:
    items: list


@dataclass
class Table:
    head: list
    rows: list = field(default_factory=list)
    cls: str = ""


@dataclass
class Figures:
    figures: list          # dicts with png (bytes), title, file, note


@dataclass
class Filter:
    placeholder: str       # HTML only: a box that hides the claim rows not matching


def cell(x) -> Cell:
    return x if isinstance(x, Cell) else Cell(str(x))


def row(x) -> Row:
    return x if isinstance(x, Row) else Row(list(x))


# --------------------------------------------------------------------------- Markdown
def markdown(title: str, blocks: list) -> str:
    out = [f"# {title}", ""]
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"* {x}" for x in b.items] + [""]
        elif isinstance(b, Table):
            out += ["| " + " | ".join(md_cell(h) for h in b.head) + " |",
                    "|" + "---|" * len(b.head)]
            for r in map(row, b.rows):
                cells = [cell(c) for c in r.cells]
                texts = [md_cell(" ".join(x for x in (c.text, c.note) if x)) for c in cells]
                if r.strong and texts:
                    texts[0] = f"**{texts[0]}**"
                out.append("| " + " | ".join(texts) + " |")
            out.append("")
        elif isinstance(b, Figures):
            out += [f"* `{f['file']}`: {f['title']}" + (f" ({f['note']})" if f.get("note") else "")
                    for f in b.figures] + [""]
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- HTML
def _e(x) -> str:
    return html.escape(str(x), quote=True)


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 1em}td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top}th{background:#f4f4f4;position:sticky;top:0}
td.v{white-space:nowrap}.absent{color:#bbb}
.m{color:#555;font-size:.9em}
figure{display:inline-block;margin:.5em;vertical-align:top;max-width:48%}
figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.9em;color:#444}
#filter{margin:.5em 0;padding:3px;width:20em}.hidden{display:none}
#render-check{color:#888;font-size:.8em}
tr.differs td{background:#fff4d6;font-weight:600}
""" + "".join(f".{v}{{background:{c}22}}" for v, c in COLOURS.items())

# Filters the claim rows, and leaves a render check in the DOM for the browser tests.
JS = """
(function(){
  var errors=[];
  window.addEventListener('error',function(e){errors.push(String(e.message));});
  function check(){
    var imgs=document.querySelectorAll('img.figure');var ok=0;
    for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0){ok++;}}
    var t=document.querySelectorAll('table').length;
    var rows=document.querySelectorAll('tr.claim').length;
    var el=document.getElementById('render-check');
    var s='render-check figures='+imgs.length+' loaded='+ok+' tables='+t+' claim-rows='+rows+
          ' errors='+errors.length;
    el.textContent=s;el.setAttribute('data-figures',imgs.length);el.setAttribute('data-loaded',ok);
    el.setAttribute('data-tables',t);el.setAttribute('data-rows',rows);
    el.setAttribute('data-errors',errors.join(' | '));
  }
  window.addEventListener('load',check);
  document.addEventListener('DOMContentLoaded',function(){
    var f=document.getElementById('filter');
    if(f){f.addEventListener('input',function(){
      var q=f.value.toLowerCase();var rows=document.querySelectorAll('tr.claim');
      for(var i=0;i<rows.length;i++){
        rows[i].classList.toggle('hidden',q!==''&&rows[i].textContent.toLowerCase().indexOf(q)<0);}
    });}
  });
})();
"""


def _td(c: Cell) -> str:
    cls = f" class='{_e(c.cls)}'" if c.cls else ""
    title = f" title='{_e(c.title)}'" if c.title else ""
    note = f"<div class='m'>{_e(c.note)}</div>" if c.note else ""
    return f"<td{cls}{title}>{_e(c.text)}{note}</td>"


def _html_block(b) -> str:
    if isinstance(b, Heading):
        anchor = f" id='{_e(b.anchor)}'" if b.anchor else ""
        return f"<h{b.level}{anchor}>{_e(b.text)}</h{b.level}>"
    if isinstance(b, Para):
        return f"<p class='{_e(b.cls)}'>{_e(b.text)}</p>" if b.cls else f"<p>{_e(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in b.items) + "</ul>"
    if isinstance(b, Table):
        cls = f" class='{_e(b.cls)}'" if b.cls else ""
        rows = [f"<table{cls}><tr>" + "".join(f"<th>{_e(h)}</th>" for h in b.head) + "</tr>"]
        for r in map(row, b.rows):
            rc = " ".join(x for x in (r.cls, "differs" if r.strong else "") if x)
            rows.append((f"<tr class='{_e(rc)}'>" if rc else "<tr>")
                        + "".join(_td(cell(c)) for c in r.cells) + "</tr>")
        return "".join(rows) + "</table>"
    if isinstance(b, Figures):
        out = []
        for f in b.figures:
            uri = "data:image/png;base64," + base64.b64encode(f["png"]).decode()
            note = f" <em>{_e(f['note'])}</em>" if f.get("note") else ""
            out.append(f"<figure><img class='figure' alt='{_e(f['title'])}' src='{uri}'>"
                       f"<figcaption>{_e(f['title'])}{note}</figcaption></figure>")
        return "".join(out)
    if isinstance(b, Filter):
        return f"<input id='filter' placeholder='{_e(b.placeholder)}'>"
    raise TypeError(f"not a page block: {b!r}")


def html_page(title: str, blocks: list, intro: str = "") -> str:
    return "\n".join(
        ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
         "<meta name='viewport' content='width=device-width,initial-scale=1'>",
         f"<title>{_e(title)}</title><style>{CSS}</style><script>{JS}</script></head><body>",
         f"<h1>{_e(title)}</h1>",
         f"<p>{_e(intro)} <span id='render-check'>render-check pending</span></p>"]
        + [_html_block(b) for b in blocks] + ["</body></html>"])
