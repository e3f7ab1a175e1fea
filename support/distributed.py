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
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback

LOCALHOST = "127.0.0.1"


class WorkerFailed(RuntimeError):
    """A worker raised, died or did not finish in time; the message says which and why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOCALHOST, port))
        except OSError:
            return False
        return True


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
