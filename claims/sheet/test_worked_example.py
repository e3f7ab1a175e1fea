"""Sheet, "Formulas", "Worked example" and "In code": gradient accumulation over k micro-batches.

w = 2, x = (1, 3, 2, 4), loss = mean((w x_i)^2), whose gradient is 2 w mean(x_i^2): 30 for the
full batch, 20 + 40 = 60 for two micro-batches without dividing, 10 + 20 = 30 with the
division by k = 2; then a manual SGD step under no_grad and a detached term.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from support.harness.controls import control
from support.lab import toy
from support.spec import error_models

X = (1.0, 3.0, 2.0, 4.0)


def micro_batch_grads(x, w0: float, k: int, divide: bool) -> list[float]:
    """.grad after each of k equal micro-batches (backward on each micro-batch mean loss)."""
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    seen = []
    for chunk in torch.tensor(x, dtype=torch.float64).chunk(k):
        loss = ((w * chunk) ** 2).mean()
        (loss / k if divide else loss).backward()
        seen.append(w.grad.item())
    return seen


def full_batch_grad(x, w0: float) -> float:
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    ((w * torch.tensor(x, dtype=torch.float64)) ** 2).mean().backward()
    return w.grad.item()


def normal(bound: float):
    """Floats in [-bound, bound] that are 0 or at least 1e-100 in size: no product of three
    of them underflows, so every rounding is relative (the error model of normal numbers;
    below 2.2e-308 float64 rounds to a fixed absolute step instead)."""
    return st.floats(-bound, bound, allow_nan=False).filter(lambda v: v == 0 or abs(v) >= 1e-100)


# k equal micro-batches of 1 to 4 rows each
batches = st.tuples(st.integers(1, 6), st.integers(1, 4)).flatmap(lambda km: st.tuples(
    st.just(km[0]),
    st.lists(normal(10), min_size=km[0] * km[1], max_size=km[0] * km[1]),
    normal(5)))
# the float64 error model of a mean-of-squares gradient summed over micro-batches
# (support/spec/error_models.py): every term has the sign of w, so it is relative to the gradient
ACC_MODEL = error_models.model("acc:micro-batches-float64")


def _formula(x, w0: float) -> float:
    """2 w mean(x^2), the gradient of mean((w x)^2), in NumPy."""
    return 2 * w0 * float(np.mean(np.square(x)))


@pytest.mark.claim("ACC-01")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches)
# found by the thorough profile with w = 2.2e-311 (subnormal: the products underflow, outside
# the relative error model), pinned at the edge of the drawn range
@example(case=(5, [0.0] * 9 + [1.5], 1e-100))
def test_accumulation_equals_one_large_batch_only_with_division_by_k(claim, case):
    k, x, w0 = case
    full = full_batch_grad(x, w0)
    divided = micro_batch_grads(x, w0, k, divide=True)[-1]
    undivided = micro_batch_grads(x, w0, k, divide=False)[-1]
    size, n = abs(_formula(x, w0)), len(x) + k
    share = max(ACC_MODEL.share(divided - full, size, n=n),
                ACC_MODEL.share(undivided - k * full, k * size, n=n))
    scale = max(abs(full), 1e-300)
    claim.record("max relative error with /k", abs(divided - full) / scale, reduce="max")
    claim.record("max |undivided/full - k|", abs(undivided - k * full) / scale, reduce="max")
    claim.check("share_of_rounding_bound", share, reduce="max", note=ACC_MODEL.describe(n))
    assert share <= 1, (f"accumulated {divided!r} (/k) and {undivided!r} (no /k) against the "
                        f"full batch's {full!r}: {share:.3g} of the rounding bound")


@pytest.mark.claim("ACC-01")
@pytest.mark.parametrize("sizes", [(2, 2), (3, 1)], ids=["equal_2+2", "unequal_3+1"])
def test_division_by_k_on_the_sheets_batch_split_two_ways(claim, sizes):
    """The sheet's batch x = (1, 3, 2, 4), w = 2, as k = 2 micro-batches of the given sizes:
    dividing each micro-batch's mean loss by k gives the full batch's gradient only when the
    micro-batches are equal; otherwise the weights must be n_i / N."""
    k, x = len(sizes), torch.tensor(X, dtype=torch.float64)
    chunks = x.split(list(sizes))

    def accumulated(weights) -> float:
        w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        for chunk, weight in zip(chunks, weights):
            (((w * chunk) ** 2).mean() * weight).backward()
        return w.grad.item()
    full = claim.check('full-batch grad', full_batch_grad(X, 2.0))
    by_k = claim.record("grad with /k", accumulated([1 / k] * k))
    by_share = claim.record("grad with n_i / N", accumulated([len(c) / len(x) for c in chunks]))
    # the weighting that always works (the control: the comparison can hold)
    assert by_share == pytest.approx(full, rel=1e-15)
    assert by_k == full, (f"/k over micro-batches of {sizes[0]}+{sizes[1]} rows gives "
                          f"{by_k:.6g} instead of the full batch's {full:g}")


@control("ACC-01", "ACC-04", "ACC-05", "ACC-06", "ACC-09", "ACC-10",
         what="backward() overwrites .grad instead of adding to it: after the micro-batches "
              "only the last one's gradient is left")
def backward_keeps_only_the_last_micro_batch(mp):
    def overwrite(self, gradient=None, *args, **kwargs):
        leaves = [n.variable for n in toy.tape_nodes(self) if hasattr(n, "variable")]
        for leaf, g in zip(leaves, torch.autograd.grad(self, leaves, gradient)):
            leaf.grad = g
    mp.setattr(torch.Tensor, "backward", overwrite)


@pytest.mark.claim("ACC-02")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(normal(5), st.lists(normal(10), min_size=1, max_size=16))
@example(w0=1e-100, x=[0.0, 0.7890625])     # found with w0 = 2.2e-311 (subnormal), as above
def test_gradient_of_mean_squared_scaled_input_is_2w_mean_x_squared(claim, w0, x):
    g = full_batch_grad(x, w0)
    formula = _formula(x, w0)
    share = ACC_MODEL.share(g - formula, abs(formula), n=len(x))
    claim.record("max relative error", abs(g - formula) / max(abs(formula), 1e-300), reduce="max")
    claim.check("share_of_rounding_bound", share, reduce="max", note=ACC_MODEL.describe(len(x)))
    assert share <= 1, f"autograd {g!r} against 2 w mean(x^2) = {formula!r}: {share:.3g} of the bound"


@control("ACC-02", "ACC-03", what="autograd differentiates a square u**2 as u instead of 2u, so "
                                  "the gradient is w mean(x^2), half the formula")
def square_differentiates_to_u(mp):
    real = torch.Tensor.__pow__
    mp.setattr(torch.Tensor, "__pow__", lambda self, exponent:
               self * self.detach() if exponent == 2 else real(self, exponent))


@pytest.mark.claim("ACC-03")
def test_full_batch_gradient_is_30(claim):
    w = torch.tensor(2.0, requires_grad=True)
    x = torch.tensor(X)
    ((w * x) ** 2).mean().backward()
    claim.check('mean(x^2)', (x ** 2).mean().item())
    claim.check('grad', w.grad.item())
    assert w.grad.item() == 30.0


@pytest.mark.claim("ACC-04")
def test_two_micro_batches_without_dividing_give_20_plus_40(claim):
    after = micro_batch_grads(X, 2.0, 2, divide=False)
    claim.check('first micro-batch', after[0])
    claim.check('second micro-batch', after[1] - after[0])
    claim.check('grad', after[1])
    assert after[1] == 60.0 == 2 * full_batch_grad(X, 2.0)


@pytest.mark.claim("ACC-05")
def test_dividing_each_micro_batch_by_k_gives_10_plus_20(claim):
    after = micro_batch_grads(X, 2.0, 2, divide=True)
    claim.check('first micro-batch', after[0])
    claim.check('second micro-batch', after[1] - after[0])
    claim.check('grad', after[1])
    assert after[1] == 30.0


def run_sheet_snippet():
    """The sheet's "In code" block, line for line, returning what it prints and holds."""
    w = torch.tensor(2.0, requires_grad=True)
    x = torch.tensor([1.0, 3.0, 2.0, 4.0])
    for chunk in x.split(2):
        (((w * chunk) ** 2).mean() / 2).backward()
    first = repr(w.grad)
    try:
        with torch.no_grad():
            w -= 0.01 * w.grad
    except RuntimeError as exc:      # an in-place update of a leaf, had the tape recorded it
        after_step = str(exc).splitlines()[0]
    else:
        after_step = (w.item(), w.is_leaf, w.grad_fn, w.requires_grad)
    w.grad.zero_()
    y = w.detach() ** 2 + 3 * w
    y.backward()
    return first, after_step, repr(w.grad)


