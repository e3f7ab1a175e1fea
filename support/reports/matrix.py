"""The claims matrix: many runs (environments) side by side.

    python -m support matrix [RUN ...] -o reports/matrix

A RUN is a ``claims.json``, a folder holding one (a tox env's ``reports/<envname>/``, a
``claims/history/<run>/`` folder), or a pytest-benchmark JSON file. With no RUN the matrix
reads every folder of ``claims/history/`` and every ``reports/*/claims.json``. Benchmark
JSON files lying in a run's folder (``bench*.json``, ``*benchmark*.json`` or any JSON with
pytest-benchmark's ``benchmarks`` list) belong to that run.

Writes ``matrix.md`` and ``matrix.html`` (one self-contained page: inline CSS and script,
figures as PNG data URIs, nothing fetched) and, where matplotlib is installed, the notes'
figures redrawn from the measured values as ``figures/*.png`` (see :mod:`support.reports.figures`).

The page shows first what differs between the environments (a verdict flipped, a stated
figure that moved beyond its tolerance, a claim newly not-applicable, a value of an API fact
that changed), then the whole table grouped by the notes' sections, then the benchmarks.
"""
from __future__ import annotations

import json
from pathlib import Path

from support.reports import page
from support.reports.benchmarks import benchmark_rows
from support.reports.controlled import control_text
from support.reports.runs import (Run, _known, _sections, cell_value, coverage_gaps,
                                  default_inputs, differences, fingerprint_rows, load)


def _bench_cells(g: dict) -> tuple:
    return (g["claim"], g["workload"], g["device"], g["run"], _time(g["median_s"]),
            "" if g["speedup_vs_cpu"] is None else f"x{g['speedup_vs_cpu']:.3g}",
            "" if g["vs_first_run"] is None else f"x{g['vs_first_run']:.3g}",
            ", ".join(f"{k.replace('ratio ', '')} {v:.3g}" for k, v in g["recorded_ratios"].items()))


BENCH_HEAD = ("claim", "workload", "device", "run", "median", "speed-up vs CPU (same run)",
              "time vs first run", "ratios recorded")


TITLE = "Lecture 11 claims across environments"
NOTHING = ("Nothing: every executed claim has the same verdict and every stated figure the "
           "same value within its tolerance.")


def verdict_cell(v, claim: dict | None = None) -> page.Cell:
    v = v or "absent"
    return page.Cell(v + (_known(claim) if claim else ""), f"v {v}")


def document(runs: list[Run], diffs: list[dict], gaps: list[dict], bench: list[dict],
             figures: list[dict], problems: list[dict]) -> list:
    """The matrix as page blocks (support/reports/page.py renders them as Markdown and HTML)."""
    names = [r.name for r in runs]
    out: list = [page.Para(f"{len(runs)} runs. Columns are runs (the folder they came from); "
                           "the fingerprint table says what distinguishes them.")]
    if problems:
        out.append(page.Bullets([f"skipped input {p['path']}: {p['problem']}" for p in problems]))
    env = [page.Row([k, *vals], strong=len(set(vals)) > 1) for k, vals in fingerprint_rows(runs)]
    out += [page.Heading(2, "Environments", "environments"), page.Table(["", *names], env, "env"),
            page.Heading(2, "What differs between the environments", "differences")]
    if not diffs:
        out.append(page.Para(NOTHING))
    else:
        out.append(page.Table(["id", "what", "detail", *names], [
            [d["id"], d["kind"], page.Cell(d["detail"], note=d["paraphrase"]),
             *(verdict_cell(d["verdicts"].get(n)) for n in names)] for d in diffs], "diff"))
    if gaps:
        out.append(page.Para(f"{len(gaps)} claims executed in some runs only (tier, device or "
                             "data not selected elsewhere): " + ", ".join(g["id"] for g in gaps),
                             "m"))
    if figures:
        out += [page.Heading(2, "Figures redrawn from the measurements", "figures"),
                page.Figures(figures)]
    if bench:
        out += [page.Heading(2, "Benchmarks", "benchmarks"),
                page.Para("Median per run, workload and device; speed-up = the CPU median of "
                          "the same workload in the same run / this median; time vs first run "
                          "= this median / the first run's on the same device.", "m"),
                page.Table(list(BENCH_HEAD), [_bench_cells(g) for g in bench], "bench")]
    out += [page.Heading(2, "All claims", "claims"),
            page.Filter("filter rows (id, words, verdict)")]
    for (doc, sec), ids in _sections(runs):
        rows = []
        for cid in ids:
            c = next(r.claims[cid] for r in runs if cid in r.claims)
            cells = []
            for r in runs:
                x = r.claims.get(cid)
                cells.append(page.Cell("absent", "absent") if x is None else page.Cell(
                    x["verdict"] + _known(x) + control_text(x), f"v {x['verdict']}",
                    cell_value(x), x.get("reason", "")))
            rows.append(page.Row([cid, c.get("paraphrase", ""), c.get("stated") or "", *cells],
                                 "claim"))
        out += [page.Heading(3, f"{doc}: {sec}"),
                page.Table(["id", "claim", "stated", *names], rows, "claims")]
    return out


def _time(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


# --------------------------------------------------------------------------- entry
def build(inputs: list[Path] | None, out: Path, figures: bool = True) -> dict:
    inputs = list(inputs or default_inputs())
    runs, problems = load(inputs)
    if not runs:
        raise SystemExit("support.reports.matrix: no runs found (claims/history/*/claims.json, "
                         "reports/*/claims.json, or pass files)")
    diffs = differences(runs)
    gaps = coverage_gaps(runs)
    bench = benchmark_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    figs: list[dict] = []
    if figures:
        try:
            from support.reports import figures as figmod
        except ImportError as exc:  # matplotlib is an optional extra
            problems.append({"path": "figures", "problem": f"not drawn: {exc} "
                             "(pip install -e '.[figures]')"})
        else:
            figs = figmod.draw_all([(r.name, r.data, r.benchmarks) for r in runs], out / "figures")
    blocks = document(runs, diffs, gaps, bench, figs, problems)
    md = out / "matrix.md"
    md.write_text(page.markdown(TITLE, blocks))
    html_path = out / "matrix.html"
    html_path.write_text(page.html_page(TITLE, blocks))
    (out / "matrix.json").write_text(json.dumps({
        "runs": [{"name": r.name, "path": str(r.path), "label": r.label,
                  "environment": r.env, "summary": r.data.get("summary", {})} for r in runs],
        "differences": diffs, "coverage_gaps": gaps, "benchmarks": bench,
        "figures": [{k: v for k, v in f.items() if k != "png"} for f in figs],
        "problems": problems}, indent=1, default=repr))
    return {"runs": runs, "differences": diffs, "benchmarks": bench, "figures": figs,
            "paths": [md, html_path, out / "matrix.json"], "problems": problems}
