"""How many bytes a computation keeps alive: the meters behind the memory claims.

The notes' memory figures (lecture, "Switching the tape off"; sheet, "Memory during training")
were allocator readings on an Apple GPU. On a CPU there is no allocator counter to read, so the
suite measures the same quantity exactly, by following tensors rather than the allocator:

* :class:`SavedTensors` counts the bytes **held by autograd graphs**. Saved-tensor hooks see
  every tensor autograd stores for the backward pass; each one is wrapped, so the ledger knows
  when the graph holding it has been freed (a ``backward()``, a ``del``, a name rebound).
  Tensors sharing a storage are counted once, and the storages of excluded tensors (the
  parameters, the input batch) are not counted.
* :class:`LiveTensors` counts the bytes of every storage **allocated inside a region** that is
  still alive, whoever holds it (a graph, a checkpoint's recompute closure, a Python name):
  an allocator delta without the allocator's rounding, on any device; ``peak_bytes()`` is the
  most that was alive at once, the peak an allocator reports.
* :func:`cuda_allocated` reads ``torch.cuda.memory_allocated`` where a CUDA device is present,
  for the allocator-level reading the notes made.

Sizes are reported in bytes; :data:`MB` is the decimal megabyte the notes use (67 MB is
2 x 8,192 x 1,024 float32 values = 67.1e6 B).
"""
from __future__ import annotations

import math
import weakref
from typing import Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MB = 1e6


def storage_key(t: torch.Tensor) -> tuple[str, int]:
    """Identity of the memory a tensor views (views of one buffer share it)."""
    return (str(t.device), t.untyped_storage().data_ptr())


def storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _tensors(objs) -> Iterable[torch.Tensor]:
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            yield from obj.parameters()
            yield from obj.buffers()
        elif isinstance(obj, torch.Tensor):
            yield obj
        elif obj is not None:
            yield from _tensors(obj)


class _Packed:
    """What the graph holds instead of the tensor: lets the ledger see the graph die."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedTensors:
    """Bytes held by autograd graphs built inside the ``with`` block.

    ``exclude`` takes modules and tensors whose storages are not counted (weights are held
    by the model anyway; the input batch by whoever passed it). ``held_bytes()`` can be read
    at any time, also after the block: it counts the saved tensors whose graph is still
    alive. ``saved_bytes()`` counts everything ever saved, alive or not.
    """

    def __init__(self, exclude=()):
        self._exclude = {storage_key(t) for t in _tensors(exclude)}
        self._entries: list[tuple[weakref.ref, tuple, int]] = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor):
        # a detached alias: holding the tensor itself would tie an output to its own grad_fn
        # (tensor -> grad_fn -> saved -> tensor), a cycle that autograd cannot free
        packed = _Packed(t.detach())
        self._entries.append((weakref.ref(packed), storage_key(t), storage_bytes(t)))
        return packed

    @staticmethod
    def _unpack(packed: _Packed) -> torch.Tensor:
        return packed.tensor

    def __enter__(self) -> "SavedTensors":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def _sum(self, alive_only: bool) -> int:
        seen: dict[tuple, int] = {}
        for ref, key, nbytes in self._entries:
            if key in self._exclude or (alive_only and ref() is None):
                continue
            seen[key] = nbytes
        return sum(seen.values())

    def held_bytes(self) -> int:
        """Bytes of distinct storages that live graphs hold for backward."""
        return self._sum(alive_only=True)

    def saved_bytes(self) -> int:
        """Bytes of distinct storages ever saved in the block (freed graphs included)."""
        return self._sum(alive_only=False)

    @property
    def n_saved(self) -> int:
        return len(self._entries)


class LiveTensors(TorchDispatchMode):
    """Storages allocated by the operators run inside the ``with`` block.

    Every operator output whose storage is new (not a view or in-place result of one of the
    operator's inputs) is remembered by a weak reference to its storage; ``live_bytes()``
    sums the storages not yet freed. It sees below autograd, so it counts what a graph holds
    and what anything else (a checkpoint, a variable) keeps alive.
    """

    def __init__(self):
        super().__init__()
        self._refs: dict[tuple, tuple[StorageWeakRef, int]] = {}
        self._peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {storage_key(t) for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and storage_key(t) not in inputs:
                s = t.untyped_storage()
                self._refs[storage_key(t)] = (StorageWeakRef(s), s.nbytes())
        # right after an operator, while its inputs and its output are both alive: where a
        # peak can only be
        self._peak = max(self._peak, self.live_bytes())
        return out

    def live_bytes(self) -> int:
        return sum(n for ref, n in self._refs.values() if not ref.expired())

    def peak_bytes(self) -> int:
        """The most bytes of the region's storages alive at once (after any operator)."""
        return self._peak


def cuda_allocated(device=None) -> int | None:
    """``torch.cuda.memory_allocated`` after a synchronise, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (modules count params+buffers)."""
    seen = {}
    for t in _tensors([tensors]):
        if t is not None:
            seen[storage_key(t)] = storage_bytes(t)
    return sum(seen.values())


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> tuple[int, int]:
    """(bytes of parameter-sized state tensors, bytes of the other state tensors)."""
    big = small = 0
    for p, state in opt.state.items():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                if value.shape == p.shape and value.numel() > 1:
                    big += value.numel() * value.element_size()
                else:
                    small += value.numel() * value.element_size()
    return big, small


def linear_fit(xs, ys) -> tuple[float, float, float]:
    """Least-squares line through (xs, ys): (slope, intercept, R^2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else -math.inf)
    return slope, intercept, r2
