"""The order tests start in under xdist, so that the workers finish together.

A run under ``-n`` ends when its last worker does. xdist's ``load`` scheduler hands each
worker a chunk of consecutive tests from the collection order and more as it drains; in the
file order the longest tests (the batched concrete experiments, the nested pytest runs of
support/tests) start late and one worker ends ten seconds after the other. So, under
``--dist load`` only, this plugin reorders the collection:

1. timing tests first (support/harness/timing_lock.py runs each alone): grouped at the start, a timing
   test waits for the other worker's short timing test, not for whatever long test happens
   to run beside it;
2. then the rest, longest module first, from the durations of earlier runs (this machine's
   own, merged from its runs into the user cache, once they cover most of the suite; else
   ``support/resources/durations.json``), and within a module longest test first, so that
   the last tests to start are short;

sends tests one at a time (``--maxschedchunk 1`` unless given), and sends the tests of a
module to the worker that started the module, as long as the other worker has something
else to do. A module-scoped fixture is set up once per worker that runs the module and again
whenever that worker's next test comes from another module; spread over both workers and
interleaved, the jit table of the lecture's section 11 (3.5 s, timed under the exclusive
lock while the other core idles) was measured three times per run. Ties keep the collected
order; a test with no recorded duration counts as instant. Without xdist, or when
pytest-random-order is asked to shuffle (``--random-order``, ``--random-order-bucket``; the
``stability`` command does), the order is left as collected: the scheduler's rules still hold.

Every run writes the durations it measured (setup + call + teardown of each test, seconds) to
``durations.json`` beside claims.json; ``python -m support durations`` copies a run's into
support/resources/ (review the diff: a test that got slower moves up the order).
"""
from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

from support.harness.session import STATE, is_timing, report_dir, shared_folder, state
from support.paths import RESOURCES, ROOT

DURATIONS = RESOURCES / "durations.json"
FILE = "durations.json"
_recorder_key = pytest.StashKey["_Recorder"]()


def _read(path: Path) -> dict[str, float]:
    try:
        return json.loads(path.read_text())["durations"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}


def local_file() -> Path:
    """This machine's own durations, merged from every run on it (the user cache)."""
    from support.lab.data import cache_dir
    return cache_dir() / FILE


def load(path: Path | None = None) -> dict[str, float]:
    """Test node ID -> seconds; no file is no durations (the collected order). Without a
    path: this machine's own durations once its runs have timed most of the suite, else the
    ones that ship with it. Only the order matters, which a machine uniformly slower than the
    one that recorded them keeps; one whose tests differ in relative cost (more cores, a
    GPU) orders by what it measured itself."""
    if path is not None:
        return _read(path)
    shipped, local = _read(DURATIONS), _read(local_file())
    if shipped and len(shipped.keys() & local.keys()) >= 0.8 * len(shipped):
        return local
    return shipped


def _distributes(config) -> bool:
    """True on the xdist controller and workers of a ``--dist load`` run."""
    inp = getattr(config, "workerinput", None)
    if inp is not None:
        return inp.get("claims_dist") == "load"
    return config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "load"


