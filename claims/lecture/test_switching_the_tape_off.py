"""Lecture, "Switching the tape off" (and the sheet's autograd rules that say the same).

"each recorded operation holds its inputs in memory until backward() consumes them or the last
reference to the graph disappears." "Writing W -= lr * W.grad raises a leaf Variable that
requires grad is being used in an in-place operation." "torch.inference_mode(), a stricter and
slightly faster variant whose outputs can never re-enter a graph." "jax.lax.stop_gradient(x)
passes x through unchanged while telling grad to treat it as a constant." The MB figures of
this section are MEM-*; the inference_mode timing is TAPE-23 (performance block).
"""
import gc
import inspect
import sys
import weakref

import pytest
import torch

from hypothesis import given, strategies as st

from support.harness.controls import control

def _mlp(width=256):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1))


@pytest.mark.claim("TAPE-09")
def test_no_grad_records_nothing_and_backward_raises(claim):
    w = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        out = (w * 2).sum()
    claim.record('requires_grad', out.requires_grad)
    claim.check('grad_fn', repr(out.grad_fn))
    assert out.grad_fn is None and not out.requires_grad
    try:
        out.backward()
        message = None
    except RuntimeError as err:
        message = str(err)
    claim.record("message", message)
    # a backward that goes through is the sentence's failure, not a crash of the test
    assert message is not None, "backward() on a result computed under no_grad raised nothing"
    assert "does not require grad" in message
    # negative control: the same expression outside no_grad is recorded
    assert (w * 2).sum().grad_fn is not None


@control("TAPE-09", "TAPE-11", "TAPE-12",
         what="torch.no_grad() does not switch the tape off: it records as if grad mode were on")
def no_grad_keeps_recording(mp):
    real = torch.no_grad

    def no_grad(*args, **kwargs):
        # torch's own initialisers fill parameters in place under no_grad: they keep theirs,
        # or building a model would fail before the sentence is reached
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return real(*args, **kwargs) if caller.split(".")[0] == "torch" else torch.enable_grad()
    mp.setattr(torch, "no_grad", no_grad)


@pytest.mark.claim("TAPE-10")
def test_in_place_update_of_a_leaf_outside_no_grad_raises(claim):
    w = torch.randn(3, requires_grad=True)
    (w ** 2).sum().backward()
    try:
        w -= 0.1 * w.grad
        msg = None
    except RuntimeError as err:
        msg = str(err)
    phrase = "a leaf Variable that requires grad is being used in an in-place operation"
    claim.record("message", msg)
    assert msg is not None, "the in-place update of a leaf outside no_grad raised nothing"
    claim.record('contains_phrase', phrase in msg)
    assert phrase in msg


@control("TAPE-10", what="an in-place update of a leaf that requires grad goes through outside "
                         "no_grad too (torch switches the tape off for it by itself)")
def in_place_leaf_update_allowed(mp):
    real = torch.Tensor.__isub__

    def isub(self, other):
        with torch.no_grad():
            return real(self, other)
    mp.setattr(torch.Tensor, "__isub__", isub)


