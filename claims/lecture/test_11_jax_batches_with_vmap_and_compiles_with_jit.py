"""Lecture, "JAX batches with vmap and compiles with jit" (L:140-186).

"vmap agrees with an explicit Python loop over the same 256 examples to 2.2e-15" (protocol
§4.6: x64 on, key = PRNGKey(0) reused for W (16x8), v (16) and the 256x8 batch, b = 0, c = 0),
and "vmap ... is faster, because it becomes one batched kernel rather than 256 small ones"
(JAX-07). Then the jit table (JIT-16/17/18, protocol §4.7) and its reading (JIT-19/20/21), and
"torch.func provides grad, vmap, jvp and vjp as function transforms in the JAX style, and
torch.compile compiles a model into fused kernels." (FW-07)

Every timing figure is a ratio of minima, ``min(eager) / min(jit)`` in the table, from
:mod:`support.machine.timing` (warm-up incl. compilation outside the clock,
``block_until_ready`` inside it, sides interleaved), with its bootstrap interval. The notes'
magnitudes came from a shared laptop and "trust the ordering rather than the magnitudes", so
the entries state 0.8x / 1.2x / 2.8x and bounds the ordering and the direction; an interval
that straddles a bound or an edge leaves the claim inconclusive
(:func:`support.harness.timed.settle`). Each ratio's tolerance is its entry's (the
table's elementwise chain and loop allocate a 16 MB buffer per eager op, and their times
follow the allocator's state: ``timing:allocation`` in ``support/rules/tolerances.py``). The
table's workloads are timed in one comparison, round by round, so that a ratio of two
workloads' speed-ups (JIT-19) and the workloads taken together (JIT-01) are paired.

"Eager" in the table's loop row (JIT-18) is read as its entry says; the same un-jitted call
with its body defined once, and the ten steps as op-by-op ``jnp`` calls, are timed beside it
to test L:183's reason ("because that is exactly what fusion removes").

The ``bench`` tier (``--tier bench``) re-times the same workloads with pytest-benchmark, per
JAX device, through :func:`support.harness.timed.bench` (same trials, same method).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

from support.rules.controls import control
from support.lab import perturb
from support.lab.jaxutil import x64
from support.lab.train_torch import mlp
from support.lab.workloads import JIT_BUDGET_S, chain_input, op_chain
from support.harness import device_marks, timed
from support.machine import devices, estimates, timing


def predict_one(params, x):
    return params["v"] @ jnp.tanh(params["W"] @ x + params["b"]) + params["c"]


def _vmap_vs_loop():
    key = jax.random.PRNGKey(0)          # reused on purpose: protocol §4.6
    params = {"W": jax.random.normal(key, (16, 8)), "b": jnp.zeros(16),
              "v": jax.random.normal(key, (16,)), "c": jnp.zeros(())}
    X = jax.random.normal(key, (256, 8))
    batched = jax.vmap(predict_one, in_axes=(None, 0))(params, X)
    # rows taken through NumPy: iterating a jax.Array compiles one slice per index, which would
    # cost far more than the check itself
    looped = jnp.stack([predict_one(params, jnp.asarray(x)) for x in np.asarray(X)])
    return float(jnp.max(jnp.abs(batched - looped))), batched.dtype, batched.shape


class _ChainModel(torch.nn.Module):
    """A model with a chain of elementwise ops between its two layers (JIT-17's chain as the
    activation): what a compiler can fuse."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = torch.nn.Linear(8, 64), torch.nn.Linear(64, 1)

    def forward(self, x):
        h = self.inp(x)
        h = torch.tanh(h) * torch.exp(-h ** 2) + torch.sin(h) - torch.sqrt(torch.abs(h))
        return self.out(h)


def _compiled_kernels(model, x):
    """(eager output, compiled output, Inductor's generated kernels, the aten operators an
    eager forward dispatches): torch.compile's CPU backend writes C++ kernels named
    ``cpp_fused_<ops>_<n>``, read from the code it generated."""
    import re

    from torch._inductor.utils import run_and_get_code
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))
    torch._dynamo.reset()
    compiled, code = run_and_get_code(torch.compile(model), x)
    with Ops() as ops:
        eager = model(x)
    kernels = sorted({k for c in code for k in re.findall(r"\bcpp_fused_\w+", c)})
    return eager, compiled, kernels, ops.names


