"""Timing tests run alone: while one runs, the other xdist workers wait.

A timing ratio measured while another worker trains a network on the other core measures
that worker as much as the claim (under ``-n 2`` on two cores, AD-06's gradient-cost ratio
read 3.2 instead of 1.04, and JIT-18's eager/jit moved from 3.6 to 5.7 between runs). The
bootstrap interval of one run cannot see that: the load is steady within a test and
different in the next run. So the workers share a readers-writer lock: every test holds it
shared, a timing test holds it exclusively, from its setup (its fixtures time things too)
to its teardown. A worker that wants the exclusive lock takes a turnstile first, so the
others cannot keep it waiting by starting one test after another.

A timing test is one whose claims include a timing claim (kind d in the registry) or that
carries ``@pytest.mark.timing``. Without xdist nothing runs beside a test and no lock is
taken; where file locks do not exist (support/machine/locks.py) the tests run unlocked.

The other tests share the machine, and each gets its share of the cores
(:func:`support.machine.environment.shared_threads`: one under ``-n 2`` on two cores) for PyTorch's
intra-op threads and the OpenMP and BLAS pools (scikit-learn's trees, NumPy): two workers
that each run two OpenMP threads on two cores leave threads spinning at barriers for a
thread the scheduler has parked. On this suite's 2-core CI machine that spinning cost
about 16 of 124 CPU-seconds, and a tree's predictions beside the batched training took 8 s
instead of 1. Timing tests run on the threads their claim's entry names (``threads``: "one"
for a sentence that does not depend on the thread count, with or without xdist; "all", the
frameworks' own counts, for one about parallel work); the other tests keep the frameworks'
own counts where ``OMP_NUM_THREADS`` is set.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from support.harness.session import LOCK_FOLDER as _dir_key, is_timing, one_thread
from support.machine.environment import shared_threads
from support.machine.locks import file_lock

_KEY = "claims_quiet_dir"


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: the test times something: it runs while no "
                                       "other test runs (support/harness/timing_lock.py)")
    inp = getattr(config, "workerinput", None)
    if inp is not None and inp.get(_KEY):
        config.stash[_dir_key] = inp[_KEY]
    elif inp is None and config.pluginmanager.hasplugin("xdist") and \
            config.getoption("dist", "no") != "no":
        config.stash[_dir_key] = tempfile.mkdtemp(prefix="claims-quiet-")


def pytest_unconfigure(config):
    """The controller made the lock folder; it removes it when the workers are gone."""
    if getattr(config, "workerinput", None) is None and _dir_key in config.stash:
        shutil.rmtree(config.stash[_dir_key], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist (controller): every worker locks the same files."""
    folder = node.config.stash.get(_dir_key, None)
    if folder:
        node.workerinput[_KEY] = folder


@contextlib.contextmanager
def turn(folder: str, exclusive: bool):
    gate, room = Path(folder) / "turnstile.lock", Path(folder) / "room.lock"
    if exclusive:
        with file_lock(gate), file_lock(room):
            yield
        return
    with file_lock(gate):
        pass                      # wait while a timing test holds the turnstile
    with file_lock(room, shared=True):
        yield


class _Share:
    """Limits a test's threads to ``n`` and restores the previous counts after it."""

    def __init__(self, n: int):
        self.n = n
        self._controller = None
        self._modules = -1

    def _pools(self):
        # threadpoolctl finds the loaded OpenMP/BLAS libraries by walking the process's
        # shared objects (ms); only a test that imported something can have added one
        if len(sys.modules) != self._modules:
            from threadpoolctl import ThreadpoolController
            self._controller, self._modules = ThreadpoolController(), len(sys.modules)
        return self._controller

    @contextlib.contextmanager
    def __call__(self):
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        with self._pools().limit(limits=self.n):
            if torch is not None:
                torch.set_num_threads(self.n)
            try:
                yield
            finally:
                if torch is not None:
                    torch.set_num_threads(before)


_share_key = pytest.StashKey[_Share]()


_one_key = pytest.StashKey[_Share]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = item.config.stash.get(_dir_key, None)
    timing = is_timing(item)
    share = contextlib.nullcontext()
    if timing and one_thread(item):
        if _one_key not in item.config.stash:
            item.config.stash[_one_key] = _Share(1)
        share = item.config.stash[_one_key]()
    elif folder and not timing and (n := shared_threads()) is not None:
        if _share_key not in item.config.stash:
            item.config.stash[_share_key] = _Share(n)
        share = item.config.stash[_share_key]()
    lock = turn(folder, exclusive=timing) if folder else contextlib.nullcontext()
    with lock, share:
        yield
