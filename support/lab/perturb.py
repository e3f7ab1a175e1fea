"""Perturbations several negative controls (``@control`` functions) build on their MonkeyPatch:
an optimizer's defaults (:func:`with_defaults`, ADAM-*) or the gradient its step reads
(:func:`step_on`, LOOP-10, LOOP-14), the concrete table read through a change (:func:`read_as`,
DS-*), Python floats' default dtype (:func:`python_floats_become`, DTYPE-*), JAX made to wait
(:func:`waiting`, AD-09); a call or a
context made a given share dearer than it is (:func:`dearer`, :func:`dearer_context`: the timing
claims' controls at the sentence's own threshold, TAPE-23, JIT-17, ...), a backward pass run
again (:func:`backward_runs`, AD-01, AD-06), an optimizer method that sees its first parameter
group only (:func:`first_group_only`: the realistic model's controls, LOOP-01, LOOP-10, TAPE-21),
an optimizer's steps taken with another setting per step (:func:`steps_with`,
:func:`steps_with_lr`, :func:`steps_scaled`: the learning-rate, story and protocol figures'
controls, LR-*, STORY-*, RNG-13, SPLIT-*), or stopped and started at an epoch's edge
(:func:`stops_after_epoch`, :func:`waits_out_epochs`: STORY-04, STORY-07, STORY-12, LR-01);
scikit-learn's boosted tree fitted with other settings (:func:`boosting_with`, SPLIT-*, RNG-12);
the CUDA card standing in for the CPU (:func:`card_is_the_cpu`: both sides of a device comparison
doing the same work, DEV-06 to DEV-14) and a whole training step made dearer
(:func:`training_steps_dearer`, DEV-12).
"""
from __future__ import annotations

import inspect
import time

from support.lab import data


# ----------------------------------------------------------------------------- defaults
def with_defaults(mp, fn, **new):
    """``fn`` (a function or an __init__) declaring other defaults: as called, and as
    inspect.signature reads them."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params][len(params) - len(fn.__defaults__):]
    mp.setattr(fn, "__defaults__", tuple(new.pop(n, d) for n, d in zip(names, fn.__defaults__)))
    if new:
        mp.setattr(fn, "__kwdefaults__", {**(fn.__kwdefaults__ or {}), **new})


# ----------------------------------------------------------------------------- JAX
def waiting(x, seconds: float):
    """``x`` passed through a host callback that sleeps ``seconds`` whenever the compiled
    program computing it runs (a sleep, not work: it stays the same on a busy machine)."""
    # imported here: the torch-only controls that import this module load no JAX
    import jax
    import jax.numpy as jnp

    def wait(v):
        time.sleep(seconds)
        return v
    return jax.pure_callback(wait, jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), x)


# ----------------------------------------------------------------------------- torch and the data
def python_floats_become(real, dtype):
    """``real`` (torch.tensor, np.array) giving a bare Python float ``dtype`` by default."""
    def make(data, *args, dtype=None, _real=real, _default=dtype, **kwargs):
        if dtype is None and isinstance(data, float):
            dtype = _default
        return _real(data, *args, dtype=dtype, **kwargs)
    return make


def read_as(mp, change):
    """Every concrete table reads as ``change(values)`` (a copy of its values): its columns,
    target, length and mix ids follow, for tables built before the patch and after it (a
    process-scope control patches before the session loads the data)."""
    tables, ids = {}, data.Concrete.__dict__["mix_ids"].func

    def values(table):
        if id(table) not in tables:
            tables[id(table)] = change(table.__dict__["values"].copy())
        return tables[id(table)]

    def built(table, raw):
        table.__dict__["values"] = raw
        tables.pop(id(table), None)
    mp.setattr(data.Concrete, "values", property(values, built), raising=False)
    mp.setattr(data.Concrete, "mix_ids", property(ids))


def read_scaled(mp, column: str, factor: float) -> None:
    """Every concrete table reads its ``column`` (a name of :data:`data.COLUMNS`) times
    ``factor``: another unit (ages in weeks: 1/7) or a miscalibrated instrument (strengths
    0.5 % low: 0.995)."""
    j = data.COLUMNS.index(column)

    def scaled(v):
        v[:, j] = v[:, j] * factor
        return v
    read_as(mp, scaled)


def step_on(mp, optimizer: type, change):
    """``optimizer``'s step, applied to ``change(grad)`` in place of each parameter's .grad."""
    real = optimizer.step

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = change(p.grad)
        return real(self, closure)
    mp.setattr(optimizer, "step", step)


def steps_with(mp, optimizer: type, key: str, value_at) -> None:
    """``optimizer``'s ``n``-th step (counted per optimizer instance, from 1) taken with
    ``value_at(value, n)`` in place of each parameter group's ``key``; the group's own value is
    restored after the step, so schedulers and ``state_dict`` see what the loop set. At the
    step, not in ``__init__``: the batched networks hand their lr to the optimizer per group."""
    real = optimizer.step

    def step(self, *args, **kwargs):
        n = self.__dict__["_steps_taken"] = self.__dict__.get("_steps_taken", 0) + 1
        given = [group[key] for group in self.param_groups]
        for group in self.param_groups:
            group[key] = value_at(group[key], n)
        try:
            return real(self, *args, **kwargs)
        finally:
            for group, value in zip(self.param_groups, given):
                group[key] = value
    mp.setattr(optimizer, "step", step)


def steps_with_lr(mp, optimizer: type, lr_at) -> None:
    """``optimizer`` stepping with ``lr_at(lr, n)`` as each group's learning rate at its ``n``-th
    step: ``lr * 0.98`` for steps 2 % shorter, ``0.0`` after step ``k`` for a run that stops
    there (its parameters stay where step ``k`` left them)."""
    steps_with(mp, optimizer, "lr", lr_at)


def boosting_with(mp, **params) -> None:
    """scikit-learn's HistGradientBoostingRegressor fitted with ``params`` in place of its
    defaults (``max_iter=93``, ``learning_rate=0.11``): the tree moved by a chosen amount
    while the networks it is compared with stay as they are."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    real = HistGradientBoostingRegressor.fit

    def fit(self, X, y, *args, **kwargs):
        self.set_params(**params)
        return real(self, X, y, *args, **kwargs)
    mp.setattr(HistGradientBoostingRegressor, "fit", fit)


