"""What the GPU run's steps leave, put together: ``claims.json`` and ``claims.md`` (the claims
steps' reports merged, each claim from the step that ran it, and what a stopped step did not
reach said so), and ``controls.json`` (the controls steps' sessions judged as ``python -m
support controls`` judges them, in a child process: finding the controls imports every claim
module, and the run's own long-lived process never imports torch or JAX).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.commands.gpu_steps import CLAIM_STEPS, PREFLIGHT_S, Step, child_env
from support.paths import ROOT
from support.reports import report
from support.rules import controls, verdicts


def merge_reports(reports: list[dict]) -> dict:
    """The claims steps' reports as one: each claim from the step that ran it (a claim no
    step ran keeps its not-run entry), the counts recomputed, the lists joined."""
    merged = json.loads(json.dumps(reports[0]))
    index = {c["id"]: i for i, c in enumerate(merged["claims"])}
    for rep in reports[1:]:
        for c in rep.get("claims", []):
            i = index.get(c["id"])
            if i is None:
                index[c["id"]] = len(merged["claims"])
                merged["claims"].append(c)
            elif merged["claims"][i]["verdict"] == "not-run" and c["verdict"] != "not-run":
                merged["claims"][i] = c
        for key in ("unexpected", "stale_expectations"):
            merged[key] = list(dict.fromkeys(merged.get(key, []) + rep.get(key, [])))
        merged["elapsed_s"] = round(merged.get("elapsed_s", 0) + rep.get("elapsed_s", 0), 1)
    summary = {v: 0 for v in verdicts.ORDER}
    for c in merged["claims"]:
        summary[c["verdict"]] = summary.get(c["verdict"], 0) + 1
    merged["summary"] = summary
    merged["expected_verdicts"] = sum(1 for c in merged["claims"] if c.get("expected")
                                      and c["verdict"] == c["expected"]["verdict"])
    return merged


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)      # a reader never sees half a file


def _step_of(claim: dict) -> str:
    """The claims step that runs a claim's GPU tests (a claim of the registry's gpu tier that no
    earlier step names is the last one's)."""
    for s in CLAIM_STEPS:
        if claim["id"] in s.claims or (not s.claims and claim.get("tier") == "gpu"):
            return s.name
    return ""


def mark_not_reached(merged: dict, stopped: dict[str, str]) -> None:
    """A claim its step did not reach before that step was stopped says so, rather than
    "not selected": ``stopped`` maps a step's name to how it was stopped or skipped."""
    for c in merged["claims"]:
        why = stopped.get(_step_of(c))
        if c["verdict"] == "not-run" and why:
            c["reason"] = f"not reached: the GPU run's step {_step_of(c)} {why}"


def write_claims(reports: list[dict], out: Path, stopped: dict[str, str]) -> list[Path]:
    merged = merge_reports(reports)
    mark_not_reached(merged, stopped)
    write_json(out / "claims.json", merged)
    (out / "claims.md").write_text(report.markdown(merged), encoding="utf-8")
    return [out / "claims.json", out / "claims.md"]


def write_controls(step: Step, report: Path, wall: float, out: Path) -> Path | None:
    """A controls step's outcomes, judged as ``python -m support controls`` judges them and
    added to ``controls.json``, in a child process: finding the controls imports every claim
    module, and this long-lived process never imports torch or JAX (the card stays the
    steps')."""
    path = out / "controls.json"
    code = ("import sys; from support.commands import gpu_reports; "
            "gpu_reports.judge_controls(*sys.argv[1:])")
    chosen = ["process", step.control] if step.control else ["test", *step.claims]
    proc = subprocess.run([sys.executable, "-c", code, str(report), str(path), str(wall),
                           step.name, *chosen], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=PREFLIGHT_S)
    if proc.returncode != 0 or not path.exists():
        print(f"controls: could not judge the step's report: {proc.stderr[-2000:]}", flush=True)
        return None
    return path


def judge_controls(report: str, out: str, wall: str, step: str, scope: str, *chosen: str
                   ) -> None:
    """Add to ``out`` the controls that the session of ``step`` ran, judged on its claims
    ``report``: with ``scope`` "test", every test-scope control of the claims ``chosen`` (a
    ``--controls`` session); with "process", the one process-scope control named (its own
    session). ``counts`` are those of every control ``out`` then holds, ``steps`` each step's
    own."""
    from support.harness.claim_modules import discover
    from support.rules import entries as reg
    registry = reg.load_entries()
    data = json.loads(Path(report).read_text(encoding="utf-8"))
    found = discover()
    if scope == "process":
        picked, how = [found[chosen[0]]], "process"
    else:
        picked = [c for c in controls.for_claims(chosen) if c.scope == "test"]
        how = "test-scope"
    mine = [controls.evaluate(c, data, float(wall) / max(1, len(picked)), how, registry)
            for c in picked]
    path = Path(out)
    earlier = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    results = earlier.get("controls", []) + mine
    claims = list(dict.fromkeys(earlier.get("claims", []) +
                                [cid for c in picked for cid in c.claims]))
    write_json(path, {"schema": 1, "claims": claims, "counts": controls.count(results),
                       "steps": {**earlier.get("steps", {}), step: controls.count(mine)},
                       "controls": results})


def ran(report: dict) -> dict:
    """A step's verdict counts, of the claims it ran."""
    counts: dict[str, int] = {}
    for c in report.get("claims", []):
        if c["verdict"] not in ("not-run", "pending", "not-testable"):
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    return counts
