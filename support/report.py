"""The stated-vs-measured report: ``claims.json``, ``claims.md`` and the terminal summary.

``python -m support.report show reports/claims.json`` prints a saved report again.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from . import environment

SCHEMA = 1
ORDER = ("error", "fails", "drift", "holds", "not-applicable", "skipped")
SHOWN = ("holds", "drift", "fails", "skipped", "not-applicable", "not-testable", "pending",
         "error", "not-run")


def _worst(verdicts: list[str]) -> str:
    executed = [v for v in verdicts if v in ("error", "fails", "drift", "holds")]
    if executed:
        return min(executed, key=ORDER.index)
    if verdicts and all(v == "not-applicable" for v in verdicts):
        return "not-applicable"
    return "skipped"


def _claim_measured(variants: list[dict]):
    """A number when the claim measured one thing once, else an object of named values."""
    named = {}
    multi = len({v["variant"] for v in variants}) > 1 or len(variants) > 1
    for v in variants:
        for name, m in v.get("measurements", {}).items():
            key = name
            if multi:
                tag = v["variant"] or v["nodeid"].split("::")[-1].split("[")[0]
                key = f"{tag}:{name}"
            named[key] = m["value"]
    if len(named) == 1:
        return next(iter(named.values()))
    return named or None


def build(state, elapsed: float = 0.0) -> dict:
    by_id: dict[str, list[dict]] = {}
    for rec in state.records:
        for cid in rec["ids"]:
            by_id.setdefault(cid, []).append(rec)
    claims = []
    used_expectations: set[str] = set()
    ran_ids: set[str] = set()
    from .registry import static_claim_markers
    static = static_claim_markers()
    for cid, c in state.registry.items():
        recs = by_id.get(cid, [])
        tests = sorted(set(state.collected.get(cid, [])) | {r["nodeid"] for r in recs})
        if not tests:
            tests = static.get(cid, [])
        entry = {
            "id": cid, "document": c.document, "section": c.section, "source": c.source,
            "paraphrase": c.paraphrase, "kind": c.kind, "tier": c.tier,
            "stated": c.stated, "measured": None, "tolerance": c.tolerance,
            "verdict": None, "reason": "", "expected": None, "variants": [], "tests": tests,
        }
        if c.meaning:
            entry["meaning"] = c.meaning
        if c.links:
            entry["links"] = c.links
        if recs:
            ran_ids.add(cid)
            entry["verdict"] = _worst([r["verdict"] for r in recs])
            entry["measured"] = _claim_measured(recs)
            for r in recs:
                exp = r.get("expected", {}).get(cid)
                if exp:
                    used_expectations.add(exp["label"])
                    if r["verdict"] == entry["verdict"] or entry["expected"] is None:
                        entry["expected"] = exp
                entry["variants"].append({
                    "test": r["nodeid"], "params": r["params"], "variant": r["variant"],
                    "verdict": r["verdict"], "reason": r["reason"],
                    "measured": {k: v["value"] for k, v in r["measurements"].items()},
                    "figures": r["measurements"], "notes": r["notes"],
                    "duration_s": round(r.get("duration", 0.0), 4),
                })
            reasons = [f"{r['variant'] + ': ' if r['variant'] else ''}{r['reason']}"
                       for r in recs if r["verdict"] == entry["verdict"] and r["reason"]]
            entry["reason"] = "; ".join(dict.fromkeys(reasons))
            if entry["expected"] and entry["verdict"] == entry["expected"]["verdict"]:
                entry["reason"] = (entry["reason"] + " | known: " + entry["expected"]["reason"]).strip(" |")
        elif c.status == "not-testable":
            entry["verdict"], entry["reason"] = "not-testable", c.reason
        elif tests:
            entry["verdict"], entry["reason"] = "not-run", "its tests were not selected in this run"
        elif c.status == "pending":
            entry["verdict"], entry["reason"] = "pending", "no test yet (a gap in the suite)"
        else:
            entry["verdict"], entry["reason"] = "error", "registry says testable but no test exists"
        claims.append(entry)
    summary = {v: 0 for v in SHOWN}
    for e in claims:
        summary[e["verdict"]] = summary.get(e["verdict"], 0) + 1
    known = sum(1 for e in claims if e["expected"] and e["verdict"] == e["expected"]["verdict"])
    from .registry import version_mismatch
    # an entry keyed to other versions cannot match here: it is not stale, just elsewhere
    stale = [e.label() for e in state.expectations
             if e.id in ran_ids and e.label() not in used_expectations
             and version_mismatch(e.versions) is None]
    return {
        "schema": SCHEMA,
        "environment": environment.fingerprint(),
        "elapsed_s": round(elapsed, 1),
        "summary": summary,
        "expected_verdicts": known,
        "stale_expectations": stale,
        "claims": claims,
    }


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:8]) + (", ..." if len(v) > 8 else "") + "]"
    return str(v)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(data: dict) -> str:
    env = data["environment"]
    v = env.get("versions", {})
    lines = [
        "# Lecture 11 claims: stated vs measured", "",
        f"Environment: `{environment.label(env)}` · Python {env.get('python')} · "
        f"{env.get('cpu')} · torch {v.get('torch')} · jax {v.get('jax')} · optax {v.get('optax')} · "
        f"numpy {v.get('numpy')} · scikit-learn {v.get('scikit-learn')} · suite {env.get('suite_commit')}",
        "",
        "| verdict | claims |", "|---|---|",
    ]
    lines += [f"| {k} | {n} |" for k, n in data["summary"].items() if n]
    if data.get("stale_expectations"):
        lines += ["", "Expectations that matched nothing: " + ", ".join(data["stale_expectations"])]
    section = None
    for e in sorted(data["claims"], key=lambda e: (e["document"] != "lecture", e["section"], e["id"])):
        key = (e["document"], e["section"])
        if key != section:
            section = key
            lines += ["", f"## {e['document']}: {e['section']}", "",
                      "| id | claim | stated | measured | verdict | variants | reason |",
                      "|---|---|---|---|---|---|---|"]
        variants = ", ".join(f"{x['variant'] or 'default'}: {x['verdict']}" for x in e["variants"])
        lines.append("| " + " | ".join(_md_cell(x) for x in (
            e["id"], e["paraphrase"], e["stated"], _fmt(e["measured"]), e["verdict"],
            variants, e["reason"])) + " |")
    return "\n".join(lines) + "\n"


def write(data: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    j = out / "claims.json"
    tmp = j.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=repr))
    tmp.replace(j)
    m = out / "claims.md"
    m.write_text(markdown(data))
    return [j, m]


def terminal(tr, data: dict, paths: list[Path]) -> None:
    tr.section("claims: stated vs measured", sep="=")
    s = data["summary"]
    tr.write_line(" | ".join(f"{k} {n}" for k, n in s.items() if n) +
                  f"   ({len(data['claims'])} claims; {data['expected_verdicts']} verdicts as expected)")
    bad = [e for e in data["claims"] if e["verdict"] in ("fails", "drift", "error")]
    if bad:
        tr.write_line("")
    for e in sorted(bad, key=lambda e: (("error", "fails", "drift").index(e["verdict"]), e["id"])):
        known = " [known]" if e["expected"] and e["expected"]["verdict"] == e["verdict"] else ""
        tr.write_line(f"{e['id']:<9} {e['verdict']:<6}{known} stated: {e['stated'] or '-'} | "
                      f"measured: {_fmt(e['measured'])}")
        if e["reason"]:
            tr.write_line(f"{'':16}{e['reason'][:300]}")
    if data.get("stale_expectations"):
        tr.write_line("expectations that matched nothing: " + ", ".join(data["stale_expectations"]))
    tr.write_line("report: " + ", ".join(str(p) for p in paths))


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m support.report")
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the summary of a saved claims.json")
    show.add_argument("path", type=Path)
    show.add_argument("--summary", action="store_true", help="only the verdict counts")
    mx = sub.add_parser("matrix", help="put many runs side by side (support/matrix.py)")
    mx.add_argument("inputs", nargs="*", type=Path,
                    help="claims.json files, run folders or benchmark JSON (default: "
                         "claims/history/* and reports/*/claims.json)")
    mx.add_argument("-o", "--out", type=Path, default=Path("reports/matrix"))
    mx.add_argument("--no-figures", action="store_true", help="skip the matplotlib figures")
    nt = sub.add_parser("notes", help="the notes annotated with a run's verdicts, errata.md and "
                        "notes.json (support/notes_html.py)")
    nt.add_argument("report", type=Path, help="a claims.json")
    nt.add_argument("--notes", action="append", required=True, metavar="PATH",
                    help="a notes file, plain text or Markdown (repeat; lecture=PATH names it)")
    nt.add_argument("-o", "--out", type=Path, default=Path("reports/notes"))
    nt.add_argument("--no-figures", action="store_true", help="skip the matplotlib figures")
    from . import diff
    diff.add_arguments(sub)             # diff OLD NEW, keep RUN --label NAME (support/diff.py)
    args = ap.parse_args(argv)
    if args.cmd in ("diff", "keep"):
        return diff.command(args)
    if args.cmd == "notes":
        from . import notes_html
        return notes_html.main(args)
    if args.cmd == "matrix":
        from . import matrix
        return matrix.main(args)
    if args.cmd == "show":
        data = json.loads(args.path.read_text())
        print(" | ".join(f"{k} {n}" for k, n in data["summary"].items() if n))
        if args.summary:
            return 0
        for e in data["claims"]:
            if e["verdict"] in ("fails", "drift", "error"):
                print(f"{e['id']:<9} {e['verdict']:<6} stated {e['stated']!r} measured {_fmt(e['measured'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
