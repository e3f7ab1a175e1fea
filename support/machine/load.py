"""How much other work the machine did while a measurement ran: its load, in cores.

A timing taken while other processes compete for the cores is slower than the same work on
an idle machine, and by a different factor for each side of a comparison (a side that uses
two threads loses more than one that uses one; work that hands results between threads can
even get faster). Neither subtracting the load nor bounding each trial by a worst-case delay
works (the run-queue waits over-estimate a trial's delay, and load moves some ratios with no
wait at all), so the timing method (support/machine/timing.py) does two other things with
this reading: it tells quiet rounds from busy ones, and where it must decide from busy rounds
it widens a figure's interval by what that much load was measured to do to that very
comparison (support/machine/sensitivity.py).

:class:`Probe` reads, around one trial, the CPU time every other task of the machine used
(the ``cpuacct`` or ``cpu.stat`` counters of the root control group the process can see,
minus our own: this process's threads and its live ``multiprocessing`` children, read from
``/proc/<pid>/task/<tid>/schedstat``, and children reaped meanwhile, from ``getrusage``).
Divided by the trial's wall time it is the trial's **load**: how many cores other work kept
busy meanwhile (0 on an idle machine, about 1 with one CPU-bound process beside a
one-threaded trial). Where the counters do not exist (not Linux, no readable control group)
the probe says so (:attr:`Probe.available` is False, and :func:`describe` tells why) and
every trial reads as quiet.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
from pathlib import Path

_CGROUP_COUNTERS = (
    # cgroup v1: the cpuacct hierarchy's root (nanoseconds)
    (Path("/sys/fs/cgroup/cpuacct/cpuacct.usage"), "ns"),
    (Path("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"), "ns"),
    # cgroup v2: the root's cpu.stat, usage_usec (microseconds)
    (Path("/sys/fs/cgroup/cpu.stat"), "usec"),
)


def _system_counter():
    """A reader of the CPU time (seconds) all tasks the process can see have used, or None."""
    for path, unit in _CGROUP_COUNTERS:
        try:
            text = path.read_text()
        except OSError:
            continue
        if unit == "ns" and text.strip().isdigit():
            return lambda p=path: int(p.read_text()) * 1e-9
        if unit == "usec" and "usage_usec" in text:
            def read(p=path) -> float:
                for line in p.read_text().splitlines():
                    if line.startswith("usage_usec"):
                        return int(line.split()[1]) * 1e-6
                raise OSError("no usage_usec")
            return read
    return None


class Probe:
    """Readings around a trial: :meth:`start` before it, :meth:`others` after it gives the
    CPU seconds the rest of the machine used meanwhile (0.0 where unmeasurable)."""

    def __init__(self):
        self._system = _system_counter()
        self._fds: dict[str, int] = {}
        self.available = self._system is not None and self._own() is not None
        self._mark = None

    # ------------------------------------------------------------------ our own tasks
    def _schedstat_paths(self) -> list[str]:
        pids = [os.getpid()] + [p.pid for p in multiprocessing.active_children()]
        paths = []
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            paths += [f"/proc/{pid}/task/{tid}/schedstat" for tid in tids]
        return paths

    def _own(self) -> float | None:
        """CPU seconds of our live tasks, or None."""
        run = 0.0
        paths = self._schedstat_paths()
        if not paths:
            return None
        for path in paths:
            fd = self._fds.get(path)
            try:
                if fd is None:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY)
                fields = os.pread(fd, 128, 0).split()
            except OSError:          # the thread ended since the listing
                if fd is not None:
                    os.close(self._fds.pop(path))
                continue
            run += int(fields[0]) * 1e-9
        # threads that ended keep their descriptors (reads fail above and close them)
        return run

    @staticmethod
    def _reaped() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    # ------------------------------------------------------------------ a trial
    def start(self) -> None:
        if not self.available:
            return
        self._mark = (self._system(), self._own(), self._reaped())

    def others(self) -> float:
        """CPU seconds other tasks of the machine used since :meth:`start` (0.0 where
        unmeasurable)."""
        if not self.available or self._mark is None:
            return 0.0
        system, own, reaped = self._system(), self._own(), self._reaped()
        s0, o0, r0 = self._mark
        self._mark = None
        if own is None or o0 is None:
            return 0.0
        ours = (own - o0) + (reaped - r0)
        return max(0.0, (system - s0) - ours)

    def load_now(self, window_s: float = 0.02) -> float:
        """The machine's load over the next ``window_s`` seconds, this process idle: how
        many cores other work keeps busy right now."""
        import time
        self.start()
        t0 = time.perf_counter()
        time.sleep(window_s)
        return self.others() / max(time.perf_counter() - t0, 1e-9)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def describe() -> str:
    """One line for reports: whether this machine's load can be measured, and how."""
    counter = _system_counter()
    if counter is None:
        return ("not measured: no readable CPU-time counter of the machine's control group "
                "(/sys/fs/cgroup); every trial counts as quiet")
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        return "not measured: no /proc/<pid>/task schedstat on this system"
    return ("measured per trial: the CPU time of other tasks (the root control group's CPU "
            "counter less this process's threads and children, /proc schedstat)")
