"""What changed between two runs: ``python -m support diff OLD NEW`` (support/commands/diff.py).

OLD and NEW are each a ``claims.json``, a folder holding one (a tox env's
``reports/<env>/``, a ``claims/history/<run>/``), or ``last`` (the newest run kept in
``claims/history/``; ``last:LABEL`` the newest kept with that label, e.g. ``last:latest``).
The comparison finds

* **changes**: a verdict that changed (or stayed, but known in one run and unexpected in the
  other), a claim that became not-applicable or partial (or stopped being), a stated figure
  that moved beyond its tolerance, an API fact (a count, a flag, a string) that changed;
* **not counted**: the same for timing claims (kind d, a verdict that is or was
  inconclusive, a miss of timings judged by their interval, figures that are times), which
  move with the machine's load as much as with a release (``--count-timing`` counts them);
* **not compared**: claims that ran in one run only (a tier, device or the data not selected);
* **environment**: the versions and machine facts that differ.

The comparison is :func:`support.reports.runs.differences` on the two runs, read in the OLD -> NEW
direction, each change labelled by its cause (support/reports/causes.py). The command's exit
status: 1 when a claim changed, 0 when none did (differing versions alone are not a change: a
release that moves no sentence passes), 2 when an input is unreadable. A run kept in
``claims/history/`` for the next ``diff last ...`` is support/reports/keep.py's.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from support.reports import causes, matrix, page, runs
from support.rules import tolerances

# verdicts that say the claim was measured here; the verdict machinery may add more
MEASURED = tuple(dict.fromkeys(runs.EXECUTED + ("partial", "inconclusive")))
NOT_ENV = ("label", "suite commit", "wall time (s)", "verdicts", "selection")
COUNTED = ("verdict changed", "expectation changed", "became partial", "no longer partial",
           "became not-applicable", "no longer not-applicable", "figure moved", "value changed")


class DiffError(ValueError):
    """An input is missing or not a claims report."""


# --------------------------------------------------------------------------- inputs
def resolve(spec: str | Path, history: Path = runs.HISTORY,
            like: runs.Run | None = None) -> tuple[Path, str]:
    """A path, or ``last`` / ``last:LABEL``: the newest run kept in ``history`` (whose label,
    the folder name after its date, starts with ``LABEL-``), with a line saying how it was
    chosen ("" for a path).

    Given the run it is to be compared with (``like``), ``last`` picks the newest kept run of
    the same selection (the same tiers and filters: support.reports.runs.Selection), else the
    newest full one; a partial kept run is never the silent baseline of a full run: where no
    other is kept, it is taken and the line says so."""
    s = str(spec)
    if not (s == "last" or s.startswith("last:")):
        return Path(spec), ""
    label = s.partition(":")[2]
    kept = sorted((p.parent for p in history.glob("*/claims.json")
                   if not label or _label_of(p.parent.name).startswith(label + "-")),
                  key=lambda p: p.name, reverse=True)
    if not kept:
        raise DiffError(f"{s}: no run kept in {history}" +
                        (f" with the label {label!r}" if label else ""))
    if like is None:
        return kept[0], ""
    want = runs.selection(like.data)
    chosen = {}
    for p in kept:
        loaded = runs.load([p])[0]
        chosen[p] = runs.selection(loaded[0].data) if loaded else None
    same = [p for p in kept if chosen[p] and chosen[p].key() == want.key()]
    full = [p for p in kept if chosen[p] and chosen[p].full]
    if same:
        return same[0], f"{s}: the newest kept run of the same selection ({want.text()})"
    if full:
        return full[0], (f"{s}: no kept run of NEW's selection ({want.text()}); the newest "
                         "full one, compared on what NEW ran")
    return kept[0], (f"{s}: no full run kept: comparing with a partial one "
                     f"({chosen[kept[0]].text() if chosen[kept[0]] else 'unreadable'})")


def _label_of(folder: str) -> str:
    """'2026-11-29-py311-oldest-cpu2core' -> 'py311-oldest-cpu2core'."""
    return re.sub(r"^\d{4}-\d{2}-\d{2}-", "", folder)


def load_run(spec: str | Path, history: Path = runs.HISTORY) -> runs.Run:
    """The run a path names (a claims.json or its folder), or ``last`` / ``last:LABEL``."""
    return _load(resolve(spec, history)[0])


def load_pair(old: str | Path, new: str | Path,
              history: Path = runs.HISTORY) -> tuple[runs.Run, runs.Run, str]:
    """OLD and NEW, OLD chosen for NEW where it is ``last`` (:func:`resolve`), and the line
    that says how it was chosen."""
    b = _load(resolve(new, history)[0])
    path, how = resolve(old, history, like=b)
    return _load(path), b, how


def _load(path: Path) -> runs.Run:
    if not path.exists():
        raise DiffError(f"{path}: no such file or folder")
    loaded, problems = runs.load([path])
    loaded = [r for r in loaded if r.claims]
    if not loaded:
        why = "; ".join(p["problem"] for p in problems) or "no claims in it"
        raise DiffError(f"{path}: not a claims report ({why})")
    return loaded[0]


# --------------------------------------------------------------------------- comparing
def _verdict(claim: dict | None) -> str:
    return (claim or {}).get("verdict") or "absent"


def _shown(claim: dict | None) -> str:
    return _verdict(claim) + runs._known(claim) if claim else "absent"


def _timing(old: dict | None, new: dict | None, moved: list[str]) -> bool:
    """A timing claim (kind d), an inconclusive verdict (a timing inside its noise band), a
    claim that misses only timings judged by their bootstrap interval, or one whose only
    moved figures are times or speeds: these move with the machine's load as much as with a
    release."""
    claims = [c for c in (old, new) if c]
    if any(c.get("kind") == "d" or c.get("verdict") == "inconclusive" or _interval_judged(c)
           for c in claims):
        return True
    return bool(moved) and all(runs.TIMING.search(f) for f in moved)


def _interval_judged(claim: dict) -> bool:
    """Every figure that misses its rule is a timing judged by its interval. (A statistical
    interval, a mean's or a share's over seeded runs, is not: it moves with a release only.
    Reports written before figures said ``timed`` had timing intervals only.)"""
    missed = [m for m in runs._figures(claim).values()
              if m.get("outcome") not in (None, "within")]
    return bool(missed) and all("interval" in m and m.get("timed", True) for m in missed)


def compare(old: runs.Run, new: runs.Run, count_timing: bool = False) -> dict:
    """The differences between two runs, OLD -> NEW, as rows of a report (see module doc)."""
    a, b = replace(old, name="old"), replace(new, name="new")
    same_rules = a.data.get("schema") == b.data.get("schema")
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for d in runs.differences([a, b]):
        vals = d.get("values", {})
        co, cn = a.claims.get(d["id"]), b.claims.get(d["id"])
        if d["kind"] == "figure moved" and not _figure_moved(co, cn, d, same_rules):
            continue
        row = {"id": d["id"], "section": d["section"],
               "paraphrase": (cn or co or {}).get("paraphrase", ""),
               "old": _shown(co), "new": _shown(cn), "reason": (cn or {}).get("reason", "")}
        if d["kind"] == "verdict flipped":
            row["what"] = _verdict_kind(_verdict(co), _verdict(cn))
            row["detail"] = f"{row['old']} -> {row['new']}"
        elif d["kind"] == "newly not-applicable":
            gone = _verdict(cn) == "not-applicable"
            row["what"] = "became not-applicable" if gone else "no longer not-applicable"
            row["reason"] = (cn if gone else co or {}).get("reason", "")
            row["detail"] = f"{row['old']} -> {row['new']}"
        else:   # "figure moved", "value changed": the measured values, old -> new
            row["what"], row["figure"] = d["kind"], d["figure"]
            stated = f"stated {d['stated']}; " if "stated" in d else ""
            row["detail"] = (f"{d['figure']}: {stated}{runs.fmt(vals.get('old'))} -> "
                             f"{runs.fmt(vals.get('new'))}")
        seen.add((row["id"], row["what"]))
        rows.append(row)
    # verdict changes the matrix does not count as executed (partial, inconclusive, ...), and
    # the same verdict, known in one run (claims/expectations.toml) and unexpected in the other
    for cid in sorted(set(a.claims) & set(b.claims)):
        vo, vn = _verdict(a.claims[cid]), _verdict(b.claims[cid])
        if vo in MEASURED and vn in MEASURED and _shown(a.claims[cid]) != _shown(b.claims[cid]):
            what = _verdict_kind(vo, vn) if vo != vn else "expectation changed"
            if (cid, what) not in seen and (cid, "verdict changed") not in seen:
                c = b.claims[cid]
                rows.append({"id": cid, "section": c.get("section", ""),
                             "paraphrase": c.get("paraphrase", ""), "what": what,
                             "old": _shown(a.claims[cid]), "new": _shown(c),
                             "reason": c.get("reason", ""),
                             "detail": f"{_shown(a.claims[cid])} -> {_shown(c)}"})
    rows.sort(key=lambda r: (r["id"], COUNTED.index(r["what"])))
    counted, timing = [], []
    ctx = causes.Context(old, new)
    for r in rows:
        entry = ctx.entries.get(r["id"])
        r["watch"] = entry.version_note if entry else ""
        moved = [x["figure"] for x in rows if x["id"] == r["id"] and "figure" in x]
        r["timing"] = _timing(a.claims.get(r["id"]), b.claims.get(r["id"]), moved)
        r["cause"] = causes.attribute(r, ctx)
        (timing if r["timing"] and not count_timing else counted).append(r)
    gaps = runs.coverage_gaps([a, b])
    env = [("suite", *causes.suite_line(ctx).split(" -> "))] \
        if a.env.get("suite_commit") != b.env.get("suite_commit") else []
    env += [(k, vals[0], vals[1]) for k, vals in runs.fingerprint_rows([a, b])
            if k not in NOT_ENV and vals[0] != vals[1]]
    return {"old": describe_run(old), "new": describe_run(new), "changes": counted,
            "timing": timing, "environment": env,
            "ran_in_old_only": [g["id"] for g in gaps if g["ran"] == ["old"]],
            "ran_in_new_only": [g["id"] for g in gaps if g["ran"] == ["new"]]}


def by_cause(rows: list[dict]) -> dict[str, list[str]]:
    """{cause: the claims it changed}, in the order of ``causes.CAUSES``."""
    out = {c: [] for c in causes.CAUSES}
    for r in rows:
        if r["id"] not in out[r["cause"].kind]:
            out[r["cause"].kind].append(r["id"])
    return out


def failing(res: dict, fail_on: str = "any") -> list[dict]:
    """The changes that make the exit status 1: every counted change, or (``release``)
    those a release caused."""
    return [r for r in res["changes"] if fail_on == "any" or r["cause"].kind == fail_on]


def _figure_moved(old: dict, new: dict, row: dict, same_rules: bool) -> bool:
    """A stated figure moved beyond its tolerance, or crossed it (reports of one schema).

    The same value judged by another rule, or a figure judged by the rules of another report
    schema, is not a move: when that changes the verdict, the verdict row says so.
    """
    fo, fn = runs._figures(old).get(row["figure"]), runs._figures(new).get(row["figure"])
    if not fo or not fn or json.dumps(fo["value"]) == json.dumps(fn["value"]):
        return False
    if same_rules and "within" in fo and "within" in fn and fo["within"] != fn["within"]:
        return True
    return tolerances.moved(fo["value"], fn["value"], row["stated"],
                            fn.get("tolerance") or fo.get("tolerance"))


def _verdict_kind(old: str, new: str) -> str:
    if new == "partial":
        return "became partial"
    if old == "partial":
        return "no longer partial"
    return "verdict changed"


def describe_run(run: runs.Run) -> dict:
    """A run as the diff and a kept run's note show it: its path, label, selection, verdict
    counts, commit and wall time."""
    sel = runs.selection(run.data)
    return {"path": str(run.path), "name": run.name, "label": run.label,
            "selection": sel.text(), "full": sel.full, "not_run": len(sel.not_run),
            "summary": {k: n for k, n in run.data.get("summary", {}).items() if n},
            "suite_commit": run.env.get("suite_commit"), "elapsed_s": run.data.get("elapsed_s")}


# --------------------------------------------------------------------------- output
NOTHING = ("every claim measured in both runs has the same verdict and its figures within "
           "their tolerance")


def _tables(res: dict) -> list[tuple[str, list[dict]]]:
    """The row groups of a report, titled, leaving out the empty ones."""
    return [(t, rows) for t, rows in (
        (f"Changes ({len(res['changes'])})", res["changes"]),
        ("Not counted: timing claims and inconclusive verdicts (they move with the machine's "
         "load)", res["timing"]))
        if rows]


def _not_compared(res: dict) -> list[tuple[str, list[str]]]:
    return [(where, res[key]) for key, where in (("ran_in_old_only", "OLD"),
                                                 ("ran_in_new_only", "NEW")) if res[key]]


def text(res: dict) -> str:
    out = [f"OLD: {res['old']['path']}  ({res['old']['label']}; {res['old']['selection']})",
           f"NEW: {res['new']['path']}  ({res['new']['label']}; {res['new']['selection']})"]
    if res.get("chosen"):
        out.append(f"     {res['chosen']}")
    out.append("")
    if res["environment"]:
        out.append("environment:")
        out += [f"  {k:<32} {o} -> {n}" for k, o, n in res["environment"]]
        out.append("")
    if res["changes"]:
        out.append(f"changes ({len(res['changes'])}), each with its cause:")
        for r in res["changes"]:
            out.append(f"  {r['id']:<9} {r['what']:<24} {r['detail']}")
            out.append(f"  {'':34}{r['cause'].text()[:300]}")
            if r.get("watch"):
                out.append(f"  {'':34}known to move: {r['watch']}")
            if r["reason"] and "figure" not in r:
                out.append(f"  {'':34}{r['reason'][:200]}")
        out.append("")
    if res["timing"]:
        out.append(f"not counted: timing claims and inconclusive verdicts, which move with the "
                   f"machine's load ({len(res['timing'])}):")
        for r in res["timing"]:
            out.append(f"  {r['id']:<9} {r['what']:<24} {r['detail']}")
            out.append(f"  {'':34}{r['cause'].text()[:300]}")
        out.append("")
    for line in _partial(res):
        out.append(line)
    out.append(_verdict_line(res))
    return "\n".join(out) + "\n"


def _partial(res: dict) -> list[str]:
    """What was not compared, and why: a partial run says it is one."""
    out = []
    for side in ("old", "new"):
        if not res[side]["full"]:
            out.append(f"{side.upper()} is {res[side]['selection']}: those claims are not "
                       "compared")
    for where, ids in _not_compared(res):
        out.append(f"not compared: {len(ids)} claims ran in {where} only: " +
                   ", ".join(ids[:30]) + (" ..." if len(ids) > 30 else ""))
    return out


def _verdict_line(res: dict) -> str:
    n, ids = len(res["changes"]), {r["id"] for r in res["changes"]}
    if not n:
        return "nothing changed: " + NOTHING
    causes_text = "; ".join(f"{c} {len(got)}" for c, got in by_cause(res["changes"]).items()
                            if got)
    return (f"{len(ids)} claim{'s' if len(ids) != 1 else ''} changed ({n} difference"
            f"{'s' if n != 1 else ''}); by cause: {causes_text}")


def document(res: dict) -> list:
    """The differences as page blocks (support/reports/page.py renders Markdown and HTML)."""
    o, n = res["old"], res["new"]
    out: list = [page.Bullets(
        [f"OLD: {o['path']} ({o['label']}; {o['selection']}): " + verdict_counts(o),
         f"NEW: {n['path']} ({n['label']}; {n['selection']}): " + verdict_counts(n)]
        + ([res["chosen"]] if res.get("chosen") else []))]
    if res["changes"]:
        out.append(page.Para(_verdict_line(res) + "."))
    if res["environment"]:
        out += [page.Heading(2, "Environment"),
                page.Table(["", "OLD", "NEW"], [page.Row([k, a, b], strong=True)
                                                for k, a, b in res["environment"]], "env")]
    for title, rows in _tables(res):
        out += [page.Heading(2, title), page.Table(
            ["id", "what", "OLD", "NEW", "detail", "cause"],
            [[r["id"], r["what"], matrix.verdict_cell(r["old"]), matrix.verdict_cell(r["new"]),
              page.Cell(r["detail"], note=" ".join(x for x in (r["paraphrase"], r["reason"]) if x)),
              page.Cell(r["cause"].kind, note=" ".join(
                  x for x in (r["cause"].why, r.get("watch") and
                              f"Known to move: {r['watch']}.") if x))]
             for r in rows], "diff")]
    if not res["changes"]:
        out.append(page.Para(f"Nothing changed: {NOTHING}."))
    for line in _partial(res):
        out.append(page.Para(line, "m"))
    return out


def markdown(res: dict) -> str:
    return page.markdown("What changed", document(res))


def html_page(res: dict) -> str:
    return page.html_page("What changed", document(res))


def verdict_counts(run: dict) -> str:
    """'holds 300, fails 2, ...' of a described run (:func:`describe_run`)."""
    return ", ".join(f"{k} {v}" for k, v in run["summary"].items()) or "no verdicts"
