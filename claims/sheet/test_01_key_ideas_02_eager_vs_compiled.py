"""Summary sheet, "Key ideas", "Eager vs compiled" (S:6).

"PyTorch executes each operation as Python reaches it and records the autograd graph on the
fly, rebuilding it from scratch every iteration, so ordinary Python control flow (and printing
any intermediate tensor) just works" (TAPE-01; the lecture's define-by-run, L:81: "a different
input can produce a different graph"). "Compiling, e.g. with jax.jit, hands the whole function
to a compiler (XLA) that fuses operations and skips the per-operation Python dispatch, which is
usually much faster" (JIT-01).

JIT-01 is read in two halves (its entry): the per-operation dispatch that compiling skips,
timed here on a chain of small elementwise ops, and "usually much faster" on the lecture's own
three workloads, timed with the lecture's jit table
(``claims/lecture/test_11_jax_batches_with_vmap_and_compiles_with_jit.py``). Each figure is a
ratio from :mod:`support.machine.timing` (warm-up incl. compilation outside the clock,
``block_until_ready`` inside it, sides interleaved) with its interval; one that straddles its
bound leaves the claim inconclusive.
"""
from __future__ import annotations

import jax
import pytest
import torch

from support.rules.controls import control
from support.lab.workloads import JIT_BUDGET_S, chain_input, op_chain
from support.harness import timed
from support.machine import timing


@pytest.mark.claim("JIT-01")
def test_jit_is_much_faster_on_a_chain_of_small_elementwise_ops(claim):
    x = chain_input()
    f = op_chain(8)
    jf = jax.jit(f)
    # microsecond trials: a couple of hundred of them cost milliseconds and give the minimum
    # a chance to escape a loaded runner
    cmp = timing.compare({"eager": lambda: f(x), "jit": lambda: jf(x)}, repeats=200,
                         sync=timing.jax_sync, max_seconds=0.5)
    timed.check_ratio(claim, "eager/jit", cmp, "eager", "jit", budget_s=JIT_BUDGET_S)
    timed.record_times(claim, cmp)


@pytest.mark.claim("TAPE-01")
def test_the_graph_is_whatever_python_ran_this_call(claim, capsys):
    def f(x):
        h = x * 2
        print("intermediate", h)              # printing inside the forward pass just works
        return h.exp() if h.sum() < 0 else h * 3
    names = {}
    for sign in (1.0, -1.0):
        x = torch.tensor([sign], requires_grad=True)
        names[sign] = type(f(x).grad_fn).__name__
    printed = capsys.readouterr().out.count("intermediate")
    claim.check('node_for_positive_input', names[1.0])
    claim.check('node_for_negative_input', names[-1.0])
    claim.check('prints', printed)
    assert names[1.0] != names[-1.0]           # different inputs, different graphs


@control("TAPE-01", what="the graph is traced once and replayed: a comparison on a recorded "
                         "tensor gives the first call's answer to every later input, so both "
                         "inputs take the same branch and get the same graph")
def branch_traced_once(mp):
    real = torch.Tensor.__lt__
    first = []

    def replayed(self, other):
        out = real(self, other)
        if self.grad_fn is None:
            return out
        if not first:
            first.append(out)
        return first[0]
    mp.setattr(torch.Tensor, "__lt__", replayed)