def pytest_configure(config):
    if getattr(config, "workerinput", None) is not None:
        return
    rec = config.stash[_recorder_key] = _Recorder()
    config.pluginmanager.register(rec, f"claims-durations-{id(config)}")
    if _distributes(config) and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist (controller): the workers order their collection only under ``--dist load``
    (they cannot see the controller's options)."""
    node.workerinput["claims_dist"] = node.config.getoption("dist", "no")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """An xdist worker's last hook: the run waits until every worker process has exited,
    and the interpreter's final garbage collection walks every object the tests left behind
    (torch, JAX, Hypothesis): 2 to 4 s after a full run. Frozen, they are left to the
    operating system, which reclaims the memory when the process exits a moment later."""
    if getattr(config, "workerinput", None) is not None:
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if not _distributes(config):
        return
    timing = {item.nodeid: is_timing(item) for item in items}
    _publish_timing(config, [n for n, t in timing.items() if t])
    if _shuffled(config):
        return
    seconds = load()
    per_module: dict[tuple, float] = {}
    for item in items:
        key = (timing[item.nodeid], module(item.nodeid))
        per_module[key] = per_module.get(key, 0.0) + seconds.get(item.nodeid, 0.0)

    def order(item):
        key = (timing[item.nodeid], module(item.nodeid))
        # the module's position is its total, then its name, so that a module's tests
        # stay together when totals tie
        return (not key[0], -per_module[key], key[1], -seconds.get(item.nodeid, 0.0))

    # sort is stable: equal keys keep the order the earlier hooks left
    items.sort(key=order)


def _shuffled(config) -> bool:
    """True when the user asked pytest-random-order for a shuffled order (``stability``
    does, to run the tests in another order each time): that order is kept."""
    if not config.pluginmanager.hasplugin("random_order"):
        return False
    try:
        from random_order.config import Config
    except ImportError:  # pragma: no cover - another layout of the plugin
        return False
    return bool(Config(config).is_enabled)


def module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _publish_timing(config, ids: list[str]) -> None:
    """A worker tells the controller's scheduler which tests are timing tests (it has the
    markers and the registry; the controller sees node IDs only): one file per worker in
    the run's lock folder, written whole before xdist reports the collection."""
    folder, worker = shared_folder(config), os.environ.get("PYTEST_XDIST_WORKER")
    if folder is None or worker is None:
        return
    path = Path(folder) / f"timing-{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(ids)))
    os.replace(tmp, path)


def _timing_ids(config) -> set[str]:
    folder = shared_folder(config)
    if folder is None:
        return set()
    return set().union(*(json.loads(p.read_text()) for p in Path(folder).glob("timing-*.json")))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist (controller): under ``--dist load``, its load scheduling with module affinity."""
    if not _distributes(config):
        return None
    from xdist.scheduler import LoadScheduling

    class ModuleAffinity(LoadScheduling):
        """xdist's LoadScheduling, except which pending tests a worker is sent.

        * While timing tests are pending, a worker is sent only timing tests: one that
          started a long test instead would hold the other worker's next timing test (which
          runs alone) until it ends.
        * Of those, one of the module the worker was last sent, else the first in the
          collection order whose module no other worker has started; a worker that has none
          is sent nothing until the other worker finishes a test (its timing test would wait
          for the lock anyway). Nor is it sent the first test after them while another worker
          still holds timing tests it can run (a worker runs a test only once it knows the
          next: one that holds a single test waits for another, or for the end of the run).
        * After the timing tests, the same preference, and when every pending test belongs
          to another worker's module, the first pending test: no worker waits while tests
          are pending.
        """

        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.owner: dict[str, object] = {}
            self.last: dict[object, str] = {}
            self.timing: set[str] | None = None

        def _send_tests(self, node, num):
            assert self.collection is not None
            if self.timing is None:
                self.timing = _timing_ids(self.config)
            picked: list[int] = []
            while len(picked) < num and (index := self._pick(node, picked)) is not None:
                picked.append(index)
                self.owner.setdefault(module(self.collection[index]), node)
                self.last[node] = module(self.collection[index])
            if not picked:
                return
            chosen = set(picked)
            self.pending[:] = [i for i in self.pending if i not in chosen]
            self.node2pending[node].extend(picked)
            node.send_runtest_some(picked)

        def _pick(self, node, picked: list[int]) -> int | None:
            """The next test for ``node`` (``picked``: chosen for it in this round), or
            None: the rules in the class docstring."""
            pending = [i for i in self.pending if i not in picked]
            timing_left = [i for i in pending if self.collection[i] in self.timing]
            holds = self._holds_timing(node) or any(self.collection[i] in self.timing
                                                    for i in picked)
            if not timing_left and not holds \
                    and any(self._holds_timing(other) and len(self.node2pending[other]) > 1
                            for other in self.nodes if other is not node):
                # another worker's last timing tests are still queued: a test sent here
                # would start between two of them and hold the next one as long as it runs.
                # Not where that worker holds one test only: it cannot start it before it is
                # sent another or the run ends, and with nothing running nothing completes
                # to send it one (one timing test and one other test would wait forever)
                return None
            candidates = timing_left or pending
            # the module the worker ran last first: in a shuffled order too, its tests run
            # back to back and the module's fixtures are set up once
            last = self.last.get(node)
            for index in candidates:
                if module(self.collection[index]) == last:
                    return index
            for index in candidates:
                if self.owner.get(module(self.collection[index]), node) is node:
                    return index
            return candidates[0] if candidates and not timing_left else None

        def schedule(self):
            super().schedule()
            self._unstick()
            if not self.pending:
                for node in self.nodes:
                    if not node.shutting_down:
                        node.shutdown()

        def _unstick(self):
            # The rules above may send nothing, on the promise that a running worker's next
            # completion asks again. A worker runs a test only once it knows the next one (or
            # is shut down), so while tests are pending and no worker holds two, nothing runs
            # and nothing completes: the run waits forever (two timing tests of one module on
            # two workers did: the second belongs to the module's worker, which holds one).
            # Then the next pending test goes to its module's worker, else to the busiest.
            while self.pending and all(len(self.node2pending[n]) < 2 for n in self.nodes
                                       if not n.shutting_down):
                index = self.pending.pop(0)
                live = [n for n in self.nodes if not n.shutting_down]
                if not live:
                    self.pending.insert(0, index)
                    return
                owner = self.owner.get(module(self.collection[index]))
                node = owner if owner in live else max(live, key=lambda n: len(self.node2pending[n]))
                self.owner.setdefault(module(self.collection[index]), node)
                self.last[node] = module(self.collection[index])
                self.node2pending[node].append(index)
                node.send_runtest_some([index])

        def _holds_timing(self, node) -> bool:
            return any(self.collection[i] in self.timing for i in self.node2pending[node])

        def remove_node(self, node):
            # a crashed worker's modules go to whoever asks next (xdist re-queues its tests)
            self.owner = {m: n for m, n in self.owner.items() if n is not node}
            self.last.pop(node, None)
            return super().remove_node(node)

        def mark_test_complete(self, node, item_index, duration=0):
            super().mark_test_complete(node, item_index, duration)
            # a worker sent nothing above cannot start its last test (a worker runs a test
            # once it knows the next one) or ask again: look at it on every completion
            for other in self.nodes:
                if other is not node and len(self.node2pending[other]) < 2:
                    self.check_schedule(other)
            self._unstick()

    return ModuleAffinity(config, log)


class _Recorder:
    """Each test's setup + call + teardown seconds, on the controller (xdist workers'
    reports arrive there too); registered per config, so a nested pytester session keeps
    its own."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The controller (or a run without xdist) keeps the durations beside the claims report."""
    config = session.config
    if getattr(config, "workerinput", None) is not None or config.option.collectonly:
        return
    if STATE in config.stash and not state(config).collected:
        return        # no claim test ran (the harness's own tests): keep the last run's file
    write(config, report_dir(config))
    _merge_local(config)


def write(config, folder: Path) -> Path | None:
    """The durations this session measured, as ``folder/durations.json``."""
    rec = config.stash.get(_recorder_key, None)
    if rec is None:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / FILE
    path.write_text(json.dumps(
        {"durations": {k: round(v, 2) for k, v in sorted(rec.seconds.items())}},
        indent=1) + "\n")
    return path


def _merge_local(config) -> None:
    """Fold this run's durations into this machine's file (a test it did not run keeps its
    last duration), written whole and atomically; a cache that cannot be written is left."""
    rec = config.stash.get(_recorder_key, None)
    if rec is None or not rec.seconds or Path(config.rootpath) != ROOT:
        return        # a run of another tree (the self-tests' nested runs) is not this suite
    path = local_file()
    merged = {**_read(path), **{k: round(v, 2) for k, v in rec.seconds.items()}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{FILE}.{os.getpid()}")
        tmp.write_text(json.dumps({"durations": dict(sorted(merged.items()))}, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
