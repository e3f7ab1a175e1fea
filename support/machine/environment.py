"""Probes of the environment a run measures in: package versions, the CPU, its threads, the
BLAS and NumPy's CPU dispatch, the frameworks' precision switches. The fingerprint that
puts them together for a report is support/machine/fingerprint.py's."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from support.paths import ROOT

PACKAGES = ("torch", "jax", "jaxlib", "optax", "numpy", "scikit-learn", "scipy", "pytest",
            "pytest-benchmark", "hypothesis", "xlrd", "pandas", "keras", "onnx",
            "onnxruntime", "matplotlib")


def version(pkg: str) -> str | None:
    """The installed version of a distribution ("python" for the interpreter), or None: the
    one lookup every module uses (registry keys, fingerprints, benchmark files)."""
    if pkg == "python":
        return platform.python_version()
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def versions(packages=PACKAGES) -> dict[str, str]:
    return {p: v for p in packages if (v := version(p))}


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


# the frameworks whose state (threads, precision switches, devices) a fingerprint reads
FRAMEWORKS = ("torch", "jax")


def loaded() -> list[str]:
    """The frameworks this process imported. A fingerprint describes what the run used: a
    run whose tests never imported JAX does not import it (a second of start-up and as long
    again at exit, in every nested pytest the suite's own tests start) to describe it; its
    version is still listed, and the fingerprint names it under ``not_loaded``."""
    return [f for f in FRAMEWORKS if f in sys.modules]


def precision_switches() -> dict:
    out: dict = {}
    frameworks = loaded()
    if "torch" in frameworks:
        import torch
        out["torch_default_dtype"] = str(torch.get_default_dtype())
        out["torch_float32_matmul_precision"] = torch.get_float32_matmul_precision()
        out["torch_cuda_matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        out["torch_cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        out["torch_deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    if "jax" in frameworks:
        import jax
        out["jax_enable_x64_default"] = bool(jax.config.jax_enable_x64)
        out["jax_default_matmul_precision"] = str(jax.config.jax_default_matmul_precision)
        out["jax_threefry_partitionable"] = bool(getattr(jax.config, "jax_threefry_partitionable", False))
    return out


def cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def shared_threads() -> int | None:
    """Intra-op threads for a test that runs beside the other xdist workers: this worker's
    share of the cores, at least one. None outside a worker, or where the user chose a count
    (``OMP_NUM_THREADS``): then every test keeps the frameworks' own setting."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or "PYTEST_XDIST_WORKER" not in os.environ \
            or os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, cores() // int(workers))


def shared_env() -> dict[str, str]:
    """For a process that a test starts beside the other workers: ``OMP_NUM_THREADS`` set to
    :func:`shared_threads` (PyTorch and OpenMP read it as they start); empty where that is
    None."""
    n = shared_threads()
    return {} if n is None else {"OMP_NUM_THREADS": str(n)}


def threads() -> dict:
    out = {"cpu_count": os.cpu_count()}
    if (shared := shared_threads()) is not None:
        # support/harness/timing_lock.py: tests beside another worker ran with this many; timing tests,
        # which run alone, with the counts below
        out["threads_beside_other_workers"] = shared
    if "torch" in loaded():
        import torch
        out["torch_threads"] = torch.get_num_threads()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS"):
        if os.environ.get(var):
            out[var] = os.environ[var]
    return out


def _numpy_simd() -> tuple[dict, list, list]:
    """NumPy's runtime CPU dispatch: (features detected and not disabled by
    NPY_DISABLE_CPU_FEATURES, baseline, dispatch targets built in)."""
    try:
        try:
            from numpy._core import _multiarray_umath as mu      # NumPy >= 2
        except ImportError:
            from numpy.core import _multiarray_umath as mu       # NumPy 1.x
        return (dict(mu.__cpu_features__), list(mu.__cpu_baseline__),
                list(mu.__cpu_dispatch__))
    except (ImportError, AttributeError):
        return {}, [], []


def numpy_argsort_target() -> str:
    """The SIMD code NumPy's default (quicksort, unstable) argsort of int64 runs here:
    "AVX512_SKX", "AVX2" or "generic". It decides the order of equal keys, and so any result
    built on it (scikit-learn < 1.9's GroupKFold: STORY-17). NumPy dispatches 64-bit argsort
    to x86-simd-sort on AVX-512 (Skylake-X) CPUs from 1.25 and also on AVX2 from 2.0; elsewhere,
    with those features disabled (NPY_DISABLE_CPU_FEATURES) or before 1.25 it runs its
    generic introsort. (Measured on NumPy 1.26.4, 2.0.2 and 2.4.6 with the features
    disabled in turn; other architectures are reported "generic".)"""
    import numpy as np
    from packaging.version import Version
    features, _, _ = _numpy_simd()
    v = Version(Version(np.__version__).base_version)
    if v >= Version("1.25") and features.get("AVX512_SKX"):
        return "AVX512_SKX"
    if v >= Version("2.0") and features.get("AVX2"):
        return "AVX2"
    return "generic"


def numpy_cpu() -> dict:
    """NumPy's CPU dispatch: outcomes that depend on the CPU (the order of ties in its
    vectorised sorts, the rounding of its SIMD reductions) are decided by these."""
    features, baseline, dispatch = _numpy_simd()
    return {"features": sorted(k for k, on in features.items() if on),
            "baseline": baseline, "dispatch": dispatch,
            "argsort_int64": numpy_argsort_target()}


def blas() -> list[dict]:
    """The BLAS and OpenMP libraries loaded in this process (threadpoolctl): implementation,
    version, the CPU kernel it chose and its threads. BLAS kernels decide the summation
    order of matrix products, hence their last bits."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "prefix", "version", "architecture",
            "threading_layer", "num_threads")
    # sorted: the load order of the libraries varies between processes and says nothing
    libs = [{k: lib[k] for k in keep if lib.get(k) is not None} for lib in threadpool_info()]
    return sorted(libs, key=lambda lib: (lib.get("user_api", ""), lib.get("prefix", "")))
