"""The negative controls' runner: the pytest sessions ``python -m support controls`` starts
(support/commands/controls.py prints what they did).

What a control is, and what its outcome means, is :mod:`support.rules.controls`; what the
outcomes add up to per claim, :mod:`support.rules.control_summary`. :func:`run_controls` finds
the suite's controls (:func:`support.harness.claim_modules.discover` imports every claim test
module), runs the test-scope ones in one session (``--controls``) and each process-scope one
in a session of its own with an empty result cache, within a budget whose rotation the commit
decides (a control whose every test needs a device absent here gets no session, only its
"not run" entry), judges each session's report, writes ``controls.json`` and folds the
outcomes into this machine's ledger.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from support.harness.claim_modules import absent_here, discover
from support.lab.data import cache_dir
from support.machine import fingerprint
from support.machine.environment import git_commit
from support.rules.control_summary import (LEDGER, known_controls, remember, scale_summary,
                                           summarise)
from support.rules.controls import count, evaluate


def ledger_file() -> Path:
    """This machine's ledger of control outcomes (the user cache), read by every controls
    run for the controls it leaves to a later rotation."""
    return cache_dir() / LEDGER


def session(args: list[str], out, env_extra: dict, log) -> tuple[int, dict, float]:
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


@dataclass
class ControlsRun:
    """What :func:`run_controls` did: ``data`` is controls.json's content."""

    data: dict
    results: list[dict]
    summary: dict
    counts: dict[str, int]
    left: list[str]
    wall: float
    baseline: dict | None


def run_controls(registry: dict, claims: list[str], out: Path, workers: str,
                 budget_s: float | None, report: Path, say=print) -> ControlsRun:
    """Run the controls of ``claims`` (all where empty), writing into ``out`` (emptied first)
    the sessions' reports, ``sessions.log`` and ``controls.json``; ``say`` hears a line per
    session as it ends. ``report``: the claims report whose verdicts are the claims' without
    a control (where it exists)."""
    found = discover()
    chosen = [c for c in found.values()
              if not claims or set(claims) & set(c.claims)]
    tests = [c for c in chosen if c.scope == "test"]
    procs = [c for c in chosen if c.scope == "process"]
    commit = git_commit() or ""
    # the rotation: process controls from an offset the commit decides, as many as fit
    start = int(commit[:8], 16) % len(procs) if procs and commit[:8].isalnum() else 0
    ordered = procs[start:] + procs[:start]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    results: list[dict] = []
    with open(out / "sessions.log", "w") as log:
        if tests:
            wanted = sorted({cid for c in tests for cid in c.claims})
            claim_args = [f"--claim={cid}" for cid in wanted]
            _, rep, wall = session(["-n", workers, "--controls", *claim_args],
                                   out / "test-scope", {}, log)
            for c in tests:
                results.append(evaluate(c, rep, wall / max(1, len(tests)), "test-scope", registry))
            say(f"controls: {len(tests)} test-scope controls in one session, {wall:.0f} s")
        left = []
        for c in ordered:
            absent = absent_here(c)
            if absent:
                # listed as not run, as a session of its own would say, without its start-up
                skipped = {"verdict": "skipped", "reason": absent, "control": c.name}
                results.append(evaluate(c, {"claims": [{"id": cid, "variants": [skipped]}
                                                       for cid in c.claims]},
                                        0.0, "process", registry))
                say(f"controls: {c.name} not run here: {absent}")
                continue
            spent = time.monotonic() - t0
            if budget_s is not None and results and spent > budget_s:
                left.append(c.name)
                continue
            with tempfile.TemporaryDirectory(prefix="claims-control-cache-") as cache:
                _, rep, wall = session(["-n", workers, "--fresh", f"--control={c.name}",
                                        *[f"--claim={cid}" for cid in c.claims]],
                                       out / c.name, {"LECTURE11_CACHE": cache}, log)
            results.append(evaluate(c, rep, wall, "process", registry))
            say(f"controls: {c.name} ({', '.join(c.claims)}), its own session, {wall:.0f} s")
    baseline = json.loads(report.read_text()) if report.is_file() else None
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
    (out / "controls.json").write_text(json.dumps(data, indent=1))
    return ControlsRun(data, results, summary, counts, left, wall, baseline)