# The default run keeps the table's trials to a few seconds on a loaded 2-core runner; the
# minimum is taken over at least MIN_REPEATS interleaved rounds.
REPEATS = 20
MAX_SECONDS = 3.0
MIN_REPEATS = 8


BENCH_ROUNDS = 40          # the protocol's minimum over 40 repetitions


# The controls below make dispatch and compiled calls cost more by sleeping: a sleep is not
# work, so it costs the same on a busy machine, where the work beside it slows.
def _eager_calls_pay(mp, seconds: float, *names) -> None:
    """Each ``(owner, name)`` sleeps ``seconds`` when it is called on arrays; on tracers (a
    function being jitted calls it while it is traced, once, then never) it does not."""
    for owner, name in names:
        real = getattr(owner, name)

        def paying(*args, _real=real, **kwargs):
            if not any(isinstance(a, jax.core.Tracer)
                       for a in jax.tree_util.tree_leaves((args, kwargs))):
                time.sleep(seconds)
            return _real(*args, **kwargs)
        mp.setattr(owner, name, paying)


def _jitted_calls_pay(mp, seconds) -> None:
    """jax.jit whose functions sleep ``seconds(n)`` on every call, ``n`` the number of
    equations of the function's jaxpr."""
    real = jax.jit

    def jit(fun, *args, **kwargs):
        compiled, n = real(fun, *args, **kwargs), []

        def call(*a, **k):
            if not n:
                n.append(len(jax.make_jaxpr(fun)(*a, **k).jaxpr.eqns))
            time.sleep(seconds(n[0]))
            return compiled(*a, **k)
        return call
    mp.setattr(jax, "jit", jit)


def matmul_tanh(P):
    return jnp.sum(jnp.tanh(P @ P.T))


def elementwise_chain(x):
    return jnp.sum(jnp.tanh(x) * jnp.exp(-x ** 2) + jnp.sin(x) - jnp.sqrt(jnp.abs(x)))


def _step(i, z):
    return z - 0.01 * jnp.tanh(z)


def fori_cached_body(z):
    """lax.fori_loop with a body defined once: traced and compiled once, then cached."""
    return jnp.sum(lax.fori_loop(0, 10, _step, z))


def fori_inline_body(z):
    """The notes' function: ``lax.fori_loop`` with its body written inline, a fresh lambda on
    every call, so an un-jitted call retraces and recompiles the loop each time."""
    return jnp.sum(lax.fori_loop(0, 10, lambda i, z: z - 0.01 * jnp.tanh(z), z))


def python_loop(z):
    """The ten steps dispatched op by op, nothing compiled beyond each primitive."""
    for _ in range(10):
        z = z - 0.01 * jnp.tanh(z)
    return jnp.sum(z)


def _inputs(device=None):
    key = jax.random.PRNGKey(0)
    P = jax.random.normal(key, (512, 512))
    x = jax.random.normal(key, (2_000_000,))
    if device is not None:
        P, x = jax.device_put(P, device), jax.device_put(x, device)
    return P, x


def table_sides(device=None) -> dict[str, dict]:
    """The protocol's three workloads (float64: call inside ``x64()``) as timing sides."""
    P, x = _inputs(device)
    j_mm, j_el, j_loop = jax.jit(matmul_tanh), jax.jit(elementwise_chain), jax.jit(fori_cached_body)
    return {
        "matmul": {"eager": lambda: matmul_tanh(P), "jit": lambda: j_mm(P)},
        "elementwise": {"eager": lambda: elementwise_chain(x), "jit": lambda: j_el(x)},
        "fori_loop": {"eager": lambda: fori_inline_body(x),
                      "fori_cached": lambda: fori_cached_body(x),
                      "op_by_op": lambda: python_loop(x),
                      "jit": lambda: j_loop(x)},
    }


def _compare(sides: dict) -> timing.Comparison:
    """REPEATS interleaved rounds, cut short after MAX_SECONDS of trials but never before
    MIN_REPEATS."""
    return timing.compare(sides, repeats=REPEATS, sync=timing.jax_sync,
                          max_seconds=MAX_SECONDS, min_repeats=MIN_REPEATS)


