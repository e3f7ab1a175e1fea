"""Something else competing for the machine, on demand (DEV-10).

"an earlier run of the identical script reported 11.2 ms and 33.9 ms [...] because something
else was competing for the machine" (L:487). :class:`Competitors` keeps CPU-bound processes
ready, two per core the process may run on, so that whatever the machine, a one-threaded
trial gets about half a core while they run; :meth:`Competitors.competing` is a block during
which they spin (the timing method enters it around a side's trials, outside the clock), and
they sleep otherwise. They are ``multiprocessing`` children of this
process, so the timing method's load probe counts their CPU time as the trial's own, not as
other work on the machine (support/machine/load.py): the competition is the measurement, and
only the machine's own load widens its interval.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import time

from support.machine.environment import cores

# how long the competitors get to wake and spread over the cores before a competed-for call
WAKE_S = 0.05


def _spin(go, busy, stop) -> None:
    while not stop.is_set():
        # woken by the event, then busy on a flag in shared memory: an Event's is_set takes
        # a lock, and competitors polling it would wait on each other instead of spinning
        if go.wait(0.1):
            while busy.value:
                pass


class Competitors:
    """``per_core`` CPU-bound processes per core, started once for a ``with`` block."""

    def __init__(self, per_core: int = 2):
        self.n = per_core * cores()
        ctx = multiprocessing.get_context("spawn")
        self._go, self._stop = ctx.Event(), ctx.Event()
        self._busy = ctx.RawValue("b", 0)
        self._procs = [ctx.Process(target=_spin, args=(self._go, self._busy, self._stop),
                                   daemon=True) for _ in range(self.n)]

    def __enter__(self) -> "Competitors":
        for p in self._procs:
            p.start()
        return self

    def __exit__(self, *exc) -> None:
        self._go.clear()
        self._busy.value = 0
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()

    @contextlib.contextmanager
    def competing(self):
        """While the block runs, the competitors spin (every one awake before it starts)."""
        self._busy.value = 1
        self._go.set()
        time.sleep(WAKE_S)
        try:
            yield
        finally:
            self._go.clear()
            self._busy.value = 0