@pytest.mark.claim("ACC-06")
def test_the_snippet_prints_tensor_30(claim):
    first, _, _ = run_sheet_snippet()
    claim.check('printed', first)
    assert first == "tensor(30.)"


@pytest.mark.claim("ACC-07")
def test_manual_sgd_step_under_no_grad_is_not_recorded(claim):
    _, after_step, _ = run_sheet_snippet()
    assert isinstance(after_step, tuple), f"the step under no_grad was refused: {after_step}"
    value, is_leaf, grad_fn, requires_grad = after_step
    claim.check('w after the step', value)
    claim.record('still a leaf', is_leaf)
    assert value == pytest.approx(np.float32(2 - 0.01 * 30)) and is_leaf and grad_fn is None
    # negative control: the same update outside no_grad is refused on a leaf
    w = torch.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w -= 0.3


@control("ACC-07", what="torch.no_grad() does not switch the tape off, so the manual step on "
                        "the leaf w is recorded")
def sheet_no_grad_keeps_recording(mp):
    mp.setattr(torch, "no_grad", contextlib.nullcontext)


@pytest.mark.claim("ACC-08")
def test_detached_term_is_a_constant_so_the_gradient_is_3(claim):
    _, _, last = run_sheet_snippet()
    claim.check('printed', last)
    # negative control: without detach the square contributes 2w as well
    w = torch.tensor(1.7, requires_grad=True)
    (w ** 2 + 3 * w).backward()
    claim.record("without detach", w.grad.item())
    assert last == "tensor(3.)" and w.grad.item() != 3.0


