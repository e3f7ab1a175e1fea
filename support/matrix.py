"""The claims matrix: many runs (environments) side by side.

    python -m support matrix [RUN ...] -o reports/matrix

A RUN is a ``claims.json``, a folder holding one (a tox env's ``reports/<envname>/``, a
``claims/history/<run>/`` folder), or a pytest-benchmark JSON file. With no RUN the matrix
reads every folder of ``claims/history/`` and every ``reports/*/claims.json``. Benchmark
JSON files lying in a run's folder (``bench*.json``, ``*benchmark*.json`` or any JSON with
pytest-benchmark's ``benchmarks`` list) belong to that run.

Writes ``matrix.md`` and ``matrix.html`` (one self-contained page: inline CSS and script,
figures as PNG data URIs, nothing fetched) and, where matplotlib is installed, the notes'
figures redrawn from the measured values as ``figures/*.png`` (see :mod:`support.figures`).

The page shows first what differs between the environments (a verdict flipped, a stated
figure that moved beyond its tolerance, a claim newly not-applicable, a value of an API fact
that changed), then the whole table grouped by the notes' sections, then the benchmarks.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import environment, formatting, tolerances
from .verdicts import EXECUTED as RAN

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ROOT / "claims" / "history"
REPORTS = ROOT / "reports"
# a claim that ran: its figures can be compared across runs
EXECUTED = RAN + ("partial",)
TIMING = re.compile(r"time|wall|speed|(^|[_ ])(ms|s)($|[_ ])|per epoch", re.I)


# --------------------------------------------------------------------------- loading
@dataclass
class Run:
    """One environment's run: its claims report and the benchmark files beside it."""
    name: str
    path: Path
    data: dict
    benchmarks: list[dict] = field(default_factory=list)

    @property
    def env(self) -> dict:
        return self.data.get("environment", {})

    @property
    def label(self) -> str:
        return environment.label(self.env)

    @property
    def claims(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.data.get("claims", [])}


