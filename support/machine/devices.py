"""The devices a run can use, their fingerprints, and device parametrisation of claims.

* :func:`present` lists what is there: ``cpu`` always; ``cuda`` when ``torch.cuda`` sees a
  card; ``mps`` on Apple silicon; ``jax:gpu`` (or ``jax:tpu``) when ``jax.devices()`` holds
  an accelerator. :func:`absent_reason` says, for a device that is not there, why (torch
  built without CUDA, no driver, ...).
* :func:`fingerprint` describes one device: name, driver, CUDA/cuDNN and framework
  versions, memory; it goes into every benchmark's ``machine_info`` and into the
  device claims' records.
* :func:`check` says whether a test needing some devices can run here, and why not;
  :func:`satisfies` whether a variant that ran on a device meets an entry's ``requires``;
  :func:`sync` picks the timing method's synchronisation of a device.

A test's devices are pytest marks: :mod:`support.harness.device_marks` (``needs``,
``params``), which :mod:`support.harness.device_options` reads.
"""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass

from support.machine.environment import version

@dataclass(frozen=True)
class Device:
    """One row of the device table: everything the suite knows about a device."""

    name: str          # the suite's name: a test's needs_device mark, --only-device, requires
    framework: str     # whose device it is: torch or jax
    hardware: str      # what it runs on: --only-device groups a JAX device with torch's
    accelerator: bool  # counts for a claim that requires "gpu"


# The one device table. Adding a device: a row here, and its branch in available(),
# absent_reason(), fingerprint() and sync() below.
DEVICES = {d.name: d for d in (
    Device("cpu", "torch", "cpu", False),
    Device("cuda", "torch", "cuda", True),
    Device("mps", "torch", "mps", True),
    Device("jax:cpu", "jax", "cpu", False),
    Device("jax:gpu", "jax", "cuda", True),
    Device("jax:tpu", "jax", "tpu", True),
)}
KNOWN = tuple(DEVICES)
# what a registry entry may require to have run (``requires``): a device, or "gpu" for any
# accelerator
REQUIREMENTS = KNOWN + ("gpu",)


@functools.lru_cache(maxsize=None)
def _jax_accelerators() -> tuple[str, ...]:
    try:
        import jax
        return tuple(sorted({d.platform for d in jax.devices() if d.platform != "cpu"}))
    except Exception:  # no jax, or a broken accelerator plugin: the CPU suite still runs
        return ()


def available(device: str) -> bool:
    kind = device.split(":")[0] if not device.startswith("jax:") else device
    if kind == "cpu":
        return True
    if kind == "cuda":
        try:
            import torch
            return torch.cuda.is_available()
        except ImportError:
            return False
    if kind == "mps":
        try:
            import torch
            mps = getattr(torch.backends, "mps", None)
            return bool(mps is not None and mps.is_available())
        except ImportError:
            return False
    if kind == "jax:cpu":
        return True
    if kind.startswith("jax:"):
        return kind.split(":", 1)[1] in _jax_accelerators()
    raise ValueError(f"unknown device {device!r}; known: {', '.join(KNOWN)}")


def present(frameworks=None) -> list[str]:
    """The devices this machine has, CPU first; only those of ``frameworks`` when given
    (names as in the table's ``framework`` column), so that a caller describing a run asks
    nothing of a framework the run never imported."""
    return [d for d in KNOWN
            if (frameworks is None or DEVICES[d].framework in frameworks) and available(d)]


def absent_reason(device: str) -> str:
    """Why ``device`` is not usable here, in words (for skips and errors)."""
    kind = device.split(":")[0] if not device.startswith("jax:") else device
    if kind == "cuda":
        try:
            import torch
        except ImportError:
            return "CUDA absent: torch is not installed"
        if torch.version.cuda is None:
            return (f"CUDA absent: torch {torch.__version__} is a build without CUDA "
                    "(torch.version.cuda is None)")
        return (f"CUDA absent: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no "
                "card (torch.cuda.is_available() is False: no GPU or no driver)")
    if kind == "mps":
        return (f"MPS absent: needs Apple silicon with macOS >= 12.3 "
                f"(this is {platform.system()} {platform.machine()})")
    if kind.startswith("jax:"):
        have = _jax_accelerators()
        return (f"{kind} absent: jax.devices() holds {', '.join(have) or 'only CPU'} "
                f"(jax {version('jax')}, jaxlib {version('jaxlib')})")
    return ""


# --------------------------------------------------------------------------- fingerprints
def _nvidia_driver() -> str | None:
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except Exception:
        return None


def fingerprint(device: str) -> dict:
    """Name, driver, CUDA and framework versions of one device."""
    from support.machine.environment import cpu_name, threads
    fp: dict = {"device": device, "python": platform.python_version(),
                "torch": version("torch"), "jax": version("jax"),
                "jaxlib": version("jaxlib")}
    if device == "cpu":
        fp.update(name=cpu_name(), machine=platform.machine(), threads=threads())
    elif device.startswith("cuda") and available("cuda"):
        import torch
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        fp.update(name=props.name, capability=f"{props.major}.{props.minor}",
                  memory_gib=round(props.total_memory / 2**30, 1),
                  cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                  driver=_nvidia_driver(), device_count=torch.cuda.device_count(),
                  allow_tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32))
    elif device == "mps" and available("mps"):
        fp.update(name="Apple MPS", macos=platform.mac_ver()[0], machine=platform.machine())
    elif device.startswith("jax:") and available(device):
        import jax
        ds = jax.devices(device.split(":", 1)[1])
        fp.update(name=ds[0].device_kind, count=len(ds),
                  jax_backend=jax.default_backend(), driver=_nvidia_driver())
        try:
            fp["jax_cuda_plugin"] = version("jax-cuda12-plugin") or version("jax-cuda13-plugin")
        except Exception:
            pass
    else:
        fp["absent"] = absent_reason(device)
    return fp


# --------------------------------------------------------------------------- a test's devices
def jax_device(device: str):
    """The ``jax.Device`` of a suite name ``jax:cpu`` / ``jax:gpu`` (use with
    ``jax.default_device(...)``)."""
    import jax
    return jax.devices(device.split(":", 1)[1])[0]


def check(item_devices: list[str]) -> tuple[bool, str]:
    """(runnable, reason) for a test needing ``item_devices``."""
    for d in item_devices:
        if not available(d):
            return False, absent_reason(d)
    return True, ""


def satisfies(device: str, requirement: str) -> bool:
    """Whether a variant that ran on ``device`` meets a registry ``requires`` entry."""
    if requirement == "gpu":
        return DEVICES[device].accelerator
    return device == requirement


def sync(device: str):
    """The synchronisation of a device's queued work, for the timing method (a JAX device's
    arrays are waited on; torch's CUDA and MPS queues are drained; the CPU needs nothing)."""
    from support.machine import timing
    d = DEVICES[str(device).split(":")[0] if not str(device).startswith("jax:") else device]
    if d.framework == "jax":
        return timing.jax_sync
    return {"cpu": timing.no_sync, "cuda": timing.torch_cuda_sync,
            "mps": timing.torch_mps_sync}[d.hardware]
