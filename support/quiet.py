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
taken; where file locks do not exist (support/locks.py) the tests run unlocked.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

from .locks import file_lock

_KEY = "claims_quiet_dir"
_dir_key = pytest.StashKey[str]()


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: the test times something: it runs while no "
                                       "other test runs (support/quiet.py)")
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


def is_timing(item) -> bool:
    if item.get_closest_marker("timing"):
        return True
    from .plugin import claim_ids, registry_of
    reg = registry_of(item.config)
    return any(reg[c].kind == "d" for c in claim_ids(item) if c in reg)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = item.config.stash.get(_dir_key, None)
    if not folder:
        yield
        return
    with turn(folder, exclusive=is_timing(item)):
        yield
