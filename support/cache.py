"""An on-disk cache for expensive shared results, keyed by everything that could change them.

The key hashes the inputs a caller passes (the data's content fingerprint, the protocol's
parameters), the environment (Python, torch, numpy, scikit-learn, jax, jaxlib and optax
versions, torch's build configuration and CPU capability, the machine), and the source of
the code that computes the result: the computing module and every ``support`` module it
imports, found by reading their imports (nothing listed by hand), plus the files those
modules declare they read (a module-level ``READS = [...]``). A changed line of
``support/jaxutil.py`` or a new torch is a different key, never a stale hit.

``--fresh`` (the ``fresh`` fixture) means "recompute in this run": a stored entry is then
used only if this same test run wrote it, which lets the workers of one pytest-xdist run
(``PYTEST_XDIST_TESTRUNUID``) share one computation. Writers hold a file lock, so a second
worker waits for the first instead of computing twice; entries are written atomically.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import platform
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .data import cache_dir
from .environment import version
from .locks import file_lock

HERE = Path(__file__).resolve().parent
PACKAGES = ("torch", "numpy", "scikit-learn", "jax", "jaxlib", "optax", "threadpoolctl")


def environment() -> dict:
    """What besides the inputs decides the numbers: versions, build, machine."""
    env = {"python": sys.version, "machine": platform.machine(), "system": platform.system()}
    env.update({pkg: version(pkg) for pkg in PACKAGES})
    try:
        import torch
        env["torch_config"] = hashlib.sha256(torch.__config__.show().encode()).hexdigest()
        env["torch_cpu"] = torch.backends.cpu.get_cpu_capability()
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    return env


def _imports_and_reads(tree: ast.AST) -> tuple[set[str], list[str]]:
    mods, reads = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            mods |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("support."):
            mods.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "support":
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            mods |= {a.name.split(".")[1] for a in node.names if a.name.startswith("support.")}
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "READS"
                                                  for t in node.targets):
            reads += list(ast.literal_eval(node.value))
    return mods, reads


def code_files(module: str) -> list[str]:
    """The files under ``support/`` whose content can change what ``module`` computes: the
    module, every ``support`` module it imports (transitively, lazy imports included: read
    from the source, not from what ran) and the files they declare in ``READS``."""
    todo, seen, files = [module.rsplit(".", 1)[-1]], set(), set()
    while todo:
        name = todo.pop()
        path = HERE / f"{name}.py"
        if name in seen or not path.exists():
            continue
        seen.add(name)
        files.add(f"{name}.py")
        mods, reads = _imports_and_reads(ast.parse(path.read_text(encoding="utf-8")))
        files |= set(reads)
        todo += sorted(mods - seen)
    return sorted(files)


def sources(names) -> dict:
    """sha256 of each named file under ``support/``."""
    return {n: hashlib.sha256((HERE / n).read_bytes()).hexdigest() for n in names}


def key(name: str, inputs: dict, module: str) -> str:
    blob = json.dumps({"name": name, "inputs": inputs, "env": environment(),
                       "code": sources(code_files(module))}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path):
        yield


def cached(name: str, inputs: dict, module: str, compute, *, fresh: bool = False,
           folder: Path | None = None):
    """``compute()``'s value, from the disk when an entry for the same key may be used.
    ``module`` is the one that computes it (``"support.experiments"``): its code and what it
    imports are part of the key."""
    folder = Path(folder) if folder else cache_dir() / "results"
    k = key(name, inputs, module)
    path = folder / f"{name}-{k}.pkl"
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    with _locked(folder / f"{name}-{k}.lock"):
        if path.exists():
            try:
                with open(path, "rb") as fh:
                    meta, value = pickle.load(fh)
                if not fresh or (run is not None and meta.get("run") == run):
                    return value
            except Exception:  # noqa: BLE001 - a damaged entry is recomputed
                pass
        value = compute()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(({"run": run, "key": k}, value), fh)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return value
