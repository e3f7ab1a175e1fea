"""support.lab.distributed: a failing or hanging worker leaves no process and no port behind."""
import time

import pytest
import torch
import torch.distributed as dist

from support.lab import distributed

pytestmark = pytest.mark.timeout(120)


def _rank_one_fails(rank, world):
    if rank == 1:
        assert rank == 0, "rank 1 disagrees on purpose"
    # rank 0 waits in a collective that rank 1 never joins: only the parent can end it
    dist.barrier()
    return rank


def _sum_of_ranks(rank, world):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t


def test_a_failing_assertion_in_a_worker_leaves_no_orphans_and_frees_the_port(monkeypatch):
    ports = []
    real = distributed.free_port
    monkeypatch.setattr(distributed, "free_port", lambda: ports.append(real()) or ports[-1])
    start = time.monotonic()
    timeout = 600
    with pytest.raises(distributed.WorkerFailed, match="rank 1 disagrees on purpose"):
        distributed.run(_rank_one_fails, world_size=2, timeout=timeout)
    # raised as soon as rank 1 reported, not after the collective timeout (a generous bound:
    # start-up alone took 64 s on a loaded 2-core machine)
    assert time.monotonic() - start < timeout / 2
    assert distributed.worker_pids() == []
    assert distributed.port_is_free(ports[0])


def test_a_run_past_its_timeout_is_killed():
    # 0.5 s is shorter than a worker's start-up: the run times out while they import torch
    with pytest.raises(distributed.WorkerFailed, match="timed out"):
        distributed.run(_sum_of_ranks, world_size=2, timeout=0.5)
    assert distributed.worker_pids() == []


def test_once_per_run_computes_once_for_all_xdist_workers(monkeypatch, tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"ranks": [0, 1]}

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = distributed.once_per_run("probe", compute, tmp_path)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = distributed.once_per_run("probe", compute, tmp_path)
    assert first == second == {"ranks": [0, 1]} and len(calls) == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    distributed.once_per_run("probe", compute, tmp_path)
    assert len(calls) == 2, "outside xdist every call computes (a module fixture caches it)"
