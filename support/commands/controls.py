"""``python -m support controls [--claim ID ...] [--out DIR] [--budget-s S] [--workers N]
[--report PATH]``: every claim's test under its negative, positive and level controls
(support/commands/control_runner.py starts the sessions), what each control made of each of
its claims, and per claim whether it is controlled. Exit status 1 when a control survived,
stayed red or broke the test.
"""
from __future__ import annotations

from pathlib import Path

from support.commands.control_runner import run_controls
from support.paths import REPORTS
from support.reports import report
from support.rules import entries as reg
from support.rules.control_summary import SCALED_KINDS, annotate
from support.rules.controls import AS_DECLARED, as_declared


def arguments(parser) -> None:
    parser.add_argument("--claim", action="append", default=[], metavar="ID",
                        help="only the controls of this claim (repeatable)")
    parser.add_argument("--out", type=Path, default=REPORTS / "controls",
                        help="where controls.json and the sessions' logs go (default "
                             "reports/controls)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the process-scope controls (each a session of its "
                             "own): those that do not fit are left for a later run, starting "
                             "elsewhere in the list each commit (recorded); default: all")
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers, -n (default "
                        "auto: every core up to four, as the test command)")
    parser.add_argument("--report", type=Path, default=REPORTS / "claims.json",
                        help="the claims report to mark controlled/uncontrolled and take the "
                             "verdicts without controls from (default reports/claims.json)")


def run(args) -> int:
    registry = reg.load_entries()
    bad = [c for c in args.claim if c not in registry]
    if bad:
        print(f"controls: unknown claim(s) {', '.join(bad)}")
        return 2
    done = run_controls(registry, args.claim, args.out, args.workers, args.budget_s,
                        args.report)
    results, summary, counts, left, wall = (done.results, done.summary, done.counts,
                                            done.left, done.wall)
    for r in results:
        for cid, res in r["results"].items():
            if res["outcome"] not in AS_DECLARED:
                print(f"  {res['outcome'].upper():<9} {r['name']} -> {cid}: {res['evidence'][:300]}")
    states: dict[str, int] = {}
    for e in summary.values():
        states[e["state"]] = states.get(e["state"], 0) + 1
    print(f"controls: {sum(counts.values())} control x claim results in {wall:.0f} s: "
          + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
          + "; claims: " + ", ".join(f"{k} {n}" for k, n in sorted(states.items()))
          + (f"; {len(left)} process controls left for a later run" if left else ""))
    sc = done.data["scale"]
    print(f"controls: claims of kinds {', '.join(SCALED_KINDS)} controlled at their own scale "
          f"(a figure landed within a factor 2 of its line) {len(sc['near'])}"
          + "".join(f"; {k} {len(v)}: {' '.join(v)}" for k, v in sc.items()
                    if k != "near" and v))
    if done.baseline is not None and not args.claim:
        report.write(annotate(done.baseline, done.data), args.report.parent)
    print(f"controls: {args.out / 'controls.json'}")
    return 0 if as_declared(counts) else 1
