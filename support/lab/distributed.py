"""Run one function on several local processes joined by ``torch.distributed``.

The data-parallel claims (sheet, "Data-parallel training") are checked on real process groups:
``run(fn, world_size=2)`` spawns ``world_size`` fresh interpreters, joins them in a gloo group
on 127.0.0.1 at a free port, calls ``fn(rank, world_size, *args)`` in each and returns the
ranks' results in rank order. Results travel back pickled; tensors are turned into numpy
arrays first, so nothing depends on shared memory outliving a worker.

Teardown is the point of this module. Whatever happens (a worker's failing assertion, a
worker that dies, a hang past ``timeout``, the parent interrupted by pytest-timeout) every
worker is terminated, then killed, then reaped before ``run`` returns or raises: no orphan
processes and no port left bound. A failure in a worker is raised in the parent as
:class:`WorkerFailed` carrying the worker's traceback, as soon as it is reported, without
waiting for the other ranks (which may be blocked in a collective that will never complete).

:func:`once_per_run` shares one such result among pytest-xdist workers, so that a process
group is started once per test run however the tests that read it are distributed.
"""
from __future__ import annotations

import datetime
import gc
import multiprocessing as mp
import os
import pickle
import queue
import socket
import sys
import time
import traceback
from pathlib import Path

from support.machine.locks import file_lock

LOCALHOST = "127.0.0.1"


class WorkerFailed(RuntimeError):
    """A worker raised, died or did not finish in time; the message says which and why."""


def unsupported_reason() -> str | None:
    """Why :func:`run` cannot start a process group on this platform, or None when it can."""
    if sys.platform == "win32":
        return ("Windows: these checks start a gloo process group over TCP in spawned workers "
                "(support.lab.distributed), which the suite runs on Linux and macOS only")
    import torch.distributed as dist
    if not dist.is_available():
        return "this torch is built without torch.distributed"
    if not dist.is_gloo_available():
        return "this torch has no gloo backend"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port``: a new store could bind it (as TCPStore does, with
    SO_REUSEADDR, so connections of a finished group lingering in TIME_WAIT don't count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOCALHOST, port))
        except OSError:
            return False
        return True


def worker_pids() -> list[int]:
    """Live child processes of this process that run a spawned worker (Linux ``/proc``).

    The multiprocessing resource tracker, shared by every run and not a worker, is left out.
    """
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == me and state != "Z" and b"spawn_main" in cmd \
                and b"resource_tracker" not in cmd:
            found.append(int(entry))
    return found


def _plain(obj):
    """Tensors -> numpy arrays, recursively (what crosses the process boundary)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    return obj


def _entry(fn, rank: int, world_size: int, port: int, backend: str, timeout: float,
           args: tuple, results) -> None:
    import torch
    import torch.distributed as dist
    # one intra-op thread per worker: the ranks share the machine's cores
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = LOCALHOST, str(port)
    try:
        dist.init_process_group(backend, init_method=f"tcp://{LOCALHOST}:{port}", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        results.put((rank, "ok", _plain(fn(rank, world_size, *args))))
    except BaseException:  # noqa: BLE001 - reported to the parent, which decides
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        # the process ends here: its last collection would walk everything torch built
        gc.freeze()


def _stop(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


def run(fn, world_size: int = 2, args: tuple = (), timeout: float = 60.0,
        backend: str = "gloo") -> list:
    """``[fn(0, world_size, *args), ..., fn(world_size - 1, ...)]`` computed by a process group.

    ``fn`` must be importable by name (a module-level function). ``timeout`` (seconds) bounds
    the whole run, start-up included, and is also the process group's collective timeout.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, name=f"{getattr(fn, '__name__', 'fn')}-rank{r}",
                         args=(fn, r, world_size, port, backend, timeout, args, results),
                         daemon=True)
             for r in range(world_size)]
    out: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.start()
        while len(out) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailed(f"timed out after {timeout:g} s with ranks "
                                   f"{sorted(set(range(world_size)) - set(out))} unfinished")
            try:
                rank, status, value = results.get(timeout=min(left, 0.5))
            except queue.Empty:
                dead = [p for r, p in enumerate(procs) if r not in out and not p.is_alive()]
                if dead:
                    # a worker may have put its result just before exiting
                    try:
                        rank, status, value = results.get(timeout=1.0)
                    except queue.Empty:
                        raise WorkerFailed(", ".join(f"{p.name} exited with code {p.exitcode}"
                                                     " without a result" for p in dead)) from None
                else:
                    continue
            if status == "error":
                raise WorkerFailed(f"rank {rank} of {world_size} failed:\n{value}")
            out[rank] = value
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
    finally:
        _stop(procs)
        results.close()
        results.join_thread()
    return [out[r] for r in range(world_size)]


def once_per_run(name: str, compute, shared_dir: os.PathLike):
    """``compute()`` once per pytest run, shared by the run's xdist workers.

    Outside xdist this is just ``compute()`` (callers cache it in a module fixture). Under
    xdist the first worker to ask computes while holding a file lock and leaves the pickled
    result in ``shared_dir`` (``tmp_path_factory.getbasetemp().parent``, the run's temporary
    folder that every worker shares and pytest prunes); the others wait on the lock and read
    it. A failed computation leaves nothing behind, so the next worker retries.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return compute()
    base = Path(shared_dir) / f"once-{name}"
    result_path = base.with_suffix(".pkl")
    with file_lock(base.with_suffix(".lock")) as locked:
        if not locked:  # no file lock on this platform: each worker computes its own
            return compute()
        if result_path.exists():
            return pickle.loads(result_path.read_bytes())
        result = compute()
        tmp = base.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(result))
        tmp.replace(result_path)
        return result