@pytest.mark.claim("TAPE-11")
def test_in_place_update_is_legal_under_no_grad_as_in_optimizer_step(claim):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    manual = torch.nn.Linear(4, 2)
    manual.load_state_dict(model.state_dict())
    x = torch.randn(8, 4)
    for m in (model, manual):
        m(x).pow(2).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    refused = None
    with torch.no_grad():
        try:
            for p in manual.parameters():
                p -= 0.1 * p.grad
        except RuntimeError as err:
            refused = str(err).splitlines()[0]
    claim.record("manual_update_under_no_grad_refused", refused or "no")
    assert refused is None, f"the in-place update under no_grad was refused: {refused}"
    # step computes p.add_(g, alpha=-lr), the manual line p - (lr * g): equal up to one rounding
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), manual.parameters()))
    claim.record("max_abs_diff_step_vs_manual", diff)
    same = diff <= 1e-7
    leaves = all(p.is_leaf and p.grad_fn is None and p.requires_grad for p in model.parameters())
    src = inspect.getsource(torch.optim.SGD)
    claim.record('step_equals_manual_no_grad_update', same)
    claim.record('params_stay_leaves', leaves)
    claim.record("step_decorated_use_grad_for_differentiable",
                 "_use_grad_for_differentiable" in src,
                 note="internal decorator that sets grad mode off (differentiable=False)")
    assert same and leaves
    # what step() switches off: the same in-place update with grad mode on is the error of TAPE-10
    # grad mode as seen by the update kernels inside step()
    seen = []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    import importlib
    sgd_mod = importlib.import_module("torch.optim.sgd")
    names = [n for n in ("_single_tensor_sgd", "_multi_tensor_sgd") if hasattr(sgd_mod, n)]
    origs = {n: getattr(sgd_mod, n) for n in names}

    def spy(orig):
        def inner(*a, **k):
            seen.append(torch.is_grad_enabled())
            return orig(*a, **k)
        return inner
    for n in names:
        setattr(sgd_mod, n, spy(origs[n]))
    try:
        model(x).sum().backward()
        opt.step()
    finally:
        for n in names:
            setattr(sgd_mod, n, origs[n])
    claim.record("grad_enabled_inside_step", seen if seen else "not observed")
    assert seen and not any(seen)
# its control: no_grad_keeps_recording (after TAPE-09's test)


@pytest.mark.claim("TAPE-12")
def test_no_grad_saves_memory(claim):
    """The memory half of "no_grad saves memory and time"; the time half is timed with the
    other tape switches (test_switching_the_tape_off_timing.py)."""
    model = _mlp()
    x = torch.randn(2048, 32)
    saved = {"grad": 0, "no_grad": 0}
    params = {p.data_ptr() for p in model.parameters()}

    def counter(mode):
        def pack(t):
            if t.data_ptr() not in params:
                saved[mode] += t.numel() * t.element_size()
            return t
        return pack
    with torch.autograd.graph.saved_tensors_hooks(counter("grad"), lambda t: t):
        model(x)
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(counter("no_grad"), lambda t: t):
        model(x)
    claim.record("saved_bytes_grad", saved["grad"], unit="B")
    claim.check('saved_bytes_no_grad', saved['no_grad'], unit='B')
    assert saved["no_grad"] == 0 and saved["grad"] > 0
# its controls: no_grad_keeps_recording (after TAPE-09's test); the time half's in
# test_switching_the_tape_off_timing.py


@pytest.mark.claim("TAPE-14")
def test_frozen_parameters_get_no_gradient(claim):
    model = _mlp(16)
    frozen = list(model[0].parameters())
    for p in frozen:
        p.requires_grad_(False)
    model(torch.randn(4, 32)).sum().backward()
    claim.record('frozen_grads', [repr(p.grad) for p in frozen])
    assert all(p.grad is None for p in frozen)
    assert all(p.grad is not None for p in model[2].parameters())


@control("TAPE-14", what="requires_grad_(False) does not freeze a parameter: it keeps "
                         "requiring grad")
def requires_grad_false_is_ignored(mp):
    mp.setattr(torch.Tensor, "requires_grad_", lambda self, requires_grad=True: self)


@pytest.mark.claim("TAPE-15")
@pytest.mark.parametrize("use", ["saved_by_mul", "add_saves_nothing"])
def test_inference_mode_outputs_never_re_enter_a_graph(claim, use):
    w = torch.randn(3, requires_grad=True)
    with torch.inference_mode():
        it = torch.randn(3) * 2
    claim.record('is_inference', it.is_inference())
    assert it.is_inference(), "a tensor made under inference_mode is not an inference tensor"
    try:
        out = (it * w).sum() if use == "saved_by_mul" else (it + w).sum()
        out.backward()
        entered = True
    except RuntimeError as exc:
        entered = False
        claim.record("message", str(exc).splitlines()[0])
    claim.record('re_entered_a_graph', entered)
    # stricter than no_grad: a no_grad tensor can be saved for backward
    with torch.no_grad():
        ng = torch.randn(3) * 2
    (ng * w).sum().backward()
    assert not entered, "an inference-mode tensor took part in a graph and backpropagated"