WORKLOADS = ("matmul", "elementwise", "fori_loop")


@pytest.fixture(scope="module")
def jit_table():
    """The jit table measured once for JIT-16...19 and JIT-01's "usually" (jax:cpu, float64,
    as the protocol): every workload's sides ("matmul eager", "matmul jit", ...) in one
    comparison, interleaved round by round, so that a ratio of two workloads' speed-ups
    (JIT-19) and the three workloads taken together (JIT-01) are paired round by round and
    what drifts between rounds cancels."""
    with x64():
        assert jnp.zeros(()).dtype == jnp.float64
        return _compare({f"{w} {side}": fn for w, sides in table_sides().items()
                         for side, fn in sides.items()})


def speedup(table: timing.Comparison, workload: str, eager: str = "eager") -> estimates.Estimate:
    """A workload's eager/jit from the table."""
    return table.ratio(f"{workload} {eager}", f"{workload} jit")


def _record_workload(claim, table: timing.Comparison, workload: str) -> None:
    timed.record_times(claim, table, names=[k for k in table.sides
                                              if k.startswith(f"{workload} ")])


def _chain_speedups(sizes, n=1000, repeats=100, calls=16):
    """Every chain length's eager and jitted calls interleaved in one comparison, so that
    a ratio of two lengths' speed-ups is paired round by round and what drifts between
    rounds cancels.

    A trial is a burst of ``calls`` calls whose results are awaited together, timed per
    call. One call per trial measures mostly the wait for its result (XLA hands the result
    over from its own thread), a wait alike for every side, longer than an eager
    operation's dispatch and moving between processes: it pulls every speed-up towards 1,
    most at one operation, and leaves the gain from one to four operations undecided in
    some idle runs. Awaited together, the wait is paid once per burst and what a call
    costs is its dispatch and its work, which is what compiling collapses."""
    x = chain_input(n)
    sides = {}
    for n_ops in sizes:
        f = op_chain(n_ops)
        jf = jax.jit(f)
        sides[f"eager {n_ops}"] = lambda f=f: f(x)
        sides[f"jit {n_ops}"] = lambda jf=jf: jf(x)
    return timing.compare(sides, repeats=repeats, sync=timing.jax_sync, max_seconds=2.0,
                          calls=calls)


def vmap_sides():
    """Protocol §4.6: W 16x8, v 16, b 0, c 0, a 256x8 batch, one key reused (float64)."""
    key = jax.random.PRNGKey(0)
    params = {"W": jax.random.normal(key, (16, 8)), "v": jax.random.normal(key, (16,)),
              "b": jnp.zeros(16), "c": jnp.asarray(0.0)}
    X = jax.random.normal(key, (256, 8))
    batched = jax.vmap(predict_one, in_axes=(None, 0))
    # the rows are split once, outside the clock: the loop then times 256 per-example
    # predictor calls, the "256 small kernels" of the claim (``list(X)`` itself would compile
    # a 256-output unstack on its first call, slower than everything the test times)
    rows = [X[i] for i in range(X.shape[0])]
    return {"loop": lambda: jnp.stack([predict_one(params, x) for x in rows]),
            "vmap": lambda: batched(params, X)}


JAX_DEVICES = device_marks.params("jax:cpu", "jax:gpu")


def _record_bench(claim, cmp, side):
    timed.record_times(claim, cmp)
    for other in cmp.sides:
        if other != side:
            timed.record_estimate(claim, f"{other}/{side}", cmp.ratio(other, side))


@pytest.mark.claim("JAX-06")
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_vmap_agrees_with_a_python_loop(claim, precision):
    with x64(precision == "float64"):
        diff, dtype, shape = _vmap_vs_loop()
    claim.record('dtype', str(dtype))
    assert str(dtype) == precision
    claim.record('shape', list(shape))
    claim.check('max_abs_diff', diff, note="" if precision == "float64" else "x64 off: float32")
    assert shape == (256,) and str(dtype) == precision


