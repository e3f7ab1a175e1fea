"""Measure what load does to each timing figure: ``python -m support load-sensitivity``.

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
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from support.paths import REPORTS, ROOT

LOADS = (0, 1, 2)


def arguments(command: str, p) -> None:
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


def figures_of(report: dict, ids) -> list[dict]:
    """Every timing figure of ``ids`` in a report: key, value, the load its rounds measured
    and whether it was decided from busy rounds."""
    from support.machine.sensitivity import key
    out = []
    for c in report.get("claims", []):
        if c["id"] not in ids:
            continue
        for v in c.get("variants", []):
            for name, fig in v.get("figures", {}).items():
                load = fig.get("load") if isinstance(fig, dict) else None
                if not load or not isinstance(fig.get("value"), (int, float)):
                    continue
                out.append({"key": key(c["id"], name, v.get("variant", "")),
                            "value": float(fig["value"]), "load": float(load["cores"]),
                            "busy": bool(load["busy"])})
    return out


def factors(idle: list[float], loaded: list[tuple[float, float]]) -> dict:
    """One load's point: the median load measured, and how far the values moved from the
    idle median each way (never past no change)."""
    base = statistics.median(idle)
    values = [v for _, v in loaded]
    return {"load": round(statistics.median(l for l, _ in loaded), 3),
            "down": round(min(1.0, min(values) / base), 4),
            "up": round(max(1.0, max(values) / base), 4)}


def summarise(sessions: list[dict]) -> dict:
    """Per figure, from the sessions' readings (each ``{"k": load, "figures": [...]}``):
    its idle values, its loaded readings per k, and its points."""
    per: dict[str, dict] = {}
    for s in sessions:
        for f in s["figures"]:
            e = per.setdefault(f["key"], {"idle": [], "loaded": {}})
            if not f["busy"]:
                e["idle"].append(round(f["value"], 6))
            else:
                e["loaded"].setdefault(str(s["k"]), []).append([round(f["load"], 3),
                                                                round(f["value"], 6)])
    for e in per.values():
        e["points"] = [dict(factors(e["idle"], pts), beside=int(k))
                       for k, pts in sorted(e["loaded"].items()) if e["idle"] and pts]
    return per


def _session(ids, k: int, out: Path) -> dict:
    from support.harness.stability import Load
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
           f"--claims-report={out}"] + [f"--claim={c}" for c in ids]
    t0 = time.monotonic()
    with Load(k):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pytest.log").write_text(proc.stdout + proc.stderr)
    report = out / "claims.json"
    if not report.exists():
        raise SystemExit(f"load-sensitivity: the session at load {k} wrote no report "
                         f"(exit {proc.returncode}); its log: {out / 'pytest.log'}")
    return {"k": k, "wall_s": round(time.monotonic() - t0, 1), "exit": proc.returncode,
            "figures": figures_of(json.loads(report.read_text()), set(ids))}


def run(command: str, args) -> int:
    from support.machine import environment, sensitivity
    from support.rules.registry import load_registry
    registry = load_registry()
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
            s = _session(ids, k, args.keep / f"run-{r + 1}-load-{k}")
            sessions.append(s)
            busy = sum(f["busy"] for f in s["figures"])
            print(f"run {r + 1}, {k} busy beside: {s['wall_s']} s, exit {s['exit']}, "
                  f"{len(s['figures'])} figures ({busy} from busy rounds)", flush=True)
    figures = summarise(sessions)
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