@control("TAPE-15", what="torch.inference_mode() is only no_grad: what it makes are ordinary "
                         "tensors, which a graph may save and backpropagate through")
def inference_mode_is_only_no_grad(mp):
    mp.setattr(torch, "inference_mode", torch.no_grad)


@pytest.mark.claim("TAPE-16")
@pytest.mark.parametrize("mode", ["tensor", "item", "no_grad"])
def test_a_referenced_loss_keeps_its_graph_alive(claim, mode):
    """total += loss keeps every batch's graph; .item() leaves the last; no_grad leaves none."""
    model = _mlp(64)
    batches = 20

    class Held:                      # a saved activation, tracked by a weak reference
        def __init__(self, t):
            self.t = t
    alive = weakref.WeakSet()
    params = {p.data_ptr() for p in model.parameters()}

    def pack(t):
        if t.data_ptr() in params:   # weights are alive anyway; count activations only
            return t
        # detach: a saved output would otherwise point back at its own node (a cycle the
        # garbage collector cannot see through autograd's C++ graph)
        h = Held(t.detach())
        alive.add(h)
        return h

    def unpack(h):
        return h.t if isinstance(h, Held) else h
    total, one = 0.0, None
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        for i in range(batches):
            x = torch.randn(32, 32)
            if mode == "no_grad":
                with torch.no_grad():
                    loss = model(x).pow(2).mean()
            else:
                loss = model(x).pow(2).mean()
            if one is None:
                one = len(alive)     # what one batch's graph holds
            total += loss if mode == "tensor" else loss.item()
    gc.collect()
    held = len(alive)
    per_graph = max(one, 1)
    claim.record("saved_activations_alive_after_loop", held)
    claim.record("saved_activations_per_batch_graph", one)
    stated = {"tensor": batches, "item": 1, "no_grad": 0}[mode]
    claim.record('graphs_alive', held / per_graph, note=f'{batches} batches')
    assert held == stated * one
    if mode != "no_grad":
        assert one > 0


@control("TAPE-16", what="adding a loss into a running total keeps only its value: the total "
                         "holds no graph, so total += loss keeps no batch's graph alive")
def summing_detaches_the_loss(mp):
    radd, iadd = torch.Tensor.__radd__, torch.Tensor.__iadd__
    mp.setattr(torch.Tensor, "__radd__", lambda self, other: radd(self.detach(), other))
    mp.setattr(torch.Tensor, "__iadd__", lambda self, other: iadd(
        self, other.detach() if isinstance(other, torch.Tensor) else other))


@control("TAPE-16", what=".item() keeps a hidden reference to the loss tensor, so every "
                         "batch's graph stays alive")
def item_keeps_the_loss(mp):
    real, kept = torch.Tensor.item, []

    def item(self):
        kept.append(self)
        return real(self)
    mp.setattr(torch.Tensor, "item", item)


@pytest.mark.claim("TAPE-17")
def test_saved_inputs_are_held_until_backward_consumes_them(claim):
    w = torch.randn(3, requires_grad=True)
    out = torch.tanh(w)
    before = out.grad_fn._saved_result
    claim.record('saved_before_backward', bool(torch.equal(before, out)))
    assert torch.equal(before, out), "tanh's node does not hold its output before backward()"
    out.sum().backward()
    try:
        out.grad_fn._saved_result
        freed = None
    except RuntimeError as err:
        freed = str(err).splitlines()[0]
    claim.record("after_backward", freed or "still held")
    assert freed is not None, "tanh's node still holds its output after backward()"
    assert "freed" in freed
    # ... or until the graph's last reference disappears: the saved tensor is then released
    w2 = torch.randn(3, requires_grad=True)
    out2 = torch.tanh(w2 * 1.0)
    ref = weakref.ref(out2.grad_fn._saved_result)
    del out2
    gc.collect()
    assert ref() is None


@control("TAPE-17", what="backward() keeps the saved tensors, as if retain_graph=True were "
                         "the default")
