"""Runs of the README's test command, for ``python -m support stability`` and
``load-sensitivity``: each a fresh pytest process (:func:`run_once`), optionally beside K
processes that spin on the CPU for its length (:class:`Load`), read back as verdicts per
claim and variant with the figures they were decided by; :func:`changed` says which verdicts
differed between runs, :func:`with_the_load` which of those a busy machine may make;
:func:`session_at_load` is one session of some claims beside K spinners.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from support.machine import sensitivity
from support.paths import ROOT

# one busy process: spins until its parent (this command) is gone or the deadline passes,
# checking both every 100 ms, so that no spinner outlives the run it loads
SPINNER = """
import os, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < deadline:
    end = time.monotonic() + 0.1
    while time.monotonic() < end:
        pass
"""


class Load:
    """K spinning processes for the length of a ``with`` block (at most ``limit_s``)."""

    def __init__(self, k: int, limit_s: float = 3 * 3600):
        self.k, self.limit_s, self.procs = k, limit_s, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", SPINNER, str(os.getpid()),
                                        str(self.limit_s)]) for _ in range(self.k)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def deciding_figures(report: dict, key: str) -> str:
    """The undecided or deciding figures of claim (or claim[variant]) ``key`` in a report,
    with their intervals: what a change of verdict is read from."""
    cid, _, variant = key.partition("[")
    variant = variant.rstrip("]")
    out = []
    for c in report.get("claims", []):
        if c["id"] != cid:
            continue
        for v in c.get("variants") or []:
            if variant and variant != (v.get("variant") or v.get("test", "")):
                continue
            for name, m in (v.get("figures") or {}).items():
                if "outcome" not in m:
                    continue
                iv = m.get("interval")
                val = m.get("value")
                text = f"{val:.4g}" if isinstance(val, (int, float)) else repr(val)
                if iv:
                    text += f" [{iv[0]:.4g}, {iv[1]:.4g}]"
                out.append(f"{name} = {text} ({m['outcome']})")
    return "; ".join(out)


def verdicts_of(report: dict) -> dict[str, str]:
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


def run_once(i: int, seed: int | None, args, passthrough: list[str]) -> dict:
    out = args.out / f"run-{i}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "pytest", "-n", str(args.workers),
           *([] if args.cached else ["--fresh"]),
           f"--claims-report={out}", "-q"]
    if args.order != "none":
        cmd += [f"--random-order-bucket={args.order}", f"--random-order-seed={seed}"]
    cmd += passthrough
    env = dict(os.environ, HYPOTHESIS_PROFILE=args.profile)
    t0 = time.monotonic()
    with Load(args.load):
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
            "unexpected": report.get("unexpected", []), "verdicts": verdicts_of(report),
            "report": bool(report),
            # tests outside the claims (the harness's own, support/tests) fail a run too
            "failed_tests": [ln for ln in proc.stdout.splitlines()
                             if ln.startswith(("FAILED ", "ERROR "))],
            "pytest": tail[0] if tail else "", "command": " ".join(cmd[1:]),
            "figures": {k: deciding_figures(report, k) for k in verdicts_of(report)}}


DECIDED = ("holds", "fails", "drift")


def with_the_load(seen: dict[str, list[int]]) -> bool:
    """A change a busy machine may make: between one decided verdict and inconclusive."""
    vs = set(seen)
    return "inconclusive" in vs and len(vs - {"inconclusive"}) == 1 \
        and (vs - {"inconclusive"}) <= set(DECIDED)


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


class NoReport(RuntimeError):
    """A session wrote no claims report (its log says why)."""


def session_at_load(ids, k: int, out: Path) -> dict:
    """One pytest session of the claims ``ids`` (one process, no cache) beside ``k`` spinning
    processes, its report and log in ``out``: its load, wall time, exit status and every
    timing figure it recorded (:func:`support.machine.sensitivity.figures_of`)."""
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
        raise NoReport(f"load-sensitivity: the session at load {k} wrote no report "
                       f"(exit {proc.returncode}); its log: {out / 'pytest.log'}")
    return {"k": k, "wall_s": round(time.monotonic() - t0, 1), "exit": proc.returncode,
            "figures": sensitivity.figures_of(json.loads(report.read_text()), set(ids))}
