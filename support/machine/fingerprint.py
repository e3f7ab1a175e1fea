"""The fingerprint of the environment a run measured: it goes into every claims.json so
that reports from other machines and versions can be put side by side. Built from the
probes of support/machine/environment.py and the device table."""
from __future__ import annotations

import os
import platform

from support.machine import devices as table
from support.machine.environment import (FRAMEWORKS, blas, cpu_name, git_commit, loaded,
                                         numpy_cpu, precision_switches, threads, versions)


def devices() -> list[dict]:
    """Every device present of the loaded frameworks, described by the device table's
    fingerprint (support/machine/devices.py): the same description benchmark files carry."""
    return [dict(table.fingerprint(d), framework=table.DEVICES[d].framework,
                 type=table.DEVICES[d].hardware) for d in table.present(loaded())]


def fingerprint() -> dict:
    frameworks = loaded()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "cpu_dispatch": numpy_cpu(),
        "blas": blas(),
        "threads": threads(),
        "versions": versions(),
        "devices": devices(),
        "precision": precision_switches(),
        "suite_commit": git_commit(),
        "ci": bool(os.environ.get("CI")),
        **({"not_loaded": nl} if (nl := [f for f in FRAMEWORKS if f not in frameworks]) else {}),
    }


def label(env: dict) -> str:
    """A short name for an environment: torch/jax versions and the accelerator."""
    v = env.get("versions", {})
    acc = [d.get("type") for d in env.get("devices", []) if d.get("type") not in ("cpu", "error", None)]
    parts = [f"torch{v.get('torch', '-')}", f"jax{v.get('jax', '-')}"]
    parts.append("+".join(sorted(set(acc))) or "cpu")
    return "-".join(parts).replace("+cpu", "")