@pytest.mark.claim("JAX-07")
def test_vmap_is_faster_than_a_python_loop_over_256_examples(claim):
    with x64():
        sides = vmap_sides()
        diff = float(jnp.max(jnp.abs(sides["loop"]() - sides["vmap"]())))
        cmp = timing.compare(sides, repeats=10, sync=timing.jax_sync, max_seconds=1.0)
        timed.check_ratio(claim, "loop/vmap", cmp, "loop", "vmap", budget_s=JIT_BUDGET_S)
    claim.record("max |vmap - loop|", diff, note="same numbers, so the timing compares like "
                                                 "with like (JAX-06 asserts the 2.2e-15)")
    assert diff < 1e-12
    timed.record_times(claim, cmp)


@pytest.mark.bench
@pytest.mark.claim("JAX-07")
@pytest.mark.parametrize("side", ["loop", "vmap"])
@pytest.mark.parametrize("device", JAX_DEVICES)
def test_bench_vmap_vs_loop(benchmark, claim, device, side):
    benchmark.group = "vmap vs loop"
    with x64(), jax.default_device(devices.jax_device(device)):
        cmp = timed.bench(benchmark, vmap_sides(), side, repeats=20, sync=timing.jax_sync,
                           extra_info={"claim": "JAX-07", "device": device,
                                       "fingerprint": devices.fingerprint(device)})
    _record_bench(claim, cmp, side)


def _mapped(args, in_axes) -> tuple[list, int]:
    """What a vmapped call maps over: each argument's axis (None: passed whole) and the
    number of examples, for the controls that stand in for jax.vmap."""
    axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    return list(axes), next(jnp.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)


@control("JAX-07", what="jax.vmap runs the function once per example in a Python loop and "
                        "stacks the results: 256 small kernels again")
def vmap_loops_over_the_batch(mp):
    def vmap(fun, in_axes=0, out_axes=0, **kwargs):
        def looped(*args):
            axes, n = _mapped(args, in_axes)
            return jnp.stack([fun(*(a if ax is None else a[i] for a, ax in zip(args, axes)))
                              for i in range(n)])
        return looped
    mp.setattr(jax, "vmap", vmap)


# The control above puts loop/vmap near 1/3, far under the sentence's 5; this one sits just
# under it on any machine: the batched call costs what 256 / 3 calls on one example cost,
# measured in the same call, so that loop/vmap comes out near 3 whatever the machine's own
# ratio. Not nearer the 5: the loop also stacks its 256 outputs, which it pays for, and a
# busy machine widens the ratio's interval, so a gain set closer to 5 can reach past it
VMAP_GAIN = 3.0
CALLS_TIMED = 16


@control("JAX-07", what="jax.vmap's batched call costs what 256 / 3 calls of the function "
                        "on one example cost (it times 16 such calls and spins for the rest): "
                        "one batched kernel only 3 times cheaper than the loop's 256 small "
                        "ones, loop/vmap about 3, under the 5")
def vmap_gains_three_times(mp):
    real = jax.vmap

    def vmap(fun, in_axes=0, out_axes=0, **kwargs):
        batched = real(fun, in_axes=in_axes, out_axes=out_axes, **kwargs)

        def call(*args):
            axes, n = _mapped(args, in_axes)
            t0 = time.perf_counter()
            out = jax.block_until_ready(batched(*args))
            example = jax.block_until_ready([a if ax is None else jnp.take(a, 0, axis=ax)
                                             for a, ax in zip(args, axes)])
            # a few calls in a row, awaited together, as the loop makes them
            t1 = time.perf_counter()
            jax.block_until_ready([fun(*example) for _ in range(CALLS_TIMED)])
            one = (time.perf_counter() - t1) / CALLS_TIMED
            perturb.spin(max(0.0, n / VMAP_GAIN * one - (time.perf_counter() - t0)))
            return out
        return call
    mp.setattr(jax, "vmap", vmap)


@pytest.mark.claim("JIT-16")
def test_jit_gains_nothing_on_one_matmul_plus_tanh(claim, jit_table):
    # "compiling gains nothing": jit is not faster beyond the catalogue's 1.3x
    with x64():
        timed.settle(claim, "eager/jit", lambda: speedup(jit_table, "matmul"), [jit_table],
                      budget_s=JIT_BUDGET_S)
    _record_workload(claim, jit_table, "matmul")


