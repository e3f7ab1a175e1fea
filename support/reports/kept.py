"""What runs kept from other machines say about the claims this run could not run.

A claim that skipped here (no GPU), or is partial because its accelerator variant did not
run, may have a verdict in a run kept in ``claims/history/`` from a machine that has the
accelerator (the GPU runner's folder, kept with ``python -m support keep``). That verdict is
shown beside this run's, never as it: labelled with the kept run, its device, its versions
and its date ("holds on NVIDIA H200 with torch 2.13.0+cu128 (CUDA 12.8), kept run of
2026-12-01"). The terminal summary, claims.md, the annotated notes and the errata all read
it from here.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from support.machine import devices as table
from support.reports.runs import HISTORY
from support.rules import verdicts

# this run's verdicts that a kept run may speak for: the claim, or its accelerator variant,
# did not run here
SPEAKS_FOR = ("skipped", "partial")
# what a kept run's claim must be to count: it ran (a partial there still ran on the device)
RAN = verdicts.EXECUTED + ("partial",)
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class Kept:
    """One claim's verdict in one kept run, on one accelerator."""

    id: str
    verdict: str
    run: str           # the kept run's folder, relative to the history folder
    date: str
    device: str        # the accelerator's name, e.g. "NVIDIA H200"
    versions: str      # the framework that drove it, e.g. "torch 2.13.0+cu128 (CUDA 12.8)"

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
    """(folder, date, report) of every kept run with an accelerator, newest first (read once
    per process while the files stay as they are: the run's claims.md and its terminal
    summary both ask)."""
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
        accelerators = [d for d in (data.get("environment") or {}).get("devices", [])
                        if d.get("device") in table.DEVICES
                        and table.DEVICES[d["device"]].accelerator]
        if not accelerators or "claims" not in data:
            continue
        folder = path.parent.relative_to(history).as_posix() if path.parent != Path(history) \
            else path.parent.name
        m = _DATE.match(path.parent.name)
        out.append((folder, m.group(1) if m else "an unknown date", data))
    return sorted(out, key=lambda r: (r[1], r[0]), reverse=True)


def evidence(report: dict, history: Path | None = None) -> dict[str, Kept]:
    """{claim id: its newest kept verdict on an accelerator} for the claims of ``report``
    that skipped here or are partial (``SPEAKS_FOR``)."""
    history = Path(history) if history is not None else HISTORY
    wanted = {c["id"] for c in report.get("claims", []) if c.get("verdict") in SPEAKS_FOR}
    if not wanted or not history.is_dir():
        return {}
    out: dict[str, Kept] = {}
    for folder, date, data in _runs(history):
        for c in data.get("claims", []):
            if c.get("id") not in wanted or c["id"] in out or c.get("verdict") not in RAN:
                continue
            ran = [d for v in c.get("variants", []) if v.get("verdict") in verdicts.EXECUTED
                   for d in _accelerated(v)]
            if ran:
                name, versions = _describe(data.get("environment") or {}, ran[0])
                out[c["id"]] = Kept(c["id"], c["verdict"], folder, date, name, versions)
    return out