def backward_retains_the_graph(mp):
    real = torch.Tensor.backward

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        return real(self, gradient, True if retain_graph is None else retain_graph,
                    create_graph, inputs)
    mp.setattr(torch.Tensor, "backward", backward)


@pytest.mark.claim("JAX-03")
def test_stop_gradient_passes_the_value_and_blocks_the_gradient(claim):
    import jax
    import jax.numpy as jnp
    x = jnp.float32(2.0)
    same = bool(jax.lax.stop_gradient(x) == x)
    g = float(jax.grad(lambda x: jax.lax.stop_gradient(x) ** 2 + 3 * x)(x))
    g_plain = float(jax.grad(lambda x: x ** 2 + 3 * x)(x))
    claim.record('value_unchanged', same)
    claim.check('grad_at_2', g)
    claim.record("grad_without_stop_gradient", g_plain)
    assert same and g == 3.0 and g_plain == 7.0

    # for any x and any weight on the stopped term: the term contributes its value, not its slope
    h = jax.grad(lambda x, k: k * jax.lax.stop_gradient(x) ** 2 + 3 * x)

    @given(st.floats(-100, 100, width=32), st.floats(-10, 10, width=32))
    def prop(xv, k):
        assert float(h(jnp.float32(xv), jnp.float32(k))) == 3.0
        assert float(jax.lax.stop_gradient(jnp.float32(xv))) == float(jnp.float32(xv))
    prop()


@control("JAX-03", what="jax.lax.stop_gradient lets the gradient through (it is the identity "
                        "for grad too)")
def stop_gradient_passes_the_gradient(mp):
    import jax
    mp.setattr(jax.lax, "stop_gradient", lambda x: x)


@pytest.mark.claim("JAX-01")
def test_jax_records_nothing_unless_the_call_is_differentiated(claim):
    """"Nothing is recorded unless the function is called under jax.grad, so an evaluation
    pass is an ordinary function call": the arrays JAX holds after a plain call, against
    after the same call under jax.vjp (the reverse pass jax.grad runs), read from
    jax.live_arrays() on the CPU."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def f(p, x):
        return jnp.sum(p["v"] * jnp.tanh(p["W"] @ x + p["b"]))
    rng = np.random.default_rng(0)
    p = {"W": jnp.asarray(rng.normal(size=(64, 8)), jnp.float32), "b": jnp.zeros(64),
         "v": jnp.asarray(rng.normal(size=64), jnp.float32)}
    x = jnp.asarray(rng.normal(size=8), jnp.float32)

    def new_arrays(call):
        """The arrays alive after ``call()`` (its results kept) that were not before."""
        call()                                   # constants and compiled kernels settle first
        gc.collect()
        before = {id(a) for a in jax.live_arrays()}
        kept = call()
        gc.collect()
        new = [a for a in jax.live_arrays() if id(a) not in before]
        del kept
        return new

    plain = new_arrays(lambda: f(p, x))
    under_vjp = new_arrays(lambda: jax.vjp(lambda q: f(q, x), p))
    grads = new_arrays(lambda: jax.grad(f)(p, x))
    claim.check("arrays a plain call keeps beyond its output", len(plain) - 1)
    claim.check("arrays jax.vjp keeps for the backward pass", len(under_vjp) - 1,
                note="beyond its output: the residuals its pullback closes over")
    claim.record("their shapes", [list(a.shape) for a in under_vjp])
    claim.record("arrays a jax.grad call leaves", len(grads),
                 note="the gradient of each parameter, nothing else")
    assert len(plain) == 1 and plain[0].shape == ()
    assert len(grads) == len(p)


@control("JAX-01", what="JAX records like a tape: every jnp.tanh keeps its input alive for a "
                        "backward pass, even in an ordinary call")
def jnp_tanh_keeps_its_input(mp):
    import jax.numpy as jnp
    real, tape = jnp.tanh, []

    def tanh(x, *args, **kwargs):
        tape.append(x)
        return real(x, *args, **kwargs)
    mp.setattr(jnp, "tanh", tanh)

