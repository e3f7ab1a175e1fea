"""The fingerprint of the environment a run measured: it goes into every claims.json so
that reports from other machines and versions can be put side by side. Built from the
probes of support/machine/environment.py and the device table. The facts of the machine a
claim's figures can follow (``MACHINE``: its CPU, vector level, NumPy's argsort dispatch, BLAS
kernels, cores, accelerators) are read back from a fingerprint here too."""
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


# --------------------------------------------------------------------------- its facts
def accelerators(env: dict) -> str:
    acc = [f"{d.get('type')}: {d.get('name')}" for d in env.get("devices", [])
           if d.get("type") not in ("cpu", None)]
    return "; ".join(acc) or "cpu only"


def simd(env: dict) -> str:
    """The CPU's vector level as NumPy's dispatch sees it: the highest x86-64 level (X86_V4
    is AVX-512), or the features themselves elsewhere ("" where not recorded)."""
    features = (env.get("cpu_dispatch") or {}).get("features") or []
    levels = [f for f in ("X86_V4", "X86_V3", "X86_V2") if f in features]
    if levels:
        return levels[0] + (" (AVX-512)" if levels[0] == "X86_V4" else "")
    return " ".join(features)


def blas_kernels(env: dict) -> str:
    """The BLAS libraries and the CPU kernel each chose ("openblas Haswell")."""
    return "; ".join(" ".join(str(lib[k]) for k in ("internal_api", "architecture") if lib.get(k))
                     for lib in env.get("blas") or [] if lib.get("user_api") == "blas")


# the machine's facts a claim's figures can follow (a registry entry's ``machine``), each
# read from a fingerprint: (name, reader)
MACHINE = (
    ("cpu", lambda env: str(env.get("cpu") or "")),
    ("cores", lambda env: str((env.get("threads") or {}).get("cpu_count") or "")),
    ("cpu vector level", simd),
    ("numpy argsort (int64)", lambda env: str((env.get("cpu_dispatch") or {}).get("argsort_int64") or "")),
    ("blas kernels", blas_kernels),
    ("accelerators", accelerators),
)


def machine_facts(env: dict) -> dict[str, str]:
    """{fact: value} of the machine a fingerprint describes (MACHINE); "" where it does not
    record it (an older report)."""
    return {name: read(env) for name, read in MACHINE}