@control("ACC-08", what="w.detach() stays in the graph, so the square contributes 2w to the "
                        "gradient")
def detach_keeps_the_square_in_the_graph(mp):
    mp.setattr(torch.Tensor, "detach", lambda self: self.view_as(self))


@pytest.mark.claim("ACC-09")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 8), st.integers(1, 4), st.floats(0.1, 5))
def test_summing_micro_batch_means_multiplies_the_gradient_by_k(claim, k, per, w0):
    rng = np.random.default_rng(k * 31 + per)
    x = rng.normal(size=k * per).tolist()
    ratio = micro_batch_grads(x, w0, k, divide=False)[-1] / full_batch_grad(x, w0)
    # the ratio of two results each within the model's bound of its value (+1 rounding)
    share = ACC_MODEL.share(ratio - k, k, n=k * per + k + 1)
    claim.record("max |ratio - k|", abs(ratio - k), reduce="max")
    claim.check("share_of_rounding_bound", share, reduce="max",
                note=ACC_MODEL.describe(k * per + k + 1))
    assert share <= 1, f"ratio {ratio!r} against k = {k}: {share:.3g} of the rounding bound"


@pytest.mark.claim("ACC-10")
def test_one_step_on_accumulated_micro_batches_equals_one_full_batch_step(claim):
    torch.manual_seed(0)
    X_, y_ = torch.randn(64, 8), torch.randn(64, 1)
    model = torch.nn.Linear(8, 1)
    twin = torch.nn.Linear(8, 1)
    twin.load_state_dict(model.state_dict())
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    k = 4
    for xb, yb in zip(X_.chunk(k), y_.chunk(k)):
        (torch.nn.functional.mse_loss(model(xb), yb) / k).backward()
    opt.step()
    torch.nn.functional.mse_loss(twin(X_), y_).backward()
    opt2.step()
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters()))
    claim.check('max parameter difference', diff, unit='')
    assert diff < 1e-6
