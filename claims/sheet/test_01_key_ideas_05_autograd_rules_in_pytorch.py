"""Summary sheet, "Key ideas", "Autograd rules in PyTorch" (S:9-13).

"Leaf tensors with requires_grad=True accumulate gradients into .grad" (S:10, TAPE-06).
"Under torch.no_grad() nothing is recorded: use it for manual parameter updates and for
validation or inference, where it saves memory and time. Calling backward() on a result
computed there raises a RuntimeError, and so does updating a leaf that requires grad in place
outside it (w -= lr * w.grad)" (S:11; TAPE-09, TAPE-10, TAPE-12). "x.detach() shares the values
but is cut from the graph, so autograd treats it as a constant" (S:12, TAPE-13). "To freeze
parameters, set requires_grad=False on them" (S:13, TAPE-14).

The lecture says the same (L:89, L:106): AccumulateGrad nodes "add into each parameter's .grad
attribute. They do not overwrite it"; "Writing W -= lr * W.grad raises a leaf Variable that
requires grad is being used in an in-place operation", the message TAPE-10 checks. TAPE-12 is
tested here for memory (the bytes autograd saves for backward); its time half is timed with the
other tape switches in claims/lecture/test_09_switching_the_tape_off.py.

Each rule is also checked on a realistic model (support.lab.nested: blocks of Linear, batch
norm, ReLU and dropout inside an nn.ModuleList and an nn.ModuleDict, a buffer of its own at
depth, three parameter groups): every parameter at every depth accumulates, no_grad records
nothing through it, a manual update of each of its parameters raises, a submodule's detached
output cuts the layers below it off, and freezing a submodule freezes everything under it.
"""
import sys
from itertools import chain

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from support.rules.controls import control
from support.lab.nested import D_IN, nested_model, param_groups
from support.lab.train_torch import seeded_mlp

PHRASE = "a leaf Variable that requires grad is being used in an in-place operation"


@pytest.mark.claim("TAPE-06")
def test_leaves_accumulate_into_grad(claim):
    w = torch.tensor([1.5, -0.5], dtype=torch.float64, requires_grad=True)
    x1, x2 = torch.tensor([2.0, 3.0], dtype=torch.float64), torch.tensor([-1.0, 4.0], dtype=torch.float64)
    (w * x1).pow(2).sum().backward()
    g1 = w.grad.clone()
    (w * x2).pow(2).sum().backward()           # a different loss, no zeroing in between
    g2 = (2 * w * x2 * x2).detach()
    claim.record("grad_after_two", w.grad.tolist())
    claim.record("g1_plus_g2", (g1 + g2).tolist())
    assert torch.equal(w.grad, g1 + g2)        # +=, not overwrite
    assert not torch.equal(w.grad, g2)


@pytest.mark.claim("TAPE-06")
def test_every_parameter_of_a_nested_model_accumulates_into_grad(claim):
    torch.manual_seed(0)
    model = nested_model().eval()               # the same forward on every call
    names, params = zip(*model.named_parameters())
    x1, x2 = torch.randn(16, D_IN), torch.randn(16, D_IN)
    model(x1).pow(2).mean().backward()
    g1 = [p.grad.clone() for p in params]
    g2 = torch.autograd.grad(model(x2).pow(2).mean(), params)   # the second loss's alone
    model(x2).pow(2).mean().backward()          # a different loss, no zeroing in between
    summed = {n: torch.equal(p.grad, a + b) for n, p, a, b in zip(names, params, g1, g2)}
    claim.record("parameters_holding_the_sum", sum(summed.values()))
    claim.record("parameters", len(names))
    assert all(summed.values()), f"not +=: {[n for n, ok in summed.items() if not ok]}"
    assert not all(torch.equal(p.grad, b) for p, b in zip(params, g2))


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
    # contrast: the same expression outside no_grad is recorded
    assert (w * 2).sum().grad_fn is not None


@pytest.mark.claim("TAPE-09")
def test_no_grad_records_nothing_through_a_nested_model(claim):
    torch.manual_seed(0)
    model = nested_model()
    x = torch.randn(16, D_IN)
    with torch.no_grad():
        out = model(x).sum()
    claim.check('grad_fn', repr(out.grad_fn))
    assert out.grad_fn is None and not out.requires_grad
    with pytest.raises(RuntimeError):   # the sentence names the type, not the wording
        out.backward()
    assert all(p.grad is None for p in model.parameters())
    assert model(x).sum().grad_fn is not None   # contrast: outside no_grad it is recorded


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
    claim.record("message", msg)
    assert msg is not None, "the in-place update of a leaf outside no_grad raised nothing"
    claim.record('contains_phrase', PHRASE in msg)
    assert PHRASE in msg


@pytest.mark.claim("TAPE-10")
def test_a_manual_update_of_each_nested_parameter_outside_no_grad_raises(claim):
    torch.manual_seed(0)
    model = nested_model().eval()
    model(torch.randn(16, D_IN)).pow(2).mean().backward()
    before = [p.detach().clone() for p in model.parameters()]
    messages = {}
    for name, p in model.named_parameters():       # the hand-written SGD step of the notes
        try:
            p -= 0.1 * p.grad
            messages[name] = None
        except RuntimeError as err:
            messages[name] = str(err)
    raised = {n: m is not None and PHRASE in m for n, m in messages.items()}
    claim.record("parameters_that_raised_the_message", sum(raised.values()))
    claim.record("parameters", len(raised))
    assert all(raised.values()), f"no such error for {[n for n, r in raised.items() if not r]}"
    with torch.no_grad():                          # contrast: under no_grad the step goes through
        for p in model.parameters():
            p -= 0.1 * p.grad
    assert all(torch.equal(p, b - 0.1 * p.grad) for b, p in zip(before, model.parameters()))


