"""The fingerprint of the environment a run measured: it goes into every claims.json so
that reports from other machines and versions can be put side by side."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "jax", "jaxlib", "optax", "numpy", "scikit-learn", "scipy", "pytest",
            "pytest-benchmark", "hypothesis", "xlrd", "pandas", "keras", "onnx",
            "onnxruntime", "matplotlib")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def devices() -> list[dict]:
    """Devices seen by the frameworks (imported only if already installed)."""
    seen = [{"framework": "any", "type": "cpu", "name": cpu_name()}]
    if "torch" in sys.modules or _version("torch"):
        import torch
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                seen.append({"framework": "torch", "type": "cuda", "index": i,
                             "name": torch.cuda.get_device_name(i),
                             "cuda": torch.version.cuda})
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            seen.append({"framework": "torch", "type": "mps", "name": "Apple MPS"})
    if "jax" in sys.modules or _version("jax"):
        try:
            import jax
            for d in jax.devices():
                if d.platform != "cpu":
                    seen.append({"framework": "jax", "type": d.platform, "name": str(d.device_kind)})
        except Exception as exc:  # a broken accelerator plugin must not hide the report
            seen.append({"framework": "jax", "type": "error", "name": repr(exc)})
    return seen


def precision_switches() -> dict:
    out: dict = {}
    try:
        import torch
        out["torch_default_dtype"] = str(torch.get_default_dtype())
        out["torch_float32_matmul_precision"] = torch.get_float32_matmul_precision()
        out["torch_cuda_matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        out["torch_cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        out["torch_deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    except ImportError:
        pass
    try:
        import jax
        out["jax_enable_x64_default"] = bool(jax.config.jax_enable_x64)
        out["jax_default_matmul_precision"] = str(jax.config.jax_default_matmul_precision)
        out["jax_threefry_partitionable"] = bool(getattr(jax.config, "jax_threefry_partitionable", False))
    except ImportError:
        pass
    return out


def threads() -> dict:
    out = {"cpu_count": os.cpu_count()}
    try:
        import torch
        out["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS"):
        if os.environ.get(var):
            out[var] = os.environ[var]
    return out


def fingerprint() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "threads": threads(),
        "versions": {p: _version(p) for p in PACKAGES if _version(p)},
        "devices": devices(),
        "precision": precision_switches(),
        "suite_commit": git_commit(),
        "ci": bool(os.environ.get("CI")),
    }


def label(env: dict) -> str:
    """A short name for an environment: torch/jax versions and the accelerator."""
    v = env.get("versions", {})
    acc = [d["type"] for d in env.get("devices", []) if d.get("type") not in ("cpu", "error")]
    parts = [f"torch{v.get('torch', '-')}", f"jax{v.get('jax', '-')}"]
    parts.append("+".join(sorted(set(acc))) or "cpu")
    return "-".join(parts).replace("+cpu", "")
