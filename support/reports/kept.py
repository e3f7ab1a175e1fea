"""What runs kept in ``claims/history/`` say about the claims this run did not decide.

* A claim that skipped here (no GPU), or is partial because its accelerator variant did not
  run, may have a verdict in a run kept from a machine that has the accelerator (the GPU
  runner's folder, kept with ``python -m support keep``).
* A claim this run did not select (a fast-tier run leaves the slow tier not run) has its
  last verdict in the newest kept *full* run (every default tier) that ran it, of the same
  releases (Python, torch, JAX, scikit-learn) where one is kept.

That verdict is shown beside this run's, never as it: labelled with the kept run, its
device, its versions and its date ("holds on NVIDIA H200 with torch 2.13.0+cu128 (CUDA
12.8), kept run of 2026-12-01"). The terminal summary, claims.md, the annotated notes and
the errata all read it from here.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from support.machine import devices as table
from support.reports.runs import HISTORY, selection
from support.rules import verdicts

# this run's verdicts that a kept run on an accelerator may speak for: the claim, or its
# accelerator variant, did not run here
SPEAKS_FOR = ("skipped", "partial")
# this run's verdict that the last kept full run speaks for: the claim was not selected
NOT_SELECTED = "not-run"
# what a kept run's claim must be to count: it ran (a partial there still ran on the device)
RAN = verdicts.EXECUTED + ("partial",)
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class Kept:
    """One claim's verdict in one kept run: on an accelerator, or in a full run."""

    id: str
    verdict: str
    run: str           # the kept run's folder, relative to the history folder
    date: str
    device: str        # the accelerator's name, e.g. "NVIDIA H200" (the CPU's for a full run)
    versions: str      # the framework that drove it, e.g. "torch 2.13.0+cu128 (CUDA 12.8)"
    why: str = "accelerator"     # or "not run": this run did not select the claim
    claim: dict = field(default_factory=dict, compare=False, hash=False, repr=False)
    env: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def text(self) -> str:
        return (f"{self.verdict} on {self.device} with {self.versions}, kept run of "
                f"{self.date} ({self.run})")


def _accelerated(variant: dict) -> list[str]:
    return [d for d in variant.get("devices") or []
            if d in table.DEVICES and table.DEVICES[d].accelerator]


def _describe(env: dict, device: str) -> tuple[str, str]:
    """(the accelerator's name, the versions of the framework that drove it)."""
    fp = next((d for d in env.get("devices", []) if d.get("device") == device), {})
    name = fp.get("name") or device
    framework = table.DEVICES[device].framework
    v = (env.get("versions") or {}).get(framework) or fp.get(framework) or "?"
    cuda = f" (CUDA {fp['cuda']})" if fp.get("cuda") else ""
    return name, f"{framework} {v}{cuda}"


_CACHE: dict = {}


def _runs(history: Path) -> list[tuple[str, str, dict]]:
    """(folder, date, report) of every kept run, newest first (read once per process while
    the files stay as they are: the run's claims.md and its terminal summary both ask)."""
    paths = sorted(Path(history).rglob("claims.json"))
    key = (str(history), tuple((str(p), p.stat().st_mtime_ns) for p in paths))
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = _read(history, paths)
    return _CACHE[key]


def _read(history: Path, paths: list[Path]) -> list[tuple[str, str, dict]]:
    out = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "claims" not in data:
            continue
        folder = path.parent.relative_to(history).as_posix() if path.parent != Path(history) \
            else path.parent.name
        m = _DATE.match(path.parent.name)
        out.append((folder, m.group(1) if m else "an unknown date", data))
    return sorted(out, key=lambda r: (r[1], r[0]), reverse=True)


def _accelerators(data: dict) -> list[dict]:
    return [d for d in (data.get("environment") or {}).get("devices", [])
            if d.get("device") in table.DEVICES and table.DEVICES[d["device"]].accelerator]


def _frameworks(env: dict) -> str:
    v = env.get("versions") or {}
    return ", ".join(f"{name} {v[k]}" for k, name in (("torch", "torch"), ("jax", "JAX"))
                     if v.get(k)) or "?"


def _release(env: dict) -> tuple:
    """The Python and the frameworks' versions of a run: what makes two runs' verdicts the
    same releases'."""
    v = env.get("versions") or {}
    return env.get("python"), v.get("torch"), v.get("jax"), v.get("scikit-learn")


def evidence(report: dict, history: Path | None = None) -> dict[str, Kept]:
    """{claim id: a kept run's verdict} for the claims of ``report`` that skipped here or are
    partial (``SPEAKS_FOR``: the newest kept verdict on an accelerator), and those it did not
    select (``NOT_SELECTED``: the newest kept full run's verdict, one of the same releases
    where one is kept)."""
    history = Path(history) if history is not None else HISTORY
    verdict_of = {c["id"]: c.get("verdict") for c in report.get("claims", [])}
    on_device = {cid for cid, v in verdict_of.items() if v in SPEAKS_FOR}
    unselected = {cid for cid, v in verdict_of.items() if v == NOT_SELECTED}
    if not (on_device or unselected) or not history.is_dir():
        return {}
    out: dict[str, Kept] = {}
    mine = _release(report.get("environment") or {})
    # newest first; for the claims not selected, the full runs of this run's releases first
    # (a fast-tier run of the newest releases reads the last full run of those releases)
    ordered = sorted(_runs(history), key=lambda r: _release(r[2].get("environment") or {})
                     != mine)
    for folder, date, data in ordered:
        accelerated = bool(_accelerators(data))
        full = unselected and selection(data).full
        if not (accelerated and on_device) and not full:
            continue
        env = data.get("environment") or {}
        for c in data.get("claims", []):
            cid = c.get("id")
            if cid in out or c.get("verdict") not in RAN:
                continue
            if cid in on_device and accelerated:
                ran = [d for v in c.get("variants", []) if v.get("verdict") in verdicts.EXECUTED
                       for d in _accelerated(v)]
                if ran:
                    name, versions = _describe(env, ran[0])
                    out[cid] = Kept(cid, c["verdict"], folder, date, name, versions, claim=c,
                                    env=env)
            elif cid in unselected and full:
                out[cid] = Kept(cid, c["verdict"], folder, date, env.get("cpu") or "CPU",
                                _frameworks(env), why="not run", claim=c, env=env)
    return out
