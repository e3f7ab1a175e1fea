"""The GPU run's steps and the pytest command of each (support/commands/gpu_run.py runs them).

Each step is one pytest process with at most its share of the budget: the claims steps
(``--tier gpu --require-device cuda`` on their selection, the last one the CUDA variants of
claims outside the GPU tier), the controls steps (a ``--controls`` session of the quick GPU
claims, then the CPU-vs-GPU claims' process-scope controls, each in a session of its own) and
the bench steps (one device each). :func:`plan` puts them in the order they run: what matters
most first. Every child gets :func:`child_env`.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from support.paths import ROOT

PREFLIGHT_S = 120.0
# one test longer than this is stopped by pytest-timeout, where it is installed, so that a
# hung test does not take its step's whole share
TEST_TIMEOUT_S = 180
# how a step's pytest is started; the self-tests put a fake child process here
PYTEST = [sys.executable, "-m", "pytest"]


@dataclass(frozen=True)
class Step:
    """One step of the run: a pytest process with at most ``share`` of the budget."""

    name: str
    what: str
    share: float
    claims: tuple[str, ...] = ()   # a claims step's selection; () = the rest of the GPU tier
    device: str = ""               # a bench step's device
    # a claims step's tiers; outside the GPU tier only the tests' CUDA variants are run
    tier: str = "gpu"
    controls: bool = False         # runs its claims' test-scope controls, not the claims
    # a process-scope control run in a session of its own (it selects its claims' tests)
    control: str = ""

    @property
    def bench(self) -> bool:
        return bool(self.device)

    @property
    def judged(self) -> bool:
        """A controls step: its report is judged into controls.json."""
        return self.controls or bool(self.control)

    @property
    def merged(self) -> bool:
        """A claims step: its report joins claims.json, and what it did not reach says so."""
        return not (self.bench or self.judged)


CLAIM_STEPS = (
    Step("claims-cpu-vs-gpu", "the design card's 'small MLPs run faster on CPU than GPU' "
         "(DEV-07, DEV-08, DEV-09, DEV-14; DEV-13 shares their width sweep)", 0.30,
         claims=("DEV-07", "DEV-08", "DEV-09", "DEV-13", "DEV-14")),
    Step("claims-dev01-amp10", "moving a model is two lines (DEV-01); mixed precision's "
         "memory and throughput (AMP-10)", 0.15, claims=("DEV-01", "AMP-10")),
    Step("claims-gpu-rest", "the rest of the GPU tier", 0.40),
    # a claim of the slow tier with a CUDA variant: the default run decides its CPU variant,
    # and the GPU tier's steps never select it (its CUDA variant had never run)
    Step("claims-cuda-variants", "the CUDA variants of claims outside the GPU tier (DEV-10: "
         "the timings are the least reproducible numbers; the GPU halves of DTYPE-04, JAX-12 "
         "and JIT-13)", 0.10, claims=("DEV-10", "DTYPE-04", "JAX-12", "JIT-13"),
         tier="fast,slow"),
)
# the GPU claims whose tests take seconds: their controls re-run them once per control;
# then the CPU-vs-GPU claims' process-scope controls (the width sweep and the real model are
# module fixtures), the level control first: it has never been run, the fixed cost's sibling
# neither
CONTROL_STEPS = (
    Step("controls-gpu", "the test-scope controls of the quick GPU claims (DEV-02 to DEV-06, "
         "DEV-12, RNG-08)", 0.25,
         claims=("DEV-02", "DEV-03", "DEV-04", "DEV-05", "DEV-06", "DEV-12", "RNG-08"),
         controls=True),
    Step("control-the-card-is-the-cpu", "the CPU-vs-GPU claims (DEV-06 to DEV-09, DEV-13, "
         "DEV-14) with the same work on both sides: their level control", 0.30,
         control="the-card-is-the-cpu"),
    Step("control-cpu-steps-cost-20-ms-more", "the width sweep and the real model with a fixed "
         "20 ms on every CPU step (DEV-07 to DEV-09, DEV-13, DEV-14)", 0.20,
         control="cpu-steps-cost-20-ms-more"),
)
BENCH_STEPS = (
    Step("bench-cuda", "the bench tier on the GPU", 0.25, device="cuda"),
    Step("bench-cpu", "the bench tier on the CPU", 0.25, device="cpu"),
)


def plan(no_bench: bool = False) -> tuple[Step, ...]:
    """The steps in the order they run: what matters most first."""
    return CLAIM_STEPS + CONTROL_STEPS + (() if no_bench else BENCH_STEPS)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-")[:40]


def find_data(given: str | None) -> str | None:
    """The concrete data the steps are given: the path named (``--concrete-data``, else the
    variable the suite's data plugin reads), else the cache's or the suite's own copy."""
    from support.harness import concrete_data
    named = concrete_data.named(given)
    if named:   # pytest stops with the reason if it holds no valid table
        return named
    import importlib.util

    from support.lab.data import BUNDLED, resolve
    kind, path = resolve()
    if path is not None and path.suffix == ".xls" and importlib.util.find_spec("xlrd") is None:
        path = BUNDLED if BUNDLED.exists() else None       # a cached .xls needs xlrd
    return str(path) if path is not None else None


def label(device_name: str) -> str:
    from support.machine.environment import version
    return "_".join(["bench", _slug(platform.node() or "host"), _slug(device_name),
                     f"torch{_slug(version('torch') or 'none')}",
                     f"jax{_slug(version('jax') or 'none')}"])


def child_env() -> dict:
    """The environment of every child: deterministic cuBLAS (RNG-08), JAX taking the card's
    memory as it needs it rather than 75 % of it the first time it is touched (torch's claims
    need the rest), output unbuffered (the log shows a step as it runs)."""
    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _common(data: str | None, limit: float) -> list[str]:
    """The pytest command every step extends."""
    # -c pins the ini (and so the rootdir and the plugins) whatever the other paths are;
    # option values are joined with "=" so pytest never mistakes them for test paths
    # one process: the GPU tier's device timings and the benchmarks take the card alone
    cmd = PYTEST + ["-c", str(ROOT / "pyproject.toml"), "claims", "-q", "--numprocesses=0"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={int(max(1, min(TEST_TIMEOUT_S, limit)))}")
    return cmd + ([f"--concrete-data={data}"] if data else [])


def command(step: Step, data: str | None, limit: float, report: Path,
            bench_json: Path | None = None) -> list[str]:
    """The pytest command of one step."""
    cmd = _common(data, limit)
    if step.bench:
        cmd += ["--tier", "bench", "--only-device", step.device,
                f"--benchmark-json={bench_json}", "--benchmark-group-by=group"]
        if step.device == "cuda":
            cmd += ["--require-device", "cuda"]
    else:
        cmd += ["--tier", step.tier, "--require-device", "cuda"]
        if step.controls:
            cmd += ["--controls", "-p", "no:randomly"]
        if step.control:
            # the control selects its claims' tests; nothing kept from an earlier session
            cmd += ["--fresh", f"--control={step.control}", "-p", "no:randomly"]
        if step.tier != "gpu":
            # a device-generic test's CUDA variant, not the claim's other tests
            cmd += ["--only-device", "cuda", "-m", "needs_device"]
        if step.claims:
            cmd += [f"--claim={c}" for c in step.claims]
        elif not step.control:
            earlier = [c for s in CLAIM_STEPS for c in s.claims]
            cmd += ["-k", "not (" + " or ".join(earlier) + ")"]
    return cmd + [f"--claims-report={report}"]