def steps_scaled(mp, optimizer: type, factor: float) -> None:
    """``optimizer`` stepping with ``factor`` times each group's learning rate at every step
    (1.02: steps 2 % longer)."""
    steps_with_lr(mp, optimizer, lambda lr, n: lr * factor)


# the notes' loop on a lecture fold: 824 training rows in batches of 64 are 13 steps an epoch
# (LOOP-04 counts them), so a control can stop or start an optimizer at an epoch's edge
STEPS_PER_EPOCH = 13


def stops_after_epoch(mp, optimizer: type, epoch: int) -> None:
    """``optimizer`` takes no step after the notes' loop's epoch ``epoch`` (lr 0 from then on:
    the run's later epochs evaluate the network that epoch left, bit for bit)."""
    steps_with_lr(mp, optimizer, lambda lr, n: lr if n <= epoch * STEPS_PER_EPOCH else 0.0)


def waits_out_epochs(mp, optimizer: type, epochs: int) -> None:
    """``optimizer`` takes no step in the notes' loop's first ``epochs`` epochs (lr 0), then
    steps as it should."""
    steps_with_lr(mp, optimizer, lambda lr, n: 0.0 if n <= epochs * STEPS_PER_EPOCH else lr)


# ----------------------------------------------------------------------------- a share dearer
def spin(seconds: float, clock=time.perf_counter) -> None:
    """Busy work for ``seconds`` of ``clock``: CPU time, which a busy machine stretches as it
    stretches the work it is added to (a sleep would stay the same and so move the ratio under
    load). ``time.process_time`` for a cost that a test reading CPU time must see in full."""
    end = clock() + seconds
    while clock() < end:
        pass


