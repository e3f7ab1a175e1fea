"""A run kept in ``claims/history/``: ``python -m support keep RUN --label NAME``
(support/commands/keep.py).

:func:`keep` copies a run's ``claims.json``, ``claims.md`` and benchmark JSON into
``claims/history/<date>-<label>[-<tiers>]-<machine>/`` with a generated ``NOTE.md``
(environment, the CPU as the figures see it, selection, verdict counts, wall time, your note),
so that the next ``diff last ...`` compares against it (support/reports/diff.py).
"""
from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path

from support.machine import fingerprint
from support.reports import runs
from support.reports.diff import DiffError, describe_run, load_run, verdict_counts


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-").lower()[:40]


def machine_name(env: dict) -> str:
    """A short machine description from a fingerprint: its accelerator, else its CPU count."""
    acc = [d.get("name", "") for d in env.get("devices", []) if d.get("type") not in ("cpu", "error")]
    if acc:
        return _slug(acc[0].replace("NVIDIA", "")) or "gpu"
    cores = (env.get("threads") or {}).get("cpu_count")
    # AVX-512 kernels round some figures otherwise (a claim's entry's machine = [...])
    wide = "-avx512" if fingerprint.simd(env).startswith("X86_V4") else ""
    return (f"cpu{cores}core" if cores else "cpu") + wide


def keep(run: Path, label: str, machine: str | None = None, note: str = "",
         history: Path = runs.HISTORY, date: str | None = None) -> Path:
    """Copy a run's report into ``history/<date>-<label>[-<tiers>]-<machine>/`` with a
    NOTE.md. A partial run's folder says so after its label (``-fast``, the tiers it ran,
    or ``-partial``), so that it never stands for a full run of the same label."""
    src = Path(run)
    folder = src.parent if src.is_file() else src
    found = load_run(folder)
    cj = folder / "claims.json"
    date = date or datetime.date.fromtimestamp(cj.stat().st_mtime).isoformat()
    tag = runs.selection(found.data).tag()
    name = "-".join(x for x in (date, _slug(label), tag, _slug(machine or machine_name(found.env)))
                    if x)
    dest = history / name
    if dest.exists():
        raise DiffError(f"{dest} exists already: choose another --label or --machine")
    dest.mkdir(parents=True)
    shutil.copy2(cj, dest / "claims.json")
    if (folder / "claims.md").exists():
        shutil.copy2(folder / "claims.md", dest / "claims.md")
    for bench in found.benchmarks:
        shutil.copy2(bench["_file"], dest / Path(bench["_file"]).name)
    (dest / "NOTE.md").write_text(_note(found, label, note))
    return dest


def _note(run: runs.Run, label: str, note: str) -> str:
    env, v = run.env, run.env.get("versions", {})
    acc = ", ".join(f"{d.get('type')}: {d.get('name')}" for d in env.get("devices", [])
                    if d.get("type") not in ("cpu", None)) or "none"
    sel = runs.selection(run.data)
    facts = fingerprint.machine_facts(env)
    lines = [f"# {label}: {run.label}", "",
             "* versions: " + ", ".join(f"{k} {v[k]}" for k in
                                          ("torch", "jax", "jaxlib", "optax", "numpy", "scipy",
                                           "scikit-learn") if k in v),
             f"* Python {env.get('python')} on {env.get('platform')}; CPU {env.get('cpu')} "
             f"({(env.get('threads') or {}).get('cpu_count')} cores); accelerators: {acc}",
             "* the CPU as the figures see it: " + "; ".join(
                 f"{k} {facts[k]}" for k in ("cpu vector level", "numpy argsort (int64)",
                                             "blas kernels") if facts[k]),
             f"* selection: {sel.text()}"
             + (f": {', '.join(sel.not_run)}" if sel.not_run and not sel.full else ""),
             f"* verdicts: {verdict_counts(describe_run(run))}",
             f"* pytest wall time: {run.data.get('elapsed_s')} s; suite commit "
             f"{env.get('suite_commit')}",
             f"* kept with `python -m support keep` from "
             f"`{run.path.parent.name}/{run.path.name}`"]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"