@control("JIT-16", "JIT-19", scope="process",
         what="every call into JAX costs 0.1 s: each jax.numpy function and lax.fori_loop "
              "called eagerly, and each call of a jitted function. Compiling then saves what "
              "the workload calls most often, so the elementwise chain (six jax.numpy calls) "
              "gains more than the loop (two), and the matmul (two) gains too")
def every_call_into_jax_pays(mp):
    _eager_calls_pay(mp, 0.1, *[(jnp, f) for f in ("tanh", "exp", "sin", "sqrt", "abs", "sum")],
                     (lax, "fori_loop"))
    _jitted_calls_pay(mp, lambda n: 0.1)


def _eager_matmul_dearer(mp, share: float) -> None:
    """A jax array's ``@`` called eagerly costs ``share`` more (its result awaited, then that
    share of its time spent); under jit a tracer's ``@`` is another method and stays as is."""
    array = type(jnp.zeros(()))
    mp.setattr(array, "__matmul__", perturb.dearer(array.__matmul__, share,
                                                   jax.block_until_ready))


@control("JIT-16", scope="process",
         what="an eager matmul costs twice what it does (jit's compiled one as before): jit's "
              "gain on the matmul + tanh goes past the 1.3x that 'gains nothing' allows, "
              "doubling rather than just crossing it because the eager/jit baseline itself "
              "moves between runs")
def eager_matmul_costs_double(mp):
    _eager_matmul_dearer(mp, 1.0)


@pytest.mark.claim("JIT-17")
def test_jit_gains_a_little_on_an_elementwise_chain(claim, jit_table):
    with x64():
        timed.settle(claim, "eager/jit", lambda: speedup(jit_table, "elementwise"),
                      [jit_table], budget_s=JIT_BUDGET_S)
    _record_workload(claim, jit_table, "elementwise")


@control("JIT-17", "JIT-18", scope="process",
         what="a jitted function costs 0.3 s more on every call: compiling makes every "
              "workload slower")
def jitted_calls_pay_a_third_of_a_second(mp):
    _jitted_calls_pay(mp, lambda n: 0.3)


# At the sentences' own threshold ("a little faster", "pays more the more ops"): jax.jit
# compiles nothing and its function costs this much more, so "jit" is eager just slower
JUST_DEARER = 0.05


@control("JIT-17", "JIT-01", "JIT-19", scope="process", expect="inconclusive",
         what="jax.jit compiles nothing: it returns the function, which costs 5 % more per call "
              "(its result awaited, then 5 % of that time spent): eager/jit just under 1 on every "
              "workload, so no workload's speed-up exceeds another's (JIT-19's ratios about 1)")
def jit_compiles_nothing_slightly_dearer(mp):
    mp.setattr(jax, "jit", lambda fun, *a, **k: perturb.dearer(fun, JUST_DEARER,
                                                              jax.block_until_ready))


# It makes L:183's reason true, the known failure's figure; eager/jit then reads how much
# slower op by op is than fused on this machine, which need not be the notes' 2.8x: its
# interval may straddle the factor-2 edge, which the control neither aims at nor moves
@control("JIT-18", scope="process", expect="holds", moves=("fori_loop compiled once/jit",),
         what="lax.fori_loop called outside jit runs its body op by op in a Python loop (each "
              "jnp call dispatched on its own, nothing compiled or fused), so the un-jitted "
              "loop's gain from jit is what fusion removes, body defined once or not")
def fori_loop_runs_op_by_op_outside_jit(mp):
    real = lax.fori_loop

    def fori_loop(lower, upper, body_fun, init_val, **kwargs):
        if any(isinstance(a, jax.core.Tracer)
               for a in jax.tree_util.tree_leaves((lower, upper, init_val))):
            return real(lower, upper, body_fun, init_val, **kwargs)    # under jit: as is
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    mp.setattr(lax, "fori_loop", fori_loop)


