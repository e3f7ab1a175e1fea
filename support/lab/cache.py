"""An on-disk cache for expensive shared results, keyed by everything that could change them.

The key hashes the inputs a caller passes (the data's content fingerprint, the protocol's
parameters), the environment (Python, torch, numpy, scikit-learn, jax, jaxlib and optax
versions, torch's build configuration and CPU capability, the machine), and the source of
the code that computes the result: the computing module and every ``support`` module it
imports, found by reading their imports (nothing listed by hand), plus the files those
modules declare they read (a module-level ``READS = [...]``). A changed line of
``support/lab/jaxutil.py`` or a new torch is a different key, never a stale hit.

``--fresh`` (the ``fresh`` fixture) means "recompute in this run": a stored entry is then
used only if this same test run wrote it, which lets the workers of one pytest-xdist run
(``PYTEST_XDIST_TESTRUNUID``) share one computation. Writers hold a file lock, so a second
worker waits for the first instead of computing twice; entries are written atomically.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import pickle
import platform
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from support.lab.data import cache_dir
from support.machine.environment import version
from support.machine.locks import file_lock
from support.paths import SUPPORT

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


def module_file(name: str) -> Path | None:
    """The source file of the ``support`` module ``name`` (dotted), or None."""
    parts = name.split(".")
    if parts[0] != "support":
        return None
    base = SUPPORT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports_and_reads(tree: ast.AST, name: str, is_package: bool) -> tuple[set[str], list[str]]:
    """The dotted names of the ``support`` modules the source of module ``name`` imports
    (anywhere in it, lazy imports included; ``from support.lab import data`` names
    ``support.lab.data``) and the files it declares in ``READS``."""
    package = name if is_package else name.rpartition(".")[0]
    mods, reads = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level else node.module or "")
            if base.split(".")[0] != "support":
                continue
            mods.add(base)
            # a name imported from a package may be a module of it
            mods |= {f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}")}
        elif isinstance(node, ast.Import):
            mods |= {a.name for a in node.names if a.name.split(".")[0] == "support"}
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "READS"
                                                  for t in node.targets):
            reads += list(ast.literal_eval(node.value))
    # importing a.b.c runs the packages a and a.b first
    for m in list(mods):
        parts = m.split(".")
        mods |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return mods, reads


def code_files(module: str) -> list[str]:
    """The files under ``support/`` (paths relative to it) whose content can change what
    ``module`` (dotted: ``support.lab.experiments``) computes: the module, every ``support``
    module it imports, transitively through every wing (lazy imports included: read from the
    source, not from what ran), the packages on the way, and the files they declare in
    ``READS``. A name that is no module of the suite is an error, never an empty key."""
    if module_file(module) is None:
        raise ValueError(f"{module!r} is not a module of the suite (support.<wing>.<module>)")
    todo, seen, files = [module], set(), set()
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        files.add(path.relative_to(SUPPORT).as_posix())
        mods, reads = _imports_and_reads(ast.parse(path.read_text(encoding="utf-8")), name,
                                         path.name == "__init__.py")
        files |= set(reads)
        todo += sorted(mods - seen)
    return sorted(files)


def sources(names) -> dict:
    """sha256 of each named file under ``support/``."""
    return {n: hashlib.sha256((SUPPORT / n).read_bytes()).hexdigest() for n in names}


def key(name: str, inputs: dict, module: str) -> str:
    blob = json.dumps({"name": name, "inputs": inputs, "env": environment(),
                       "code": sources(code_files(module))}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


# the in-memory stores of shared results (stories, experiments): emptied while a result may
# be perturbed (isolated()), so that a perturbed result is never kept nor an unperturbed one
# served to a perturbed computation
_STORES: list[dict] = []
_isolated = 0
# where this process keeps shared results instead of the user's cache (keep_results_in)
_results_folder: Path | None = None


def memo_store() -> dict:
    """A dict for a module's in-process memo of shared results (see :func:`isolated`)."""
    store: dict = {}
    _STORES.append(store)
    return store


@contextmanager
def isolated():
    """For the length of the block, shared results are computed afresh and kept nowhere: the
    disk cache is neither read nor written and every memo store starts empty (and gets its
    entries back after). A negative control that perturbs a library call runs its test in
    this (support/harness/control_options.py), so that nothing perturbed leaks into another test."""
    global _isolated
    saved = [dict(s) for s in _STORES]
    for s in _STORES:
        s.clear()
    _isolated += 1
    try:
        yield
    finally:
        _isolated -= 1
        for s, old in zip(_STORES, saved):
            s.clear()
            s.update(old)


def keep_results_in(folder: Path) -> None:
    """From now on this process keeps its shared results in ``folder``, not the user's cache:
    a session under a process-scope control computes perturbed results, which must never be
    what a later run without the control reads."""
    global _results_folder
    _results_folder = Path(folder)


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path):
        yield


def cached(name: str, inputs: dict, module: str, compute, *, fresh: bool = False,
           folder: Path | None = None):
    """``compute()``'s value, from the disk when an entry for the same key may be used.
    ``module`` is the one that computes it (``"support.lab.experiments"``): its code and what it
    imports are part of the key."""
    if _isolated:
        return compute()
    folder = Path(folder) if folder else (_results_folder or cache_dir() / "results")
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