@control("TAPE-10", what="an in-place update of a leaf that requires grad goes through outside "
                         "no_grad too (torch switches the tape off for it by itself)")
def in_place_leaf_update_allowed(mp):
    real = torch.Tensor.__isub__

    def isub(self, other):
        with torch.no_grad():
            return real(self, other)
    mp.setattr(torch.Tensor, "__isub__", isub)


@pytest.mark.claim("TAPE-12")
@pytest.mark.parametrize("model", ["notes", "nested"], ids=["model=notes", "model=nested"])
def test_no_grad_saves_memory(claim, model):
    """The memory half of "no_grad saves memory and time"; the time half is timed with the
    other tape switches (claims/lecture/test_09_switching_the_tape_off.py)."""
    if model == "nested":
        model, x = nested_model().train(), torch.randn(256, D_IN)
    else:
        model, x = seeded_mlp(), torch.randn(2048, 32)
    saved = {"grad": 0, "no_grad": 0}
    # the model's own tensors are held anyway: not counted
    params = {p.data_ptr() for p in chain(model.parameters(), model.buffers())}

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
    assert saved["grad"] > 0


@pytest.mark.claim("TAPE-13")
def test_detach_shares_values_but_leaves_the_graph(claim):
    w = torch.tensor([2.0, -1.0], requires_grad=True)
    d = w.detach()
    claim.record('same_storage', d.data_ptr() == w.data_ptr())
    claim.record('requires_grad', d.requires_grad)
    assert d.data_ptr() == w.data_ptr() and not d.requires_grad and d.grad_fn is None
    with torch.no_grad():
        d[0] = 5.0
    assert w.detach()[0].item() == 5.0       # shared values: the change shows in w
    # treated as a constant: the sheet's own example, y = w.detach()**2 + 3w at w=2 -> 3
    v = torch.tensor(2.0, requires_grad=True)
    (v.detach() ** 2 + 3 * v).backward()
    claim.check('grad_of_detached_square_plus_3w', v.grad.item())

    # for any value and weight: the detached term is a constant to autograd
    @given(st.floats(-100, 100), st.floats(-10, 10))
    def prop(x, k):
        u = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        (k * u.detach() ** 2 + 3 * u).backward()
        assert u.grad.item() == 3.0
    prop()


@control("TAPE-13", what="x.detach() returns a copy in new storage, so a change to it does not "
                         "show in x")
def detach_copies_the_values(mp):
    real = torch.Tensor.detach
    mp.setattr(torch.Tensor, "detach", lambda self: real(self).clone())


@control("TAPE-13", what="x.detach() returns a view that stays in the graph, so autograd "
                         "differentiates through it")
def detach_stays_in_the_graph(mp):
    mp.setattr(torch.Tensor, "detach", lambda self: self.view_as(self))


@pytest.mark.claim("TAPE-13")
def test_a_submodules_detached_output_cuts_the_layers_below_it_off_the_graph(claim):
    torch.manual_seed(0)
    model = nested_model().eval()
    features = model.stem(torch.randn(16, D_IN))
    cut = features.detach()
    claim.record('same_storage', cut.data_ptr() == features.data_ptr())
    assert cut.data_ptr() == features.data_ptr() and not cut.requires_grad
    model.heads["main"](model.body[0](cut)).pow(2).mean().backward()
    below = {n: p.grad is None for n, p in model.stem.named_parameters()}
    above = {n: p.grad is not None
             for n, p in chain(model.body.named_parameters(), model.heads.named_parameters())}
    claim.record("stem_parameters_without_gradient", sum(below.values()))
    assert all(below.values()), "gradient flowed through the detached output into the stem"
    assert all(above.values())


@pytest.mark.claim("TAPE-14")
def test_frozen_parameters_get_no_gradient(claim):
    model = seeded_mlp(16)
    frozen = list(model[0].parameters())
    for p in frozen:
        p.requires_grad_(False)
    model(torch.randn(4, 32)).sum().backward()
    claim.record('frozen_grads', [repr(p.grad) for p in frozen])
    assert all(p.grad is None for p in frozen)
    assert all(p.grad is not None for p in model[2].parameters())


@pytest.mark.claim("TAPE-14")
def test_freezing_a_submodule_freezes_its_parameters_at_every_depth(claim):
    torch.manual_seed(0)
    model = nested_model()
    model.stem.requires_grad_(False)            # a frozen backbone, as in fine-tuning
    model.body.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(param_groups(model, lr=0.1, weight_decay=0.01), lr=0.1)
    model(torch.randn(16, D_IN)).pow(2).mean().backward()
    opt.step()
    frozen = {n: p for n, p in model.named_parameters() if n.startswith(("stem.", "body."))}
    claim.record('frozen_grads', sorted({repr(p.grad) for p in frozen.values()}))
    claim.record("frozen_parameters", len(frozen))
    assert all(p.grad is None for p in frozen.values())
    assert all(torch.equal(p, before[n]) for n, p in frozen.items()), "a frozen parameter moved"
    assert all(p.grad is not None for p in model.heads.parameters())


@control("TAPE-14", what="requires_grad_(False) does not freeze a parameter: it keeps "
                         "requiring grad")
def requires_grad_false_is_ignored(mp):
    mp.setattr(torch.Tensor, "requires_grad_", lambda self, requires_grad=True: self)


@control("TAPE-14", what="a module's requires_grad_(False) freezes its own parameters only, not "
                         "those of its submodules")
def module_freezes_only_its_own_parameters(mp):
    def requires_grad_(self, requires_grad=True):
        for p in self.parameters(recurse=False):
            p.requires_grad_(requires_grad)
        return self
    mp.setattr(nn.Module, "requires_grad_", requires_grad_)