@pytest.mark.claim("JIT-18")
def test_jit_gains_most_on_a_ten_step_loop(claim, jit_table):
    with x64():
        # the table's row: the notes' function (inline body) against jit
        timed.settle(claim, "eager/jit", lambda: speedup(jit_table, "fori_loop"), [jit_table],
                      budget_s=JIT_BUDGET_S)
        # "that is exactly what fusion removes": with the per-call recompilation taken out
        # (the same un-jitted lax.fori_loop, its body defined once) the gain would remain.
        # Timed on its own: in the table's comparison a round also pays the recompiling and
        # the op-by-op sides, so the budget buys few rounds and a ratio near its bound stays
        # undecided in some idle runs; the two cheap sides alone get several times as many
        # rounds (the table's own calls: the same input and the jitted loop already compiled)
        once = _compare({s: jit_table.fns[f"fori_loop {s}"] for s in ("fori_cached", "jit")})
        timed.check_ratio(claim, "fori_loop compiled once/jit", once, "fori_cached", "jit",
                           budget_s=JIT_BUDGET_S)
    timed.record_estimate(claim, "op_by_op/jit", speedup(jit_table, "fori_loop", "op_by_op"))
    timed.record_estimate(claim, "eager/fori_loop compiled once",
                           jit_table.ratio("fori_loop eager", "fori_loop fori_cached"))
    _record_workload(claim, jit_table, "fori_loop")


@control("JIT-19", scope="process",
         what="an un-jitted lax.fori_loop reuses the body it compiled for the same code (an inline "
              "lambda without closure is the same body each call), as JAX 0.4 did: the notes' "
              "loop no longer recompiles, its speedup from jit falls to about 1, just under the "
              "elementwise chain's")
def fori_loop_keeps_its_compiled_body(mp):
    real, bodies = lax.fori_loop, {}

    def fori_loop(lower, upper, body_fun, init_val, **kwargs):
        code = getattr(body_fun, "__code__", None)
        if code is not None and not body_fun.__closure__:
            body_fun = bodies.setdefault(code, body_fun)
        return real(lower, upper, body_fun, init_val, **kwargs)
    mp.setattr(lax, "fori_loop", fori_loop)


@control("JIT-01", scope="process",
         what="compiling gains nothing on any of the lecture's workloads: jax.jit returns the "
              "function, 5 % dearer per call, and an un-jitted lax.fori_loop reuses the body it "
              "compiled (as JAX 0.4 did), so the three workloads together run about as fast "
              "eager as 'compiled', far under the 1.5 of 'much faster'")
def compiling_gains_nothing_on_the_lectures_workloads(mp):
    jit_compiles_nothing_slightly_dearer(mp)
    fori_loop_keeps_its_compiled_body(mp)


@pytest.mark.claim("JIT-19")
def test_jit_speedup_orders_loop_over_chain_over_matmul(claim, jit_table):
    claim.record("speedups matmul, elementwise, loop",
                 [round(speedup(jit_table, w).value, 3) for w in WORKLOADS],
                 note="the notes' table and its rerun are in the entry")
    # the ordering under the other reading of the loop's eager side (JIT-18), reported
    timed.record_estimate(claim, "loop speedup (op by op) / elementwise speedup",
                           speedup(jit_table, "fori_loop", "op_by_op")
                           / speedup(jit_table, "elementwise"))
    # the ordering is the claim: each step is a ratio of speedups that must exceed 1, the
    # two speedups of one round against each other
    with x64():
        timed.settle(claim, "loop speedup / elementwise speedup",
                      lambda: speedup(jit_table, "fori_loop") / speedup(jit_table, "elementwise"),
                      [jit_table], budget_s=JIT_BUDGET_S)
        timed.settle(claim, "elementwise speedup / matmul speedup",
                      lambda: speedup(jit_table, "elementwise") / speedup(jit_table, "matmul"),
                      [jit_table], budget_s=JIT_BUDGET_S)


