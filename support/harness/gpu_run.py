"""Run the GPU tier and the benchmarks on a GPU machine, and collect everything in one folder.

    python -m support gpu-run --out DIR [--concrete-data PATH] [--no-bench] [--budget-s 3600]

What it needs: a CUDA machine with this checkout, Python >= 3.10 and the suite installed
(``pip install -e '.[test]'``: torch with CUDA, jax, optax, numpy, scikit-learn, xlrd,
pytest, pytest-benchmark, pytest-timeout, hypothesis). JAX may be the CPU build (the JAX GPU
variants are then skipped with the reason) or ``jax[cuda12]``. No network is used. The
concrete data (``Concrete_Data.xls``/``.csv``) is found through ``--concrete-data``, the
``CONCRETE_DATA`` variable, or the user cache that ``python -m support fetch-data`` fills;
without it the claims that train on it (DEV-08/10/14/15 and the real-model benchmark) are
skipped and the summary says so.

What it runs (each step a separate pytest process with its own time limit; the whole run
stays under ``--budget-s``, an hour by default: lower it on a machine rented by the minute):

1. **Preflight**: fails loudly (exit 2) unless ``torch.cuda.is_available()``.
2. **Claims, GPU tier**: ``pytest claims --tier gpu --require-device cuda`` ->
   ``DIR/claims.md``, ``DIR/claims.json``. ``--require-device cuda`` makes a CUDA-absent skip an
   error and fails the run if no CUDA variant executed.
3. **Benchmarks, one file per device**: ``pytest claims --tier bench --only-device D
   --benchmark-json DIR/bench_<host>_<gpu>_torch<v>_jax<v>_<D>.json`` for D = cpu, cuda.
   The name carries the machine, accelerator, framework versions and device, so files
   from different machines and versions sit side by side in one folder.
4. ``DIR/summary.json``: each step's command, exit code and wall time, the claims whose
   benchmarks ran (benchmarks inform claims and decide nothing: the verdicts are the GPU
   tier's), the device fingerprints, and the paths written; ``DIR/gpu_run.log``: the output
   of every step. Six files in all, no subfolders.

Exit code: 0 when every step passed, else the first failing step's code.

Producing and comparing benchmark files by hand
-----------------------------------------------
One JSON file per run and device (``--benchmark-json`` names the file exactly)::

    pytest claims --tier bench --only-device cpu  --benchmark-json bench/<label>_cpu.json
    pytest claims --tier bench --only-device cuda --benchmark-json bench/<label>_cuda.json \\
        --require-device cuda

or let pytest-benchmark number them in a storage folder, one subfolder per machine type::

    pytest claims --tier bench --only-device cpu --benchmark-save=cpu \\
        --benchmark-storage=file://bench --benchmark-group-by=group

Every benchmark carries ``extra_info`` = {claim, device, side, fingerprint, ratios of the
interleaved sides}; ``machine_info`` carries ``devices`` (fingerprint of each device present:
name, driver, CUDA/cuDNN, memory) and ``frameworks`` (torch, jax, jaxlib, numpy versions).
Groups are per workload (``benchmark.group``), the device is in ``extra_info`` and in the
file name, so one workload's CPU and GPU rows sit side by side::

    pytest-benchmark compare bench/*_cpu.json bench/*_cuda.json --group-by=group \\
        --columns=min,median,rounds
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.paths import ROOT


def _loud(msg: str) -> None:
    bar = "!" * 78
    print(f"\n{bar}\n{msg}\n{bar}\n", file=sys.stderr, flush=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-")[:40]


def _find_data(given: str | None) -> str | None:
    named = given or os.environ.get("CONCRETE_DATA")
    if named:   # pytest stops with the reason if it holds no valid table
        return named
    from support.lab.data import ZIP_MEMBER, cache_dir
    cached = cache_dir() / ZIP_MEMBER
    return str(cached) if cached.exists() else None


def label(device_name: str) -> str:
    from support.machine.environment import version
    return "_".join(["bench", _slug(platform.node() or "host"), _slug(device_name),
                     f"torch{_slug(version('torch') or 'none')}",
                     f"jax{_slug(version('jax') or 'none')}"])


def _step(name: str, cmd: list[str], timeout: float, log: Path, env=None) -> dict:
    head = f"\n=== {name}: {' '.join(cmd)}  (limit {timeout:.0f} s)\n"
    print(head, end="", flush=True)
    t0 = time.time()
    try:
        with open(log, "a") as fh:
            fh.write(head)
            fh.flush()
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=env)
            for line in proc.stdout:      # tee: the log file and the console
                fh.write(line)
                sys.stdout.write(line)
            rc = proc.wait(timeout=max(1.0, timeout - (time.time() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = 124
        _loud(f"{name} ran past its {timeout:.0f} s limit and was stopped")
    return {"step": name, "cmd": cmd, "rc": rc, "wall_s": round(time.time() - t0, 1),
            "log": str(log)}


def arguments(command: str, parser) -> None:
    parser.add_argument("--out", required=True, help="folder for the report, benchmarks and logs")
    parser.add_argument("--concrete-data", default=None, help="path of the concrete data")
    parser.add_argument("--no-bench", action="store_true", help="run the GPU claims only")
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="wall-clock budget for all steps (default 3600 s)")


def _preflight(out: Path) -> str | None:
    """The CUDA card's name, or None after saying loudly why nothing can run: a GPU run on a
    machine without a GPU must not look like a pass."""
    try:
        import torch
    except ImportError as exc:
        _loud(f"gpu-run: torch is not importable ({exc}); install the suite first")
        return None
    if not torch.cuda.is_available():
        from support.machine.devices import absent_reason
        _loud("gpu-run: NO CUDA DEVICE. " + absent_reason("cuda") +
              ".\nThis command runs the GPU tier and must run on a machine with a CUDA GPU; "
              "nothing was run.")
        (out / "summary.json").write_text(json.dumps(
            {"ok": False, "error": "no CUDA device: " + absent_reason("cuda")}, indent=2))
        return None
    return torch.cuda.get_device_name(0)


def _pytest(data: str | None) -> tuple[list[str], dict]:
    """The pytest command every step extends, and its environment."""
    # -c pins the ini (and so the rootdir and the plugins) whatever the other paths are;
    # option values are joined with "=" so pytest never mistakes them for test paths
    common = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "claims", "-q",
              "--timeout=300"] + ([f"--concrete-data={data}"] if data else [])
    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS (RNG-08)
    # JAX would otherwise take 75% of the card's memory the first time it is touched,
    # leaving torch's claims the rest
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return common, env


def _bench_step(dev: str, name: str, out: Path, scratch: Path, common: list[str], env: dict,
                budget: float, logs: Path) -> dict:
    """The bench tier on one device, into one benchmark JSON named by machine and versions."""
    if budget < 30:
        return {"step": f"bench-{dev}", "rc": 124, "skipped": "no time left in the budget"}
    path = out / f"{label(name)}_{dev}.json"
    extra = ["--require-device", "cuda"] if dev == "cuda" else []
    st = _step(f"bench-{dev}", common + ["--tier", "bench", "--only-device", dev,
                                         f"--benchmark-json={path}", "--benchmark-group-by",
                                         "group", f"--claims-report={scratch / f'bench-{dev}'}"]
               + extra, budget, logs, env)
    st["benchmark_json"] = str(path) if path.exists() else None
    bench_claims = scratch / f"bench-{dev}" / "claims.json"
    if bench_claims.exists():   # which claims the benchmarks informed (no verdicts)
        report = json.loads(bench_claims.read_text())
        st["benchmarked_claims"] = sorted(
            c["id"] for c in report.get("claims", [])
            if any(v.get("verdict") == "benchmark" for v in c.get("variants", [])))
    return st


def _finish(summary: dict, out: Path, start: float) -> int:
    rcs = [s["rc"] for s in summary["steps"]]
    summary["ok"] = all(rc == 0 for rc in rcs)
    summary["wall_s"] = round(time.time() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"\ngpu-run: {'OK' if summary['ok'] else 'FAILED'} in {summary['wall_s']} s; "
          f"report in {out}", flush=True)
    if not summary["ok"]:
        _loud("gpu-run FAILED: " + ", ".join(f"{s['step']} rc={s['rc']}"
                                             for s in summary["steps"] if s["rc"]))
    return next((rc for rc in rcs if rc), 0)


def run(command: str, args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # a flat folder of few files, easy to copy into claims/history/: claims.md,
    # claims.json, one benchmark JSON per device, summary.json and one log
    logs = out / "gpu_run.log"
    logs.write_text("")
    with tempfile.TemporaryDirectory(prefix="gpu_run_") as scratch:
        return _run_in(Path(scratch), out, logs, args)


def _run_in(scratch: Path, out: Path, logs: Path, args) -> int:
    start = time.time()
    gpu_name = _preflight(out)
    if gpu_name is None:
        return 2
    from support.machine import devices
    data = _find_data(args.concrete_data)
    summary: dict = {"ok": False, "out": str(out), "concrete_data": data,
                     "devices": {d: devices.fingerprint(d) for d in devices.present()},
                     "steps": []}
    if data is None:
        print("NOTE: concrete data not found; claims training on it will be skipped",
              flush=True)
    common, env = _pytest(data)

    def left() -> float:
        return args.budget_s - (time.time() - start)

    # the GPU tier of the claims, then the benchmarks, one JSON file per device
    summary["steps"].append(_step(
        "claims-gpu", common + ["--tier", "gpu", "--require-device", "cuda",
                                f"--claims-report={scratch / 'claims'}"],
        min(300.0, left() * (0.5 if not args.no_bench else 1.0)), logs, env))
    for f in ("claims.md", "claims.json"):
        if (scratch / "claims" / f).exists():
            shutil.copy(scratch / "claims" / f, out / f)
    if not args.no_bench:
        for dev, name in (("cuda", gpu_name), ("cpu", "cpu")):
            budget = left() if dev == "cpu" else left() * 0.5
            summary["steps"].append(_bench_step(dev, name, out, scratch, common, env, budget,
                                                logs))
    return _finish(summary, out, start)
