"""How much other work on the machine could have delayed a measurement.

A timing taken while other processes compete for the cores is slower than the same work on
an idle machine, and by a different factor for each side of a comparison (a side that uses
two threads loses more than one that uses one). The timing method cannot make a busy machine
idle, but it can bound what the other work cost each trial and widen its interval by that
much (support/machine/timing.py), so that a busy machine makes a verdict inconclusive, never
wrong.

:class:`Probe` reads, around one trial, two things the operating system counts:

* the run-queue wait of this process's threads and of its live ``multiprocessing`` children
  (``/proc/<pid>/task/<tid>/schedstat``, nanoseconds): time our work was ready to run but
  not running. It includes waits for our own threads (JAX's pool and its caller on two
  cores), which are part of the measurement;
* the CPU time every other task of the machine used (the system's CPU time, from the
  ``cpuacct`` or ``cpu.stat`` counters of the root control group the process can see, minus
  our own): work that could have taken our cores.

A trial was delayed by other work by at most the smaller of the two: our threads lost time
only while they waited, and only another task's running can have made them wait for it.
Children that started and ended inside the trial (a DataLoader's workers) leave no
run-queue reading; if they were preempted at all (``getrusage``), the bound falls back to the
others' CPU time. Where the counters do not exist (not Linux, no readable control group) the
probe says so (:attr:`Probe.available` is False, and :func:`describe` tells why) and a trial
counts as undelayed: the method then falls back to the minimum over its trials, as before.
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
    """Readings around a trial: :meth:`start` before it, :meth:`delay` after it gives the
    seconds by which other work can at most have delayed it (0.0 where unmeasurable)."""

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

    def _own(self) -> tuple[float, float] | None:
        """(CPU seconds, run-queue wait seconds) of our live tasks, or None."""
        run = wait = 0.0
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
            wait += int(fields[1]) * 1e-9
        # threads that ended keep their descriptors (reads fail above and close them)
        return run, wait

    @staticmethod
    def _reaped() -> tuple[float, int]:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime, ru.ru_nivcsw

    # ------------------------------------------------------------------ a trial
    def start(self) -> None:
        if not self.available:
            return
        own = self._own()
        self._mark = (self._system(), own, self._reaped())

    def delay(self) -> float:
        """Seconds by which other work can at most have delayed the trial since start()."""
        if not self.available or self._mark is None:
            return 0.0
        system, own, reaped = self._system(), self._own(), self._reaped()
        s0, o0, r0 = self._mark
        self._mark = None
        if own is None or o0 is None:
            return 0.0
        ours = (own[0] - o0[0]) + (reaped[0] - r0[0])
        others = max(0.0, (system - s0) - ours)
        waited = max(0.0, own[1] - o0[1])
        if reaped[1] > r0[1]:
            # a child that ended inside the trial was preempted: its wait is unknown
            return others
        return min(others, waited)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def describe() -> str:
    """One line for reports: whether this machine's load can be measured, and how."""
    counter = _system_counter()
    if counter is None:
        return ("not measured: no readable CPU-time counter of the machine's control group "
                "(/sys/fs/cgroup); timings are minima over trials without a load correction")
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        return "not measured: no /proc/<pid>/task schedstat on this system"
    return ("measured per trial: run-queue waits of the process's threads against the CPU time "
            "of other tasks (/proc schedstat, root control group's CPU counter)")
