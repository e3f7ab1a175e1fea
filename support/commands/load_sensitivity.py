"""``python -m support load-sensitivity``: measure what load does to each timing figure.

    python -m support load-sensitivity --runs 4

Runs the timing claims (every claim with a ``timed`` figure the CPU decides) in fresh pytest
sessions,
idle, with one and with two CPU-bound processes beside them (stability's spinners, at the
suite's own priority), ``--runs`` times each, the loads in a new order every repetition so
that a drift of the machine falls on all of them. From each session's report it reads every
timing figure's value and the load its rounds measured (support.harness.timed.settle records
both), and writes ``support/resources/load_sensitivity.json`` (``--out``): per figure, the
idle values, and at each load the loads measured and the values, with the factors
``down``/``up`` by which the loaded values moved from the idle median, each way
(support/machine/sensitivity.py says how a busy interval is widened by them). The file
records the machine, its cores, the versions and the date; the sessions' reports and logs
stay in ``--keep`` (default reports/load-sensitivity).

A figure that went busy in an idle session (other work on the machine meanwhile) is counted
with the loaded ones at the load it measured, never as idle; one that stayed quiet in a
loaded session (the load paused) counts as idle. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import datetime
import json
import random
import sys
from pathlib import Path

from support.commands.suite_runs import NoReport, session_at_load
from support.machine import environment, sensitivity
from support.paths import REPORTS
from support.rules.entries import load_entries

LOADS = (0, 1, 2)


def arguments(p) -> None:
    p.add_argument("--runs", type=int, default=4, help="sessions at each load (default 4)")
    p.add_argument("--out", type=Path, default=None,
                   help="the file to write (default support/resources/load_sensitivity.json)")
    p.add_argument("--keep", type=Path, default=REPORTS / "load-sensitivity",
                   help="where the sessions' reports and logs go (default "
                        "reports/load-sensitivity)")
    p.add_argument("--claim", action="append", default=None, metavar="ID",
                   help="only these claims (repeatable); the file keeps the others' entries")
    p.add_argument("--seed", type=int, default=0, help="seed of the loads' order")


def timing_claims(registry: dict) -> list[str]:
    """The claims with a timing figure (``timed``) that the default run decides on the CPU:
    testable, of the fast or slow tier, not an accelerator claim (kind e times on its device;
    a CPU variant of one checks the measure only)."""
    return [c.id for c in registry.values()
            if c.status == "testable" and c.tier in ("fast", "slow") and c.kind != "e"
            and any(f.timed for f in c.all_figures())]


def run(args) -> int:
    registry = load_entries()
    ids = args.claim or timing_claims(registry)
    unknown = [c for c in ids if c not in registry]
    if unknown:
        print(f"load-sensitivity: unknown claim(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    out = args.out or sensitivity.FILE
    rng = random.Random(args.seed)
    sessions = []
    for r in range(args.runs):
        order = list(LOADS)
        rng.shuffle(order)
        for k in order:
            try:
                s = session_at_load(ids, k, args.keep / f"run-{r + 1}-load-{k}")
            except NoReport as exc:
                raise SystemExit(str(exc)) from None
            sessions.append(s)
            busy = sum(f["busy"] for f in s["figures"])
            print(f"run {r + 1}, {k} busy beside: {s['wall_s']} s, exit {s['exit']}, "
                  f"{len(s['figures'])} figures ({busy} from busy rounds)", flush=True)
    figures = sensitivity.summarise(sessions)
    measured = {
        "date": datetime.date.today().isoformat(),
        "machine": environment.cpu_name(), "cores": environment.cores(),
        "runs": args.runs, "loads": list(LOADS),
        "command": "python -m support load-sensitivity " + " ".join(sys.argv[2:]),
        "versions": environment.versions(),
        "commit": environment.git_commit(),
    }
    for e in figures.values():
        e["measured"] = {k: measured[k] for k in ("date", "runs", "commit")}
    old = sensitivity.table(out) if args.claim else {}
    # a run of some claims replaces their entries and keeps the file's own description
    data = {"schema": 1, "measured": old.get("measured", measured),
            "figures": {**old.get("figures", {}), **figures}}
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    (args.keep / "sessions.json").write_text(json.dumps(sessions, indent=1))
    width = max(map(len, figures), default=10)
    print(f"\n{'figure':<{width}}  load: down..up per busy-process count")
    for key_, e in sorted(figures.items()):
        pts = "  ".join(f"{p['load']:.2f}: x{p['down']:.3g}..x{p['up']:.3g}"
                        for p in e["points"]) or "no loaded readings"
        print(f"{key_:<{width}}  {pts}")
    missing = [k for k, e in figures.items() if not e["points"]]
    print(f"\nload-sensitivity: {out} ({len(figures)} figures; {len(missing)} without a "
          f"loaded reading)")
    return 1 if missing else 0