@pytest.mark.claim("JIT-01")
def test_jit_makes_the_lectures_three_workloads_much_faster_together(claim, jit_table):
    """The sheet's "usually much faster" (S:6) read on the lecture's own three workloads as
    its entry says: the three run once each, eager against compiled."""
    eager = tuple(f"{w} eager" for w in WORKLOADS)
    jitted = tuple(f"{w} jit" for w in WORKLOADS)
    with x64():
        timed.settle(claim, "the lecture's three workloads together, eager/jit",
                      lambda: jit_table.ratio(eager, jitted), [jit_table], budget_s=JIT_BUDGET_S)
    claim.record("speedups matmul, elementwise, loop",
                 [round(speedup(jit_table, w).value, 3) for w in WORKLOADS])
    timed.record_estimate(claim, "median of the three speedups",
                           estimates.median_of([speedup(jit_table, w) for w in WORKLOADS]))


@pytest.mark.bench
@pytest.mark.claim("JIT-19")
@pytest.mark.parametrize("side", ["eager", "jit"])
@pytest.mark.parametrize("workload", ["matmul", "elementwise", "fori_loop"])
@pytest.mark.parametrize("device", JAX_DEVICES)
def test_bench_jit_table(benchmark, claim, device, workload, side):
    ids = {"matmul": "JIT-16", "elementwise": "JIT-17", "fori_loop": "JIT-18"}
    # grouped by workload, not device: a CPU file and a GPU file compare side by side
    benchmark.group = f"jit table {workload}"
    with x64(), jax.default_device(devices.jax_device(device)):
        sides = table_sides(devices.jax_device(device))[workload]
        if workload == "fori_loop":
            sides = {"eager": sides["eager"], "jit": sides["jit"]}
        cmp = timed.bench(benchmark, sides, side, repeats=BENCH_ROUNDS, sync=timing.jax_sync,
                           extra_info={"claim": ids[workload], "device": device,
                                       "fingerprint": devices.fingerprint(device)})
    _record_bench(claim, cmp, side)


@pytest.mark.claim("JIT-20")
def test_a_bare_matmul_gains_nothing_from_jit(claim):
    with x64():
        # two distinct matrices: P @ P.T may be compiled as a symmetric rank-k update with
        # half the flops, which would be a gain from jit that is not about dispatch or fusion
        P, _ = _inputs()
        Q = jax.random.normal(jax.random.PRNGKey(1), (512, 512))
        mm = jax.jit(lambda P, Q: P @ Q)
        cmp = _compare({"eager": lambda: P @ Q, "jit": lambda: mm(P, Q)})
        # |speedup - 1| < 0.3
        timed.check_ratio(claim, "eager/jit", cmp, "eager", "jit", budget_s=JIT_BUDGET_S)
    timed.record_times(claim, cmp)


@control("JIT-20", "JIT-01", what="a jitted function costs 20 ms more on every call, several "
                                  "times the eager matmul and a hundred times the eager chain")
def jitted_calls_pay_20_ms(mp):
    _jitted_calls_pay(mp, lambda n: 0.02)


@control("JIT-20", what="an eager matmul costs 60 % more (jit's compiled one as before): jit's gain "
                        "on the bare matmul goes just past the 1.3x of 'gains nothing'")
def eager_matmul_costs_sixty_percent_more(mp):
    _eager_matmul_dearer(mp, 0.6)


@pytest.mark.claim("JIT-21")
def test_compilation_pays_more_the_more_small_ops_it_collapses(claim):
    sizes = (1, 4, 16, 64)
    cmp = _chain_speedups(sizes)

    def sp(k):
        return cmp.ratio(f"eager {k}", f"jit {k}")

    claim.record("jit speedup at 1, 4, 16, 64 ops on 1k floats", [round(sp(k).value, 2) for k in sizes],
                 note=f"per call, over bursts of {cmp['eager 1'].calls} calls awaited together")
    timed.settle(claim, "speedup(4 ops) / speedup(1 op)", lambda: sp(4) / sp(1),
                  [cmp], budget_s=JIT_BUDGET_S)
    timed.settle(claim, "speedup(16 ops) / speedup(4 ops)", lambda: sp(16) / sp(4),
                  [cmp], budget_s=JIT_BUDGET_S)
    timed.settle(claim, "speedup(64 ops) / speedup(16 ops)", lambda: sp(64) / sp(16),
                  [cmp], budget_s=JIT_BUDGET_S)


