"""``python -m support stability``: the README's test command run several times, and what was
not stable (the runs are support/commands/suite_runs.py's).

    python -m support stability --runs 10 --concrete-data=../shared/data/concrete

Each run is a fresh ``python -m pytest -n auto --fresh ...`` (the README's test command; any
option this command does not know, such as ``--concrete-data=...`` or ``--tier fast``, goes
to pytest) with the default Hypothesis profile (``dev``: new examples every run) and the
tests in a new random order (pytest-random-order: modules shuffled, and the tests within each
module; the seed is printed, so a run can be repeated with ``--random-order-seed=SEED``).
Under xdist the shuffled order also splits the tests differently over the workers.

It prints, per run, whether it was green (pytest's exit status 0), its wall time and its
verdict counts; then every claim whose verdict changed between runs (per variant), and every
run that went red with what was not as expected. The reports of the runs are kept in
``--out`` (default ``reports/stability``: ``run-N/claims.json``, and ``stability.json``).
Exit status 0 only when every run was green and no verdict changed.

``--cached`` leaves out ``--fresh``: the runs read the result cache (the shared concrete
experiments, trained once), as the README's command does when a user runs it again; the
first run fills the cache if it is empty. The claims that time something never come from
the cache, so this still shows what the machine's load does to them, in a fraction of the
time.

``--load K`` runs the suite on a busy machine, as a lecturer's laptop or a shared CI runner
is: for the length of each run, K processes that spin on the CPU at the suite's own priority
(so the suite gets a fraction of the machine). They stop when the run ends and on their own
if this command dies (each watches its parent), so nothing is left behind. Under load a
timing claim may become inconclusive, which is listed with its interval and does not fail
the command; any other change of verdict does (holds to fails or drift, or the reverse).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from support.commands.suite_runs import changed, run_once, with_the_load
from support.paths import ROOT

PASSES_UNKNOWN = True      # options stability does not know go to pytest


def arguments(p) -> None:
    """Run the README's test command N times (fresh, shuffled, exploring Hypothesis profile)
    and report verdicts that changed and runs that went red."""
    p.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    p.add_argument("--workers", default="auto", help="pytest-xdist workers, -n (default auto: "
                   "every core up to four, as the test command)")
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
    p.add_argument("--cached", action="store_true",
                   help="keep the result cache between runs (no --fresh): the README's command "
                        "as a user reruns it")
    p.add_argument("--load", type=int, default=0, metavar="K",
                   help="K CPU-bound processes at the suite's priority beside each run (a busy "
                        "machine); a timing claim that goes inconclusive under load is listed, "
                        "not counted as a change (default 0: an idle machine)")


def _summary(counts: dict) -> str:
    order = ("error", "fails", "drift", "inconclusive", "partial", "holds", "not-applicable",
             "skipped")
    return ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))


def run(args) -> int:
    passthrough = args.unknown
    if args.order != "none":
        try:
            import random_order  # noqa: F401  (pytest-random-order)
        except ImportError:
            print("stability: shuffling needs pytest-random-order: pip install -e '.[test]' "
                  "(or --order none)", file=sys.stderr)
            return 2
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    fresh = "" if args.cached else "--fresh "
    print(f"stability: {args.runs} runs of python -m pytest -n {args.workers} {fresh}"
          f"{' '.join(passthrough)} (HYPOTHESIS_PROFILE={args.profile}, order: {args.order}"
          f"{f', seeds from {first}' if args.order != 'none' else ''}"
          f"{f'; {args.load} busy processes beside each run' if args.load else ''})", flush=True)
    runs = []
    for i in range(1, args.runs + 1):
        r = run_once(i, first + i - 1 if args.order != "none" else None, args, passthrough)
        runs.append(r)
        seed = f"seed {r['seed']:>6}  " if r["seed"] is not None else ""
        print(f"run {i:>2}/{args.runs}  {seed}{'green' if r['green'] else 'RED  '}  "
              f"{r['wall_s']:7.1f} s  {_summary(r['summary'])}  | {r['pytest']}", flush=True)
    moved = changed(runs)
    loaded = {k: s for k, s in moved.items() if args.load and with_the_load(s)}
    moved = {k: s for k, s in moved.items() if k not in loaded}
    red = [r for r in runs if not r["green"]]
    by_run = {r["run"]: r for r in runs}

    def show(k, seen):
        print(f"  {k}: " + "; ".join(f"{v} (run {', '.join(map(str, rs))})"
                                      for v, rs in seen.items()))
        for v, rs in seen.items():
            for i in rs:
                figs = by_run[i].get("figures", {}).get(k)
                if figs:
                    print(f"      run {i} ({v}): {figs}")

    print()
    print("verdicts that changed between runs:" if moved else
          "verdicts that changed between runs: none")
    for k, seen in moved.items():
        show(k, seen)
    if args.load:
        print("inconclusive under the load in some runs (a decided verdict elsewhere):"
              if loaded else "inconclusive under the load: none")
        for k, seen in loaded.items():
            show(k, seen)
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
         "load": args.load, "changed": moved, "inconclusive_under_load": loaded}, indent=1))
    return 0 if not moved and not red else 1
