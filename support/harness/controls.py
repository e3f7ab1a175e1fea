"""The negative controls' runner: ``python -m support controls``.

What a control is, and what its outcome means, is :mod:`support.rules.controls`; what the
outcomes add up to per claim, :mod:`support.rules.control_summary`. This module finds the
suite's controls (importing every claim test module), starts the pytest sessions that run
them (the test-scope ones in one session, each process-scope one in a session of its own with
an empty result cache, within a budget that rotates with the commit), judges each session's
report, writes ``controls.json`` and folds the outcomes into this machine's ledger.
"""
from __future__ import annotations

from support.rules.control_summary import (LEDGER, SCALED_KINDS, annotate, known_controls,
                                           remember, scale_summary, summarise)
from support.harness.claim_modules import absent_here, discover
from support.rules.controls import AS_DECLARED, as_declared, count, evaluate

def _pytest(args: list[str], out, env_extra: dict, log) -> tuple[int, dict, float]:
    """One pytest session of the suite (claims only); returns (exit status, report, seconds)."""
    import json
    import os
    import subprocess
    import sys
    import time

    from support.paths import ROOT
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci", **env_extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "claims", "-q", "-p", "no:randomly",
           f"--claims-report={out}", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log.write(f"$ {' '.join(cmd[1:])}  ({wall:.1f} s, exit {proc.returncode})\n")
    log.write(proc.stdout[-20000:] + proc.stderr[-5000:] + "\n")
    report = {}
    if (out / "claims.json").exists():
        report = json.loads((out / "claims.json").read_text())
    return proc.returncode, report, wall


def ledger_file():
    """This machine's ledger of control outcomes (the user cache), read by every controls
    run for the controls it leaves to a later rotation."""
    from support.lab.data import cache_dir
    return cache_dir() / LEDGER


def arguments(command: str, parser) -> None:
    from pathlib import Path

    from support.paths import REPORTS
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


def run(command: str, args) -> int:
    import datetime as dt
    import json
    import shutil
    import tempfile
    import time

    from support.machine import fingerprint
    from support.machine.environment import git_commit
    from support.rules import registry as reg

    registry = reg.load_registry()
    found = discover()
    bad = [c for c in args.claim if c not in registry]
    if bad:
        print(f"controls: unknown claim(s) {', '.join(bad)}")
        return 2
    chosen = [c for c in found.values()
              if not args.claim or set(args.claim) & set(c.claims)]
    tests = [c for c in chosen if c.scope == "test"]
    procs = [c for c in chosen if c.scope == "process"]
    commit = git_commit() or ""
    # the rotation: process controls from an offset the commit decides, as many as fit
    start = int(commit[:8], 16) % len(procs) if procs and commit[:8].isalnum() else 0
    ordered = procs[start:] + procs[:start]
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    t0 = time.monotonic()
    results: list[dict] = []
    with open(args.out / "sessions.log", "w") as log:
        if tests:
            wanted = sorted({cid for c in tests for cid in c.claims})
            claim_args = [f"--claim={cid}" for cid in wanted]
            _, rep, wall = _pytest(["-n", args.workers, "--controls", *claim_args],
                                   args.out / "test-scope", {}, log)
            for c in tests:
                results.append(evaluate(c, rep, wall / max(1, len(tests)), "test-scope", registry))
            print(f"controls: {len(tests)} test-scope controls in one session, {wall:.0f} s")
        left = []
        for c in ordered:
            absent = absent_here(c)
            if absent:
                # listed as not run, as a session of its own would say, without its start-up
                skipped = {"verdict": "skipped", "reason": absent, "control": c.name}
                results.append(evaluate(c, {"claims": [{"id": cid, "variants": [skipped]}
                                                       for cid in c.claims]},
                                        0.0, "process", registry))
                print(f"controls: {c.name} not run here: {absent}")
                continue
            spent = time.monotonic() - t0
            if args.budget_s is not None and results and spent > args.budget_s:
                left.append(c.name)
                continue
            with tempfile.TemporaryDirectory(prefix="claims-control-cache-") as cache:
                _, rep, wall = _pytest(["-n", args.workers, "--fresh", f"--control={c.name}",
                                        *[f"--claim={cid}" for cid in c.claims]],
                                       args.out / c.name, {"LECTURE11_CACHE": cache}, log)
            results.append(evaluate(c, rep, wall, "process", registry))
            print(f"controls: {c.name} ({', '.join(c.claims)}), its own session, {wall:.0f} s")
    baseline = json.loads(args.report.read_text()) if args.report.is_file() else None
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    # what ran now joins this machine's ledger; what did not is judged by its last outcome
    ledger = remember(results, commit, date, ledger_file())
    summary = summarise(results, registry, baseline, known_controls(found), ledger,
                        tuple(left))
    counts = count(results)
    wall = time.monotonic() - t0
    data = {"schema": 1, "suite_commit": commit, "date": date,
            "environment": fingerprint.label(baseline["environment"]) if baseline else None,
            "wall_s": round(wall, 1), "counts": counts,
            "rotation": {"process_controls": len(procs), "start": start,
                         "ran": [c.name for c in ordered if c.name not in left],
                         "left_for_later": left},
            "controls": results, "claims": summary}
    data["scale"] = scale_summary(summary)
    (args.out / "controls.json").write_text(json.dumps(data, indent=1))
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
    sc = data["scale"]
    print(f"controls: claims of kinds {', '.join(SCALED_KINDS)} controlled at their own scale "
          f"(a figure landed within a factor 2 of its line) {len(sc['near'])}"
          + "".join(f"; {k} {len(v)}: {' '.join(v)}" for k, v in sc.items()
                    if k != "near" and v))
    if baseline is not None and not args.claim:
        from support.reports import report
        report.write(annotate(baseline, data), args.report.parent)
    print(f"controls: {args.out / 'controls.json'}")
    return 0 if as_declared(counts) else 1
