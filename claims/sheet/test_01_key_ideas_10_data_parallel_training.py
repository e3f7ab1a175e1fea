"""Summary sheet, "Key ideas", "Data-parallel training" (S:18).

"Data-parallel training (DDP), usually one process per GPU: the replicas start identical (state
broadcast from rank 0); gradients are grouped into buckets whose all-reduce starts as soon as
they are ready, overlapping with the rest of the backward pass; when backward() returns, every
process holds the same averaged gradient and takes the same optimizer step on its own replica.
The effective batch is the per-GPU batch times the number of GPUs." DDP-02 to DDP-06 follow its
clauses in order; "usually one process per GPU" (DDP-01) is not testable.

Checked for real: two processes on this CPU in a gloo process group (support.lab.distributed),
the same code NCCL would run on two GPUs. One group runs every check once (start-up costs more
than the checks); each test then asserts its sentence on what the ranks sent back.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from support.rules import controls
from support.rules.controls import control
from support.lab import distributed
from support.lab.nested import nested_model
from support.lab.train_torch import mlp
from support.rules.tolerances import closeness

WORLD = 2


PER_RANK = 32


TIMEOUT_S = 150


# the ranks are fresh interpreters: a control of these claims reaches them through their
# environment, and each rank applies it again before it builds anything
RANK_CONTROL = "LECTURE11_RANK_CONTROL"


def _in_the_ranks(mp, name: str) -> None:
    mp.setenv(RANK_CONTROL, name)


def _batch(seed: int, rows: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 8, generator=g, dtype=torch.float64),
            torch.randn(rows, 1, generator=g, dtype=torch.float64))


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _small_model():
    # float64 so that "equal to the single-process gradient" is tested at 1e-12, not 1e-5
    return mlp(d_in=8, hidden=16).double()


def _bucketed_backward_log(rank, world, bucket_cap_mb, width):
    """Order of gradient-ready and all-reduce events in the second backward of a DDP model."""
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
    names = {id(p): n for n, p in model.named_parameters()}
    log: list[tuple] = []
    for n, p in model.named_parameters():
        # a tensor hook on a leaf runs the moment autograd has computed that gradient
        p.register_hook(lambda g, n=n: log.append(("grad", n)))
    # None: DDP's default bucket size (torch 2.2 does not accept an explicit None)
    ddp = DDP(model) if bucket_cap_mb is None else DDP(model, bucket_cap_mb=bucket_cap_mb)

    def logging_allreduce(state, bucket):
        log.append(("allreduce", bucket.index(), tuple(names[id(p)] for p in bucket.parameters())))
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))

    ddp.register_comm_hook(state=None, hook=logging_allreduce)
    x = torch.randn(16, width)
    for _ in range(2):  # DDP rebuilds its buckets after the first iteration: log the second
        log.clear()
        ddp.zero_grad()
        ddp(x).pow(2).mean().backward()
    return log


def data_parallel_checks(rank: int, world: int) -> dict:
    """Everything the DDP claims need, computed on one rank of a live process group."""
    if os.environ.get(RANK_CONTROL):
        controls.CONTROLS[os.environ[RANK_CONTROL]].apply(pytest.MonkeyPatch())
    out = {}
    torch.manual_seed(1000 + rank)              # replicas built with different seeds
    model = _small_model()
    out["before_wrap"] = _state(model)
    ddp = DDP(model)
    out["after_wrap"] = _state(model)

    X, y = _batch(0, world * PER_RANK)           # the union; each rank takes its slice
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    F.mse_loss(ddp(X[mine]), y[mine]).backward()
    out["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    out["after_sgd_step"] = _state(model)

    # three Adam steps on different data per rank, with DDP and (control) without
    start = _state(model)
    plain = _small_model()
    plain.load_state_dict(start)
    for net, wrapped in ((ddp, True), (plain, False)):
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        for step in range(3):
            Xs, ys = _batch(10 + step, world * PER_RANK)
            opt.zero_grad()
            F.mse_loss(net(Xs[mine]), ys[mine]).backward()
            opt.step()
        out["after_adam" if wrapped else "after_adam_without_ddp"] = _state(
            net.module if wrapped else net)

    # 'the model' as recipes build it: the realistic nested model, whose batch norms' running
    # statistics and stage's gain are buffers, made to differ by rank (a forward in train
    # mode on each rank's own rows) before DDP wraps it
    torch.manual_seed(1000 + rank)
    nested = nested_model(dtype=torch.float64)
    nested(_batch(100 + rank, 32)[0])
    out["nested_before_wrap"] = _state(nested)
    DDP(nested)
    out["nested_after_wrap"] = _state(nested)

    # small buckets on 4 MB of parameters (DDP's first bucket holds up to 1 MB whatever
    # bucket_cap_mb says on some releases: torch 2.2 put a whole 67 kB model in it); one
    # bucket, the control, on 67 kB under the default cap
    out["log_small_buckets"] = _bucketed_backward_log(rank, world, bucket_cap_mb=0.01,
                                                      width=512)
    out["log_one_bucket"] = _bucketed_backward_log(rank, world, bucket_cap_mb=None, width=64)
    return out


def _start_group():
    start = time.perf_counter()
    results = distributed.run(data_parallel_checks, world_size=WORLD, timeout=TIMEOUT_S)
    return results, time.perf_counter() - start


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    if distributed.unsupported_reason():
        return None     # no process group here: _process_groups_run_here says why
    # one process group per test run, also when xdist spreads these tests over workers
    return distributed.once_per_run("data-parallel", _start_group,
                                    tmp_path_factory.getbasetemp().parent)


@pytest.fixture(autouse=True)
def _process_groups_run_here(claim):
    reason = distributed.unsupported_reason()
    if reason:  # Windows
        claim.not_applicable(reason)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _max_diff(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def _single_process(start: dict, rows: slice | None = None):
    """The gradient of the mean loss, and the SGD step, on one process without DDP."""
    model = _small_model()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in start.items()})
    X, y = _batch(0, WORLD * PER_RANK)
    if rows is not None:
        X, y = X[rows], y[rows]
    F.mse_loss(model(X), y).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    return grads, {k: v.numpy().copy() for k, v in model.state_dict().items()}


pytestmark = pytest.mark.timeout(TIMEOUT_S + 30)


@pytest.mark.claim("DDP-02")
def test_replicas_start_identical_with_rank_0s_weights(claim, ranks):
    results, wall = ranks
    claim.record("ddp_group_wall_s", round(wall, 2), unit="s",
                 note="one 2-process gloo group running every DDP check (spawn to teardown)")
    differed = not _same(results[0]["before_wrap"], results[1]["before_wrap"])
    claim.record('replicas_differ_before_wrapping', differed)
    adopted = [_same(r["after_wrap"], results[0]["before_wrap"]) for r in results]
    claim.record('ranks_holding_rank0_weights_after_wrapping', sum(adopted))
    assert differed, "control: different seeds must build different replicas"
    assert all(adopted)
    # the nested model's whole state, its buffers with its parameters
    before = [r["nested_before_wrap"] for r in results]
    buffers = [k for k in before[0] if "running" in k or k.endswith("gain")]
    claim.record("nested model: buffers that differed by rank before wrapping",
                 [k for k in buffers if not np.array_equal(before[0][k], before[1][k])])
    kept = [k for k in before[0] if not all(
        np.array_equal(r["nested_after_wrap"][k], before[0][k]) for r in results)]
    claim.record("nested model: state entries not rank 0's after wrapping", kept)
    assert not _same(before[0], before[1]), "control: the nested replicas must differ"
    assert not kept, f"DDP left {kept} as each rank had them"


@control("DDP-02", scope="process", what="DDP does not broadcast rank 0's state when it wraps "
                                         "the model: each replica keeps its own weights")
def ddp_skips_the_broadcast(mp):
    _in_the_ranks(mp, "ddp-skips-the-broadcast")
    mp.setattr(torch.nn.parallel.distributed, "_sync_module_states", lambda **kwargs: None)


@control("DDP-02", scope="process", what="DDP broadcasts rank 0's parameters when it wraps the "
                                         "model, not its buffers: batch norm's running "
                                         "statistics stay as each rank had them")
def ddp_broadcasts_parameters_only(mp):
    # 'the state', for a model with buffers: the flat model has none and cannot show it
    _in_the_ranks(mp, "ddp-broadcasts-parameters-only")
    from torch.nn.parallel import distributed as ddp_module
    real = ddp_module._sync_module_states
    mp.setattr(ddp_module, "_sync_module_states",
               lambda **kwargs: real(**{**kwargs, "broadcast_buffers": False}))


@pytest.mark.claim("DDP-03")
def test_bucket_all_reduces_start_while_backward_is_still_running(claim, ranks):
    results, _ = ranks
    log = results[0]["log_small_buckets"]
    kinds = [e[0] for e in log]
    first_reduce = kinds.index("allreduce") if "allreduce" in kinds else len(kinds)
    last_grad = len(kinds) - 1 - kinds[::-1].index("grad")
    grads_after = kinds[first_reduce:].count("grad")
    claim.record("allreduce_calls_per_backward", kinds.count("allreduce"))
    claim.record("gradients_computed_after_first_allreduce", grads_after,
                 note=f"of {kinds.count('grad')} parameter gradients")
    claim.record("event_order", ["R" if k == "allreduce" else "g" for k in kinds])
    one = [e[0] for e in results[0]["log_one_bucket"]]
    claim.record("allreduce_calls_with_one_bucket", one.count("allreduce"))
    assert results[0]["log_small_buckets"] == results[1]["log_small_buckets"]
    assert kinds.count("allreduce") >= 2
    # the first bucket is reduced before autograd has produced the last gradient
    assert first_reduce < last_grad and grads_after > 0
    # control: with one bucket the only all-reduce waits for every gradient
    assert one.count("allreduce") == 1 and one.index("allreduce") > max(
        i for i, k in enumerate(one) if k == "grad")


@control("DDP-03", scope="process", what="DDP puts every gradient in one bucket, whose "
                                         "all-reduce waits for the whole backward pass")
def ddp_uses_one_bucket(mp):
    _in_the_ranks(mp, "ddp-uses-one-bucket")
    real = DDP.__init__

    def init(self, module, *args, bucket_cap_mb=None, **kwargs):
        real(self, module, *args, bucket_cap_mb=10**6, **kwargs)
    mp.setattr(DDP, "__init__", init)


@pytest.mark.claim("DDP-04")
def test_after_backward_every_rank_holds_the_same_averaged_gradient(claim, ranks):
    results, _ = ranks
    g0, g1 = results[0]["grads"], results[1]["grads"]
    bitwise = _same(g0, g1)
    claim.record('grads_bitwise_equal_across_ranks', bitwise)
    start = results[0]["after_wrap"]
    local = [_single_process(start, slice(r * PER_RANK, (r + 1) * PER_RANK))[0]
             for r in range(WORLD)]
    average = {k: (local[0][k] + local[1][k]) / 2 for k in local[0]}
    diff = _max_diff(g0, average)
    claim.check('max_abs_diff_to_mean_of_local_grads', diff)
    assert not _same(local[0], local[1]), "control: the ranks' own gradients differ"
    assert bitwise
    np.testing.assert_allclose(np.concatenate([g0[k].ravel() for k in g0]),
                               np.concatenate([average[k].ravel() for k in g0]),
                               **closeness("float64:gradient"))


@control("DDP-04", "DDP-05", "DDP-06", scope="process",
         what="DDP never all-reduces the gradients: each rank keeps the gradient of its own "
              "32 rows and steps with it")
def ddp_never_averages_gradients(mp):
    _in_the_ranks(mp, "ddp-never-averages-gradients")
    real = DDP.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        self.require_backward_grad_sync = False      # what DDP.no_sync() switches off
    mp.setattr(DDP, "__init__", init)


@pytest.mark.claim("DDP-05")
def test_the_same_step_on_each_replica_keeps_them_identical(claim, ranks):
    results, _ = ranks
    same_sgd = _same(results[0]["after_sgd_step"], results[1]["after_sgd_step"])
    same_adam = _same(results[0]["after_adam"], results[1]["after_adam"])
    drift = _max_diff(results[0]["after_adam_without_ddp"], results[1]["after_adam_without_ddp"])
    claim.record('identical_after_sgd_step', same_sgd)
    claim.record('identical_after_3_adam_steps', same_adam)
    claim.record("max_weight_gap_without_ddp", drift,
                 note="control: same start, own data, no gradient averaging")
    assert same_sgd and same_adam
    assert drift > 1e-4


@pytest.mark.claim("DDP-06")
def test_two_ranks_of_32_equal_one_process_with_a_batch_of_64(claim, ranks):
    results, _ = ranks
    grads, stepped = _single_process(results[0]["after_wrap"])
    gdiff = _max_diff(results[0]["grads"], grads)
    wdiff = _max_diff(results[0]["after_sgd_step"], stepped)
    claim.check('effective_batch', WORLD * PER_RANK)
    claim.check('max_grad_diff_vs_batch_64', gdiff)
    claim.check('max_weight_diff_after_step_vs_batch_64', wdiff)
    # control: one rank's 32 rows alone is a different gradient
    half, _ = _single_process(results[0]["after_wrap"], slice(0, PER_RANK))
    claim.check("one rank's 32 rows alone vs batch 64", _max_diff(half, grads))
    for k in grads:
        np.testing.assert_allclose(results[0]["grads"][k], grads[k], **closeness("float64:gradient"))
        np.testing.assert_allclose(results[0]["after_sgd_step"][k], stepped[k],
                                   **closeness("float64:gradient"))