def is_benchmark_json(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and \
        "claims" not in data


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _bench_files(folder: Path) -> list[tuple[Path, dict]]:
    out = []
    for p in sorted(folder.rglob("*.json")):
        if p.name == "claims.json" or p.name.endswith(".tmp"):
            continue
        d = _read_json(p)
        if is_benchmark_json(d):
            out.append((p, d))
    return out


def _run_name(folder: Path) -> str:
    try:
        rel = folder.resolve().relative_to(ROOT)
        parts = rel.parts
        if parts[:2] == ("claims", "history"):
            return "/".join(parts[2:]) or folder.name
        return "/".join(parts)
    except ValueError:
        return folder.name


def default_inputs() -> list[Path]:
    """Every run kept in claims/history/ and every tox env's report in reports/."""
    found: list[Path] = []
    if HISTORY.is_dir():
        found += sorted(p.parent for p in HISTORY.rglob("claims.json"))
    if REPORTS.is_dir():
        found += sorted(p.parent for p in REPORTS.glob("*/claims.json")
                        if p.parent.name != "matrix")
    return found


def load(inputs: list[Path]) -> tuple[list[Run], list[dict]]:
    """Runs from claims.json files or folders; stray benchmark files become their own runs.

    Returns the runs and a list of problems (unreadable inputs) to show in the report.
    """
    runs: list[Run] = []
    problems: list[dict] = []
    seen: set[Path] = set()
    seen_content: set = set()
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            cj = p / "claims.json"
            if cj.exists():
                p = cj
            else:
                benches = _bench_files(p)
                if not benches:
                    problems.append({"path": str(raw), "problem": "no claims.json or benchmark JSON in it"})
                    continue
                runs.append(_bench_only_run(p, benches))
                continue
        if p.resolve() in seen:
            continue
        seen.add(p.resolve())
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest and digest in seen_content:
            # the same report kept in claims/history/ and still in reports/: one column
            continue
        seen_content.add(digest)
        data = _read_json(p)
        if data is None:
            problems.append({"path": str(raw), "problem": "not readable as JSON"})
            continue
        if is_benchmark_json(data):
            runs.append(_bench_only_run(p.parent, [(p, data)], name=p.stem))
            continue
        if not isinstance(data, dict) or "claims" not in data:
            problems.append({"path": str(raw), "problem": "neither a claims report nor benchmark JSON"})
            continue
        if data.get("schema") != 1:
            problems.append({"path": str(raw), "problem": f"schema {data.get('schema')!r}, read as schema 1"})
        folder = p.parent
        runs.append(Run(name=_run_name(folder), path=folder, data=data,
                        benchmarks=[dict(d, _file=str(bp)) for bp, d in _bench_files(folder)]))
    _unique_names(runs)
    return runs, problems


def _bench_only_run(folder: Path, benches, name: str | None = None) -> Run:
    first = benches[0][1]
    fw = first.get("machine_info", {}).get("frameworks", {})
    env = {"versions": {k: v for k, v in fw.items() if v},
           "python": first.get("machine_info", {}).get("python_version"),
           "cpu": (first.get("machine_info", {}).get("cpu") or {}).get("brand_raw"),
           "devices": first.get("machine_info", {}).get("devices") or []}
    if isinstance(env["devices"], dict):
        env["devices"] = [dict(v, type=k.rsplit(":", 1)[-1]) for k, v in env["devices"].items()
                          if isinstance(v, dict)]
    data = {"schema": 1, "environment": env, "summary": {}, "claims": []}
    return Run(name=name or _run_name(folder), path=folder, data=data,
               benchmarks=[dict(d, _file=str(p)) for p, d in benches])


def _unique_names(runs: list[Run]) -> None:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
        if counts[r.name] > 1:
            r.name = f"{r.name}#{counts[r.name]}"


# --------------------------------------------------------------------------- comparing
def _num(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _tol(d: dict | None) -> tolerances.Tol:
    if not d:
        return tolerances.TABLE["exact"]
    names = set(tolerances.Tol.__dataclass_fields__)
    return tolerances.Tol(**{k: v for k, v in d.items() if k in names})


def moved(a, b, stated, tol: dict | None) -> bool:
    """Whether two measurements of the same stated figure differ by more than its tolerance.

    The band is the one the tolerance allows around the stated figure: a value that moved
    inside it is noise for the notes' purposes; one that moved further is news.
    """
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return a != b
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) != math.isnan(y)
    t = _tol(tol)
    try:
        s = abs(tolerances.as_float(stated))
    except (TypeError, ValueError):
        s = max(abs(x), abs(y))
    if t.factor:
        if x == 0 or y == 0:
            return x != y
        return max(abs(x), abs(y)) / min(abs(x), abs(y)) > t.factor
    if t.at_most or t.at_least:
        return False  # a bound: only crossing it counts, and "within" says that
    band = t.atol + t.rtol * s
    if t.printed:
        try:
            band += tolerances.printed_halfwidth(stated)
        except (TypeError, ValueError):
            pass
    return abs(x - y) > 2 * band if band else x != y


def _figures(claim: dict) -> dict[str, dict]:
    """Every recorded measurement of a claim, keyed 'variant:name' when there are variants."""
    out = {}
    variants = claim.get("variants", [])
    multi = len(variants) > 1
    for v in variants:
        tag = v.get("variant") or v.get("test", "").split("::")[-1].split("[")[0]
        for name, m in (v.get("figures") or {}).items():
            out[f"{tag}:{name}" if multi else name] = m
    return out


def differences(runs: list[Run]) -> list[dict]:
    """What differs between the runs, claim by claim, most important first."""
    rows = []
    ids = sorted({cid for r in runs for cid in r.claims})
    for cid in ids:
        cells = {r.name: r.claims.get(cid) for r in runs}
        verdicts = {n: (c or {}).get("verdict") for n, c in cells.items()}
        executed = {n: v for n, v in verdicts.items() if v in EXECUTED}
        any_claim = next(c for c in cells.values() if c)
        base = {"id": cid, "paraphrase": any_claim.get("paraphrase", ""),
                "section": any_claim.get("section", ""), "verdicts": verdicts}
        if any_claim.get("kind") == "d":
            # a timing claim moves with the machine's load as much as with a release
            base["paraphrase"] = "[timing claim: compare runs on an idle machine] " + base["paraphrase"]
        if len(set(executed.values())) > 1:
            rows.append(dict(base, kind="verdict flipped",
                             detail=", ".join(f"{n}: {v}{_known(cells[n])}"
                                              for n, v in executed.items())))
        na = [n for n, v in verdicts.items() if v == "not-applicable"]
        if na and executed:
            reasons = "; ".join(dict.fromkeys(cells[n].get("reason", "") for n in na if cells[n]))
            rows.append(dict(base, kind="newly not-applicable",
                             detail=f"not-applicable in {', '.join(na)} ({reasons}); "
                                    f"executed in {', '.join(executed)}"))
        figs = {n: _figures(c) for n, c in cells.items() if c and verdicts[n] in EXECUTED}
        names = sorted({k for f in figs.values() for k in f})
        for fname in names:
            have = {n: f[fname] for n, f in figs.items() if fname in f}
            if len(have) < 2:
                continue
            ms = list(have.values())
            stated = next((m["stated"] for m in ms if "stated" in m), None)
            if stated is not None:
                within = {n: m.get("within") for n, m in have.items()}
                ref_n, ref = next(iter(have.items()))
                far = [n for n, m in have.items()
                       if moved(ref["value"], m["value"], stated, m.get("tolerance"))]
                if len(set(within.values())) > 1 or far:
                    timing = " [a timing: it moves with the load too]" if TIMING.search(fname) else ""
                    rows.append(dict(base, kind="figure moved", figure=fname, stated=stated,
                                     values={n: m["value"] for n, m in have.items()},
                                     detail=f"{fname}{timing}: stated {stated}; " + ", ".join(
                                         f"{n}: {fmt(m['value'])}{'' if m.get('within') else ' (out)'}"
                                         for n, m in have.items())))
            else:
                vals = [m["value"] for m in ms]
                # Unstated floats are measurements (times, errors) that always jitter; a
                # changed count, flag or string is an API fact that changed.
                if all(isinstance(v, (bool, int, str)) for v in vals) and \
                        len({json.dumps(v) for v in vals}) > 1:
                    rows.append(dict(base, kind="value changed", figure=fname,
                                     values={n: m["value"] for n, m in have.items()},
                                     detail=f"{fname}: " + ", ".join(
                                         f"{n}: {fmt(m['value'])}" for n, m in have.items())))
    order = ("verdict flipped", "newly not-applicable", "figure moved", "value changed")
    rows.sort(key=lambda r: (order.index(r["kind"]), r["id"]))
    return rows


def coverage_gaps(runs: list[Run]) -> list[dict]:
    """Claims executed in some runs but not in others (a tier or device not selected)."""
    out = []
    ids = sorted({cid for r in runs for cid in r.claims})
    for cid in ids:
        verdicts = {r.name: (r.claims.get(cid) or {}).get("verdict") for r in runs}
        ran = [n for n, v in verdicts.items() if v in EXECUTED]
        idle = [n for n, v in verdicts.items() if v in ("not-run", "skipped", None)]
        if ran and idle:
            out.append({"id": cid, "ran": ran, "idle": {n: verdicts[n] or "absent" for n in idle}})
    return out


# --------------------------------------------------------------------------- benchmarks
def _bench_device(b: dict) -> str:
    ei = b.get("extra_info") or {}
    params = b.get("params") or {}
    return str(ei.get("device") or params.get("device") or "cpu")


def _workload(b: dict, device: str) -> str:
    """The benchmark's name without its device parameter: the same workload on any device."""
    name = b.get("name") or b.get("fullname") or "?"
    if "[" in name and name.endswith("]"):
        base, ids = name[:-1].split("[", 1)
        parts = [x for x in ids.split("-") if x != device]
        return f"{base}[{'-'.join(parts)}]" if parts else base
    return name


def _cpu_twin(device: str) -> str:
    """The CPU device a device is compared with: 'cpu' for torch's, 'jax:cpu' for 'jax:cuda'."""
    return device.rsplit(":", 1)[0] + ":cpu" if ":" in device else "cpu"


def benchmark_rows(runs: list[Run]) -> list[dict]:
    """One row per (run, workload, device): the median, the ratios the benchmark recorded in
    extra_info, the speed-up over the CPU in the same run, and the ratio to the first run
    that measured the same workload on the same device (a version's effect)."""
    rows = []
    for r in runs:
        for f in r.benchmarks:
            for b in f.get("benchmarks", []):
                med = (b.get("stats") or {}).get("median")
                if med is None:
                    continue
                dev = _bench_device(b)
                ei = b.get("extra_info") or {}
                rows.append({"run": r.name, "label": r.label, "group": b.get("group") or "",
                             "claim": ei.get("claim", ""), "workload": _workload(b, dev),
                             "device": dev, "median_s": med,
                             "recorded_ratios": {k: v for k, v in ei.items()
                                                 if k.startswith("ratio") and isinstance(v, (int, float))}})
    by_key = {(g["run"], g["workload"], g["device"]): g for g in rows}
    first: dict[tuple, float] = {}
    for g in rows:
        twin = by_key.get((g["run"], g["workload"], _cpu_twin(g["device"])))
        g["speedup_vs_cpu"] = (twin["median_s"] / g["median_s"]
                               if twin and twin is not g and g["median_s"] else None)
        key = (g["workload"], g["device"])
        if key not in first:
            first[key] = g["median_s"]
            g["vs_first_run"] = None
        else:
            g["vs_first_run"] = g["median_s"] / first[key] if first[key] else None
    rows.sort(key=lambda g: (g["claim"], g["workload"], g["device"], g["run"]))
    return rows


def _bench_cells(g: dict) -> tuple:
    return (g["claim"], g["workload"], g["device"], g["run"], _time(g["median_s"]),
            "" if g["speedup_vs_cpu"] is None else f"x{g['speedup_vs_cpu']:.3g}",
            "" if g["vs_first_run"] is None else f"x{g['vs_first_run']:.3g}",
            ", ".join(f"{k.replace('ratio ', '')} {v:.3g}" for k, v in g["recorded_ratios"].items()))


BENCH_HEAD = ("claim", "workload", "device", "run", "median", "speed-up vs CPU (same run)",
              "time vs first run", "ratios recorded")


# --------------------------------------------------------------------------- formatting
def fmt(v) -> str:
    """A matrix cell: short lists, short text."""
    return formatting.fmt(v, max_items=4, max_chars=60)


def cell_value(claim: dict | None, limit: int = 3) -> str:
    """The measured figures worth showing in a cell: stated ones first."""
    if not claim:
        return ""
    figs = _figures(claim)
    stated = [(k, m) for k, m in figs.items() if "stated" in m]
    other = [(k, m) for k, m in figs.items() if "stated" not in m and not isinstance(m.get("value"), list)]
    pick = (stated + other)[:limit]
    if len(figs) == 1 and pick:
        return fmt(pick[0][1]["value"])
    text = "; ".join(f"{k.split(':')[-1]}={fmt(m['value'])}" for k, m in pick)
    more = len(figs) - len(pick)
    return text + (f"; +{more}" if more > 0 else "")


def fingerprint_rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """Environment facts as rows (what distinguishes the columns)."""
    def dev(r):
        acc = [f"{d.get('type')}: {d.get('name')}" for d in r.env.get("devices", [])
               if d.get("type") not in ("cpu", None)]
        return "; ".join(acc) or "cpu only"
    keys = []
    for r in runs:
        for k in r.env.get("versions", {}):
            if k not in keys:
                keys.append(k)
    rows = [("label", [r.label for r in runs]),
            ("python", [str(r.env.get("python", "")) for r in runs]),
            ("cpu", [str(r.env.get("cpu", "")) for r in runs]),
            ("accelerators", [dev(r) for r in runs])]
    main = ["torch", "jax", "jaxlib", "optax", "numpy", "scipy", "scikit-learn"]
    for k in main + [k for k in keys if k not in main]:
        rows.append((k, [str(r.env.get("versions", {}).get(k, "-")) for r in runs]))
    prec = []
    for r in runs:
        for k in r.env.get("precision", {}):
            if k not in prec:
                prec.append(k)
    for k in prec:
        rows.append((k, [str(r.env.get("precision", {}).get(k, "-")) for r in runs]))
    rows.append(("threads", [str((r.env.get("threads") or {}).get("torch_threads", "")) for r in runs]))
    rows.append(("suite commit", [str(r.env.get("suite_commit", "")) for r in runs]))
    rows.append(("wall time (s)", [str(r.data.get("elapsed_s", "")) for r in runs]))
    rows.append(("verdicts", [", ".join(f"{k} {n}" for k, n in r.data.get("summary", {}).items() if n)
                              for r in runs]))
    return rows


def _sections(runs: list[Run]) -> list[tuple[tuple[str, str], list[str]]]:
    meta: dict[str, dict] = {}
    for r in runs:
        for cid, c in r.claims.items():
            meta.setdefault(cid, c)
    groups: dict[tuple[str, str], list[str]] = {}
    for cid, c in sorted(meta.items(), key=lambda kv: (kv[1].get("document") != "lecture",
                                                        kv[1].get("section", ""), kv[0])):
        groups.setdefault((c.get("document", ""), c.get("section", "")), []).append(cid)
    return list(groups.items())


_md = formatting.md_cell


def markdown(runs: list[Run], diffs: list[dict], gaps: list[dict], bench: list[dict],
             figures: list[dict], problems: list[dict]) -> str:
    names = [r.name for r in runs]
    out = ["# Lecture 11 claims across environments", ""]
    out += [f"{len(runs)} runs. Columns are runs (the folder they came from); the fingerprint "
            "table says what distinguishes them.", ""]
    for p in problems:
        out.append(f"* skipped input `{p['path']}`: {p['problem']}")
    out += ["## Environments", "", "| | " + " | ".join(map(_md, names)) + " |",
            "|---|" + "---|" * len(names)]
    for k, vals in fingerprint_rows(runs):
        k = f"**{k}**" if len(set(vals)) > 1 else k   # bold: what tells the columns apart
        out.append(f"| {k} | " + " | ".join(_md(v) for v in vals) + " |")
    out += ["", "## What differs between the environments", ""]
    if not diffs:
        out.append("Nothing: every executed claim has the same verdict and every stated figure "
                   "the same value within its tolerance.")
    else:
        out += ["| id | what | detail | " + " | ".join(map(_md, names)) + " |",
                "|---|---|---|" + "---|" * len(names)]
        for d in diffs:
            out.append(f"| {d['id']} | {d['kind']} | {_md(d['detail'])} | " +
                       " | ".join(_md(d["verdicts"].get(n) or "absent") for n in names) + " |")
    if gaps:
        out += ["", f"{len(gaps)} claims executed in some runs only (tier, device or data not "
                "selected elsewhere): " + ", ".join(g["id"] for g in gaps[:60]) +
                (" ..." if len(gaps) > 60 else "")]
    if figures:
        out += ["", "## Figures redrawn from the measurements", ""]
        for f in figures:
            out.append(f"* `{f['file']}`: {f['title']}" + (f" ({f['note']})" if f.get("note") else ""))
    if bench:
        out += ["", "## Benchmarks", "",
                "| " + " | ".join(BENCH_HEAD) + " |", "|" + "---|" * len(BENCH_HEAD)]
        for g in bench:
            out.append("| " + " | ".join(_md(x) for x in _bench_cells(g)) + " |")
    out += ["", "## All claims", ""]
    for (doc, sec), ids in _sections(runs):
        out += [f"### {doc}: {sec}", "",
                "| id | claim | stated | " + " | ".join(map(_md, names)) + " |",
                "|---|---|---|" + "---|" * len(names)]
        for cid in ids:
            c = next(r.claims[cid] for r in runs if cid in r.claims)
            cells = []
            for r in runs:
                x = r.claims.get(cid)
                cells.append("" if x is None else f"{x['verdict']}{_known(x)} {cell_value(x)}".strip())
            out.append(f"| {cid} | {_md(c.get('paraphrase', ''))} | {_md(c.get('stated') or '')} | " +
                       " | ".join(_md(x) for x in cells) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def _time(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


# --------------------------------------------------------------------------- HTML
CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 1em}td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top}th{background:#f4f4f4;position:sticky;top:0}
td.v{white-space:nowrap}.holds{background:#e3f6e3}.drift{background:#fff4d6}
.fails{background:#fde2e2}.error{background:#f8c8c8}.not-applicable{background:#e8eefc}
.skipped,.not-run,.pending,.not-testable{color:#888}.absent{color:#bbb}
.m{color:#555;font-size:.9em}.diff td{background:#fffbe8}
figure{display:inline-block;margin:.5em;vertical-align:top;max-width:48%}
figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.9em;color:#444}
#filter{margin:.5em 0;padding:3px;width:20em}.hidden{display:none}
#render-check{color:#888;font-size:.8em}
tr.differs td{background:#fff4d6;font-weight:600}
"""

# Filters the table, and leaves a render check in the DOM for the browser test.
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


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def html_page(runs: list[Run], diffs: list[dict], gaps: list[dict], bench: list[dict],
              figures: list[dict], problems: list[dict]) -> str:
    names = [r.name for r in runs]
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    p = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
         "<meta name='viewport' content='width=device-width,initial-scale=1'>",
         "<title>Lecture 11 claims across environments</title>",
         f"<style>{CSS}</style><script>{JS}</script></head><body>",
         "<h1>Lecture 11 claims across environments</h1>",
         f"<p>{len(runs)} runs; columns are runs, described by their fingerprint below. "
         "<span id='render-check'>render-check pending</span></p>"]
    for pr in problems:
        p.append(f"<p class='m'>skipped input <code>{_e(pr['path'])}</code>: {_e(pr['problem'])}</p>")
    p.append("<h2 id='environments'>Environments</h2><table class='env'><tr><th></th>" + head + "</tr>")
    for k, vals in fingerprint_rows(runs):
        cls = " class='differs'" if len(set(vals)) > 1 else ""
        p.append(f"<tr{cls}><th>{_e(k)}</th>" + "".join(f"<td>{_e(v)}</td>" for v in vals) + "</tr>")
    p.append("</table>")
    p.append("<h2 id='differences'>What differs between the environments</h2>")
    if not diffs:
        p.append("<p>Nothing: every executed claim has the same verdict and every stated figure "
                 "the same value within its tolerance.</p>")
    else:
        p.append("<table class='diff'><tr><th>id</th><th>what</th><th>detail</th>" + head + "</tr>")
        for d in diffs:
            cells = "".join(_verdict_td(d["verdicts"].get(n)) for n in names)
            p.append(f"<tr><td>{_e(d['id'])}</td><td>{_e(d['kind'])}</td>"
                     f"<td>{_e(d['detail'])}<div class='m'>{_e(d['paraphrase'])}</div></td>{cells}</tr>")
        p.append("</table>")
    if gaps:
        p.append(f"<p class='m'>{len(gaps)} claims executed in some runs only (tier, device or "
                 "data not selected elsewhere): " + _e(", ".join(g["id"] for g in gaps)) + "</p>")
    if figures:
        p.append("<h2 id='figures'>Figures redrawn from the measurements</h2>")
        for f in figures:
            uri = "data:image/png;base64," + base64.b64encode(f["png"]).decode()
            note = f" <em>{_e(f['note'])}</em>" if f.get("note") else ""
            p.append(f"<figure><img class='figure' alt='{_e(f['title'])}' src='{uri}'>"
                     f"<figcaption>{_e(f['title'])}{note}</figcaption></figure>")
    if bench:
        p.append("<h2 id='benchmarks'>Benchmarks</h2><p class='m'>Median per run, workload and "
                 "device; speed-up = the CPU median of the same workload in the same run / this "
                 "median; time vs first run = this median / the first run's on the same device.</p>")
        p.append("<table class='bench'><tr>" + "".join(f"<th>{_e(h)}</th>" for h in BENCH_HEAD) + "</tr>")
        for g in bench:
            p.append("<tr>" + "".join(f"<td>{_e(x)}</td>" for x in _bench_cells(g)) + "</tr>")
        p.append("</table>")
    p.append("<h2 id='claims'>All claims</h2><input id='filter' placeholder='filter rows (id, "
             "words, verdict)'>")
    for (doc, sec), ids in _sections(runs):
        p.append(f"<h3>{_e(doc)}: {_e(sec)}</h3><table class='claims'><tr><th>id</th><th>claim</th>"
                 f"<th>stated</th>{head}</tr>")
        for cid in ids:
            c = next(r.claims[cid] for r in runs if cid in r.claims)
            cells = []
            for r in runs:
                x = r.claims.get(cid)
                if x is None:
                    cells.append("<td class='absent'>absent</td>")
                    continue
                tip = _e(x.get("reason", ""))
                cells.append(f"<td class='v {_e(x['verdict'])}' title='{tip}'>{_e(x['verdict'] + _known(x))}"
                             f"<div class='m'>{_e(cell_value(x))}</div></td>")
            p.append(f"<tr class='claim'><td>{_e(cid)}</td><td>{_e(c.get('paraphrase', ''))}</td>"
                     f"<td>{_e(c.get('stated') or '')}</td>{''.join(cells)}</tr>")
        p.append("</table>")
    p.append("</body></html>")
    return "\n".join(p)


def _known(claim: dict) -> str:
    """' (known)' when the verdict is the one claims/expectations.toml lists for that run."""
    exp = claim.get("expected") or {}
    return " (known)" if exp.get("verdict") and exp["verdict"] == claim.get("verdict") else ""


def _verdict_td(v) -> str:
    v = v or "absent"
    return f"<td class='v {_e(v)}'>{_e(v)}</td>"


# --------------------------------------------------------------------------- entry
def build(inputs: list[Path] | None, out: Path, figures: bool = True) -> dict:
    inputs = list(inputs or default_inputs())
    runs, problems = load(inputs)
    if not runs:
        raise SystemExit("support.matrix: no runs found (claims/history/*/claims.json, "
                         "reports/*/claims.json, or pass files)")
    diffs = differences(runs)
    gaps = coverage_gaps(runs)
    bench = benchmark_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    figs: list[dict] = []
    if figures:
        try:
            from . import figures as figmod
        except ImportError as exc:  # matplotlib is an optional extra
            problems.append({"path": "figures", "problem": f"not drawn: {exc} "
                             "(pip install -e '.[figures]')"})
        else:
            figs = figmod.draw_all([(r.name, r.data, r.benchmarks) for r in runs], out / "figures")
    md = out / "matrix.md"
    md.write_text(markdown(runs, diffs, gaps, bench, figs, problems))
    page = out / "matrix.html"
    page.write_text(html_page(runs, diffs, gaps, bench, figs, problems))
    (out / "matrix.json").write_text(json.dumps({
        "runs": [{"name": r.name, "path": str(r.path), "label": r.label,
                  "environment": r.env, "summary": r.data.get("summary", {})} for r in runs],
        "differences": diffs, "coverage_gaps": gaps, "benchmarks": bench,
        "figures": [{k: v for k, v in f.items() if k != "png"} for f in figs],
        "problems": problems}, indent=1, default=repr))
    return {"runs": runs, "differences": diffs, "benchmarks": bench, "figures": figs,
            "paths": [md, page, out / "matrix.json"], "problems": problems}


def arguments(command: str, parser) -> None:
    parser.add_argument("inputs", nargs="*", type=Path,
                        help="claims.json files, run folders or benchmark JSON (default: "
                             "claims/history/* and reports/*/claims.json)")
    parser.add_argument("-o", "--out", type=Path, default=Path("reports/matrix"))
    parser.add_argument("--no-figures", action="store_true", help="skip the matplotlib figures")


def run(command: str, args) -> int:
    res = build(args.inputs, args.out, figures=not args.no_figures)
    print(f"{len(res['runs'])} runs: " + ", ".join(f"{r.name} ({r.label})" for r in res["runs"]))
    kinds: dict[str, int] = {}
    for d in res["differences"]:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    print("differences: " + (", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"))
    for d in res["differences"][:40]:
        print(f"  {d['id']:<9} {d['kind']:<20} {d['detail'][:150]}")
    for pr in res["problems"]:
        print(f"  note: {pr['path']}: {pr['problem']}")
    print("written: " + ", ".join(str(p) for p in res["paths"]) +
          (f", {len(res['figures'])} figures" if res["figures"] else ""))
    return 0