@control("JIT-21", what="a compiled chain of n small operations costs n squared hundredths "
                        "of a millisecond (XLA re-evaluates the chain for every operation it "
                        "fuses) and an eager operation a tenth of one: beyond ten operations, the more "
                        "operations, the less compiling pays")
def fused_chains_cost_quadratically(mp):
    # a hundredth of a millisecond, not a tenth: each trial makes 16 calls, and at a tenth
    # the 64-operation chain alone would sleep seconds a trial
    array = type(jnp.zeros(()))
    _eager_calls_pay(mp, 1e-4, (array, "__mul__"), (array, "__add__"))
    _jitted_calls_pay(mp, lambda n: 1e-5 * n * n)


@control("JIT-21", "JIT-01", expect="inconclusive",
         what="jax.jit compiles nothing: it returns the function, each call 5 % dearer than its "
              "dispatch, so every chain's speedup is just under 1 and no chain gains more than "
              "another (JIT-01: nothing near 1.5x)")
def jit_dispatches_op_by_op(mp):
    # no wait for the result inside the call: these trials are bursts of calls awaited
    # together, and a wait per call would add a fixed cost that favours the longer chains
    mp.setattr(jax, "jit", lambda fun, *a, **k: perturb.dearer(fun, JUST_DEARER))


@pytest.mark.claim("FW-07")
def test_torch_func_transforms_exist_and_match_autograd(claim):
    from torch import func
    names = ["grad", "vmap", "jvp", "vjp"]
    present = {n: hasattr(func, n) for n in names}
    present["torch.compile"] = hasattr(torch, "compile")
    claim.record("present", present)
    f = lambda x: (torch.sin(x) * x).sum()
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    f(xg).backward()
    diff = (func.grad(f)(x) - xg.grad).abs().max().item()
    claim.check('func_grad_vs_backward', diff)
    per_row = func.vmap(func.grad(f))(x.reshape(5, 1))
    assert all(present.values())
    assert torch.allclose(per_row.reshape(-1), torch.sin(x) + x * torch.cos(x))


@pytest.mark.slow
@pytest.mark.claim("FW-07")
def test_torch_compile_compiles_a_model_into_fused_kernels(claim):
    """"torch.compile compiles a model into fused kernels": on a CPU its backend (Inductor)
    generates C++ and builds it with the system's compiler."""
    import shutil
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        pytest.skip("torch.compile's CPU backend (Inductor) builds C++: no C++ compiler on PATH")
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    with torch.no_grad():
        eager, compiled, kernels, ops = _compiled_kernels(_ChainModel(), x)
        # the other reading: the notes' own MLP, whose only elementwise ops are its two
        # ReLUs, each between two matrix products (which go to a BLAS call, not a kernel)
        _, _, mlp_kernels, _ = _compiled_kernels(mlp(), x)
    elementwise = [o for o in ops if o not in ("aten.addmm", "aten.mm", "aten.t", "aten.view")]
    claim.record("generated kernels", kernels)
    claim.record("eager elementwise operators", elementwise)
    assert kernels, "torch.compile generated no kernel"
    claim.check("eager ops per generated kernel", len(elementwise) / len(kernels),
                note="the model's elementwise operators, dispatched one by one eagerly, over "
                     "the kernels Inductor generated for them")
    claim.record("generated kernels, the notes' 8-64-64-1 MLP", mlp_kernels)
    torch.testing.assert_close(compiled, eager)


@control("FW-07", what="torch.func.grad differentiates in float32, so its gradient is no "
                       "longer the one autograd's backward() computes in float64")
def func_grad_in_float32(mp):
    from torch import func
    real = func.grad

    def grad(f, *args, **kwargs):
        g = real(f, *args, **kwargs)
        return lambda x, *rest, **kw: g(x.float(), *rest, **kw).to(x.dtype)
    mp.setattr(func, "grad", grad)


@control("FW-07", what="torch.compile only traces the model and runs its operators one by "
                       "one (the aot_eager backend): it generates no kernel, fuses nothing")
def compile_runs_op_by_op(mp):
    real = torch.compile

    def compile(model=None, **kwargs):
        return real(model, **{**kwargs, "backend": "aot_eager"})
    mp.setattr(torch, "compile", compile)
