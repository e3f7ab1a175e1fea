"""Run the README's test command several times and say what was not stable.

    python -m support stability --runs 10 --concrete-data=../shared/data/concrete

Each run is a fresh ``python -m pytest -n 2 --fresh ...`` (the README's test command; any
option this command does not know, such as ``--concrete-data=...`` or ``--tier fast``, goes
to pytest) with the default Hypothesis profile (``dev``: new examples every run) and the
tests in a new random order (pytest-random-order: modules shuffled, and the tests within each
module; the seed is printed, so a run can be repeated with ``--random-order-seed=SEED``).
With ``-n 2`` the shuffled order also splits the tests differently over the two workers.

It prints, per run, whether it was green (pytest's exit status 0), its wall time and its
verdict counts; then every claim whose verdict changed between runs (per variant), and every
run that went red with what was not as expected. The reports of the runs are kept in
``--out`` (default ``reports/stability``: ``run-N/claims.json``, and ``stability.json``).
Exit status 0 only when every run was green and no verdict changed.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from support.paths import ROOT


def _options(p) -> None:
    """Run the README's test command N times (fresh, shuffled, exploring Hypothesis profile)
    and report verdicts that changed and runs that went red."""
    p.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    p.add_argument("--workers", default="2", help="pytest-xdist workers, -n (default 2)")
    p.add_argument("--order", default="module", choices=("module", "package", "global", "none"),
                   help="what pytest-random-order shuffles (default module: the modules, and "
                        "the tests within each; none keeps the file order)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the first run's order (the next runs use seed+1, ...); "
                        "default: drawn at random")
    p.add_argument("--profile", default="dev",
                   help="HYPOTHESIS_PROFILE for the runs (default dev: explores)")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "stability",
                   help="where the runs' reports go (default reports/stability)")


def _verdicts(report: dict) -> dict[str, str]:
    """claim or claim[variant] -> verdict, for every claim the run executed."""
    out = {}
    for c in report.get("claims", []):
        if c.get("verdict") in ("not-run", "pending", "not-testable"):
            continue
        out[c["id"]] = c["verdict"]
        variants = c.get("variants") or []
        if len(variants) > 1:
            for v in variants:
                out[f"{c['id']}[{v.get('variant') or v.get('test', '')}]"] = v.get("verdict", "")
    return out


def _summary(counts: dict) -> str:
    order = ("error", "fails", "drift", "inconclusive", "partial", "holds", "not-applicable",
             "skipped")
    return ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))


def run_once(i: int, seed: int | None, args, passthrough: list[str]) -> dict:
    out = args.out / f"run-{i}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "pytest", "-n", str(args.workers), "--fresh",
           f"--claims-report={out}", "-q"]
    if args.order != "none":
        cmd += [f"--random-order-bucket={args.order}", f"--random-order-seed={seed}"]
    cmd += passthrough
    env = dict(os.environ, HYPOTHESIS_PROFILE=args.profile)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"run-{i}.log").write_text(proc.stdout + proc.stderr)
    report = {}
    if (out / "claims.json").exists():
        report = json.loads((out / "claims.json").read_text())
    tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:]
    return {"run": i, "seed": seed, "exit": proc.returncode, "wall_s": round(wall, 1),
            "green": proc.returncode == 0, "summary": report.get("summary", {}),
            "unexpected": report.get("unexpected", []), "verdicts": _verdicts(report),
            "report": bool(report),
            # tests outside the claims (the harness's own, support/tests) fail a run too
            "failed_tests": [ln for ln in proc.stdout.splitlines()
                             if ln.startswith(("FAILED ", "ERROR "))],
            "pytest": tail[0] if tail else "", "command": " ".join(cmd[1:])}


def changed(runs: list[dict]) -> dict[str, dict[str, list[int]]]:
    """claim (or claim[variant]) -> {verdict: [runs]} for those whose verdict differed (a claim
    absent from a run counts as "absent")."""
    keys = sorted({k for r in runs for k in r["verdicts"]})
    out = {}
    for k in keys:
        seen: dict[str, list[int]] = {}
        for r in runs:
            seen.setdefault(r["verdicts"].get(k, "absent"), []).append(r["run"])
        if len(seen) > 1:
            out[k] = seen
    return out


PASSES_UNKNOWN = True      # options stability does not know go to pytest


def arguments(command: str, parser) -> None:
    _options(parser)


def run(command: str, args) -> int:
    passthrough = args.unknown
    if args.order != "none":
        try:
            import random_order  # noqa: F401  (pytest-random-order)
        except ImportError:
            print("stability: shuffling needs pytest-random-order: pip install -e '.[test]' "
                  "(or --order none)", file=sys.stderr)
            return 2
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    print(f"stability: {args.runs} runs of python -m pytest -n {args.workers} --fresh "
          f"{' '.join(passthrough)} (HYPOTHESIS_PROFILE={args.profile}, order: {args.order}"
          f"{f', seeds from {first}' if args.order != 'none' else ''})", flush=True)
    runs = []
    for i in range(1, args.runs + 1):
        r = run_once(i, first + i - 1 if args.order != "none" else None, args, passthrough)
        runs.append(r)
        seed = f"seed {r['seed']:>6}  " if r["seed"] is not None else ""
        print(f"run {i:>2}/{args.runs}  {seed}{'green' if r['green'] else 'RED  '}  "
              f"{r['wall_s']:7.1f} s  {_summary(r['summary'])}  | {r['pytest']}", flush=True)
    moved = changed(runs)
    red = [r for r in runs if not r["green"]]
    print()
    print("verdicts that changed between runs:" if moved else
          "verdicts that changed between runs: none")
    for k, seen in moved.items():
        print(f"  {k}: " + "; ".join(f"{v} (run {', '.join(map(str, rs))})"
                                      for v, rs in seen.items()))
    print("runs that went red:" if red else "runs that went red: none")
    for r in red:
        print(f"  run {r['run']} (seed {r['seed']}, exit {r['exit']}): {r['pytest']}")
        for u in r["unexpected"]:
            print(f"    {u[:300]}")
        if not r["report"]:
            print("    (no claims report: see the run's log)")
        elif not r["unexpected"]:
            print("    every claim's verdict was as expected; tests that failed:")
        for t in r["failed_tests"] if not r["unexpected"] else []:
            print(f"    {t[:300]}")
    walls = [r["wall_s"] for r in runs]
    print(f"wall time per run: min {min(walls):.1f} s, median {sorted(walls)[len(walls) // 2]:.1f} s, "
          f"max {max(walls):.1f} s; logs and reports in {args.out}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stability.json").write_text(json.dumps(
        {"runs": [{k: v for k, v in r.items() if k != "verdicts"} for r in runs],
         "changed": moved}, indent=1))
    return 0 if not moved and not red else 1