def dearer(fn, share: float, sync=None):
    """``fn`` made ``share`` dearer than it is: each call then spins for ``share`` of the time
    the call took (after ``sync`` of its result where the call returns before its work is
    done). Proportional, not a fixed cost, so that a ratio lands at the same place on a
    fast and a slow machine: just across a sentence's threshold, not far beyond it."""
    def call(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if sync is not None:
            sync(out)
        spin(share * (time.perf_counter() - t0))
        return out
    return call


def dearer_context(mode, share: float):
    """A context manager class like ``mode`` (torch.no_grad, ...) whose block costs ``share``
    more: on leaving it spins for ``share`` of the time spent inside."""
    class Dearer(mode):
        def __enter__(self):
            self._t0 = time.perf_counter()
            return super().__enter__()

        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            spin(share * (time.perf_counter() - self._t0))
            return out
    Dearer.__name__ = Dearer.__qualname__ = f"dearer_{mode.__name__}"
    return Dearer


def backward_runs(mp, times) -> None:
    """torch.autograd.grad runs the backward pass ``times(n)`` times (``n`` the number of
    input elements it differentiates for): a gradient that costs that many backward passes."""
    import torch
    real = torch.autograd.grad

    def grad(outputs, inputs, *args, **kwargs):
        n = sum(t.numel() for t in ([inputs] if isinstance(inputs, torch.Tensor) else inputs))
        for _ in range(times(n) - 1):
            real(outputs, inputs, *args, **{**kwargs, "retain_graph": True})
        return real(outputs, inputs, *args, **kwargs)
    mp.setattr(torch.autograd, "grad", grad)


def first_group_only(mp, owner: type, method: str) -> None:
    """``owner.method`` (``torch.optim.SGD.step``, ``Optimizer.zero_grad``) acting on the
    optimizer's first parameter group only: a regression that a model of one group never
    shows."""
    real = getattr(owner, method)

    def first_only(self, *args, **kwargs):
        groups = self.param_groups
        self.param_groups = groups[:1]
        try:
            return real(self, *args, **kwargs)
        finally:
            self.param_groups = groups
    mp.setattr(owner, method, first_only)


# ----------------------------------------------------------------------------- the card
# the factories a tensor asked for on a device comes from (their device is a keyword)
FACTORIES = ("tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace",
             "eye", "rand", "randn", "randint", "randperm", "zeros_like", "ones_like",
             "empty_like", "full_like", "rand_like", "randn_like")


def _names_the_card(target) -> bool:
    import torch
    if isinstance(target, (str, torch.device)):
        return torch.device(target).type == "cuda"
    # .to(0), .cuda(0): a device index is a CUDA device
    return isinstance(target, int) and not isinstance(target, bool)


def asked_for_the_card(t) -> bool:
    """Whether ``t`` (a tensor or parameter) was asked for on the card under
    :func:`card_is_the_cpu`."""
    return bool(getattr(t, "_asked_for_the_card", False))


def card_is_the_cpu(mp) -> None:
    """Everything asked of the CUDA card is made or kept on the CPU: torch's factories given
    ``device="cuda"``, ``Tensor.to``/``.cuda`` and ``Module.to``/``.cuda``, each tensor,
    parameter and buffer so placed marked (:func:`asked_for_the_card`). torch still reports
    the card present, and synchronising it waits for nothing: the two sides of a CPU-vs-GPU
    comparison then run the same work on the CPU, on any card, and every ratio of them is 1
    but for noise (a level control needs no measurement of the card to sit on its bound)."""
    import torch
    from torch import nn

    def mark(t):
        if isinstance(t, torch.Tensor):
            t._asked_for_the_card = True
        return t

    def kept(kwargs):
        if _names_the_card(kwargs.get("device")):
            return {**kwargs, "device": "cpu"}, True
        return kwargs, False

    def factory(real):
        def make(*args, **kwargs):
            kwargs, card = kept(kwargs)
            out = real(*args, **kwargs)
            return mark(out) if card else out
        return make

    for name in FACTORIES:
        if hasattr(torch, name):
            mp.setattr(torch, name, factory(getattr(torch, name)))

    tensor_to, module_to = torch.Tensor.to, nn.Module.to

    def to_the_cpu(real, self, args, kwargs):
        kwargs, card = kept(kwargs)
        if args and _names_the_card(args[0]):
            args, card = ("cpu", *args[1:]), True
        return real(self, *args, **kwargs), card

    def t_to(self, *args, **kwargs):
        out, card = to_the_cpu(tensor_to, self, args, kwargs)
        return mark(out) if card else out

    def m_to(self, *args, **kwargs):
        out, card = to_the_cpu(module_to, self, args, kwargs)
        if card:
            for t in (*self.parameters(), *self.buffers()):
                mark(t)
        return out

    def m_cuda(self, device=None):
        return m_to(self, "cuda" if device is None else device)

    mp.setattr(torch.Tensor, "to", t_to)
    mp.setattr(torch.Tensor, "cuda", lambda self, device=None, non_blocking=False, **kw:
               t_to(self, "cuda" if device is None else device, non_blocking=non_blocking))
    mp.setattr(nn.Module, "to", m_to)
    mp.setattr(nn.Module, "cuda", m_cuda)


def training_steps_dearer(mp, optimizer: type, share: float, where=lambda param: True) -> None:
    """Every training step of ``optimizer`` whose first parameter satisfies ``where`` made
    ``share`` dearer, the whole step: after the step it spins for ``share`` of the time since
    the step's forward pass began (the first outermost ``nn.Module`` call since the last step;
    the step's own time where no module ran). Proportional, as :func:`dearer`: a ratio of two
    sides lands at 1 + ``share`` times their own on any machine."""
    from torch import nn

    call, step = nn.Module.__call__, optimizer.step
    state = {"depth": 0, "began": None}

    def called(self, *args, **kwargs):
        if state["depth"] == 0 and state["began"] is None:
            state["began"] = time.perf_counter()
        state["depth"] += 1
        try:
            return call(self, *args, **kwargs)
        finally:
            state["depth"] -= 1

    def stepped(self, *args, **kwargs):
        t0 = time.perf_counter()
        began, state["began"] = state["began"], None
        out = step(self, *args, **kwargs)
        if where(self.param_groups[0]["params"][0]):
            spin(share * (time.perf_counter() - (t0 if began is None else began)))
        return out
    mp.setattr(nn.Module, "__call__", called)
    mp.setattr(optimizer, "step", stepped)
