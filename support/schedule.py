"""The order tests start in under xdist, so that the workers finish together.

A run under ``-n`` ends when its last worker does. xdist's ``load`` scheduler hands each
worker a chunk of consecutive tests from the collection order and more as it drains; in the
file order the longest tests (the batched concrete experiments, the nested pytest runs of
support/tests) start late and one worker ends ten seconds after the other. So, under
``--dist load`` only, this plugin reorders the collection:

1. timing tests first (support/quiet.py runs each alone): grouped at the start, a timing
   test waits for the other worker's short timing test, not for whatever long test happens
   to run beside it;
2. then the rest, longest first, from the durations of an earlier run
   (``support/resources/durations.json``), so that the last tests to start are short;

and sends tests one at a time (``--maxschedchunk 1`` unless given). Ties keep the collected
order (pytest-random-order's shuffle stays in force among them); a test with no recorded
duration counts as instant. Without xdist the order is left as collected.

Every run writes the durations it measured (setup + call + teardown of each test, seconds) to
``durations.json`` beside claims.json; ``python -m support durations`` copies a run's into
support/resources/ (review the diff: a test that got slower moves up the order).
"""
from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "resources" / "durations.json"
FILE = "durations.json"
_recorder_key = pytest.StashKey["_Recorder"]()


def load(path: Path = DURATIONS) -> dict[str, float]:
    """Test node ID -> seconds; an absent file is no durations (the collected order)."""
    try:
        return json.loads(path.read_text())["durations"]
    except FileNotFoundError:
        return {}


def _distributes(config) -> bool:
    """True on the xdist controller and workers of a ``--dist load`` run."""
    inp = getattr(config, "workerinput", None)
    if inp is not None:
        return inp.get("claims_dist") == "load"
    return config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "load"


def pytest_configure(config):
    if getattr(config, "workerinput", None) is None:
        rec = config.stash[_recorder_key] = _Recorder()
        config.pluginmanager.register(rec, f"claims-durations-{id(config)}")
    if _distributes(config) and getattr(config, "workerinput", None) is None \
            and config.getoption("maxschedchunk", None) is None:
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
    from .quiet import is_timing
    seconds = load()
    # sort is stable: equal keys keep the order the earlier hooks left
    items.sort(key=lambda item: (not is_timing(item), -seconds.get(item.nodeid, 0.0)))


class _Recorder:
    """Each test's setup + call + teardown seconds, on the controller (xdist workers'
    reports arrive there too); registered per config, so a nested pytester session keeps
    its own."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration


def write(config, folder: Path) -> Path | None:
    """The durations this session measured, as ``folder/durations.json``."""
    rec = config.stash.get(_recorder_key, None)
    if rec is None:
        return None
    path = Path(folder) / FILE
    path.write_text(json.dumps(
        {"durations": {k: round(v, 2) for k, v in sorted(rec.seconds.items())}},
        indent=1) + "\n")
    return path


def arguments(command: str, parser) -> None:
    parser.add_argument("run", nargs="?", default="reports",
                        help="a run's report folder (holding durations.json; default: reports)")


def run(command: str, args) -> int:
    src = Path(args.run) / FILE
    if not src.is_file():
        print(f"error: {src} does not exist; run the suite first (every run writes it)")
        return 1
    data = json.loads(src.read_text())
    DURATIONS.write_text(json.dumps(data, indent=1) + "\n")
    total = sum(data["durations"].values())
    print(f"{DURATIONS.name}: {len(data['durations'])} tests, {total:.0f} s in all, from {src}")
    return 0
