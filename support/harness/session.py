"""The run's state: what the claims plugin, the timing lock and the scheduler share.

One :class:`ClaimsState` per pytest config, stashed on it (as pytest-xdist and
pytest-benchmark keep theirs): the registry and expectations this session loaded, every
variant record of the run, what the workers collected and the environments they ran in.
The plugins read it through the functions below and never import each other, so the order
in which pytest loads them does not matter.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.harness import device_marks
from support.rules import expectations
from support.rules import entries as reg

RECORD_KEY = "claim_record"
STATE = pytest.StashKey["ClaimsState"]()
# the folder the controller made for its workers' locks and lists (None without xdist):
# set by support/harness/timing_lock.py, read by the scheduler
LOCK_FOLDER = pytest.StashKey[str]()
# where the run's concrete data comes from ({"source": named|cache|bundled, "file": ...}):
# set by support/harness/concrete_data.py, written into the report's environment
DATA_SOURCE = pytest.StashKey[dict]()
# the negative control a test item runs under (support/harness/control_options.py)
CONTROL = pytest.StashKey[str]()
CONTROL_PARAM = "claims_control"


def variant_id(item) -> str:
    """The test's own parameter id: what its figures are looked up by and its expectations
    keyed on (without the ``control=NAME`` parameter a negative control adds)."""
    cs = getattr(item, "callspec", None)
    if cs is None:
        return ""
    if CONTROL_PARAM not in cs.params:
        return cs.id
    tag = f"control={cs.params[CONTROL_PARAM]}"
    return "-".join(p.strip("-") for p in cs.id.split(tag) if p.strip("-"))


class ClaimsState:
    """Controller-side store of every variant record of the run."""

    def __init__(self, config):
        self.config = config
        root = Path(config.rootpath)
        reg_dir = config.getini("claims_folder")
        exp_file = config.getini("claims_expectations")
        self.registry = reg.load_entries(root / reg_dir if reg_dir else reg.ENTRIES_DIR)
        self.expectations = expectations.load_expectations(
            root / exp_file if exp_file else expectations.EXPECTATIONS, registry=self.registry)
        self.records: list[dict] = []
        self.collected: dict[str, list[str]] = {}
        self.environments: dict[str, dict] = {}      # xdist worker id -> its fingerprint
        self.started = time.time()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        # registered per config, so a nested in-process session (pytester) keeps its own
        # records; the controller also receives xdist workers' reports through this hook.
        # The record is taken off the report so that --junitxml shows only the properties;
        # a worker leaves it on, since xdist sends the report to the controller after this.
        if hasattr(self.config, "workerinput"):
            return
        keep = []
        for key, value in getattr(report, "user_properties", []):
            if key == RECORD_KEY:
                self.records.append(json.loads(value))
            else:
                keep.append((key, value))
        report.user_properties = keep


def state(config) -> ClaimsState:
    return config.stash[STATE]


def registry_of(config) -> dict:
    """The registry this session loaded (claim ID -> Claim)."""
    return state(config).registry


def claim_ids(item) -> list[str]:
    return device_marks.mark_args(item, "claim")


def is_timing(item) -> bool:
    """A test that times something: one of its claims is a timing claim (kind d) or it
    carries ``@pytest.mark.timing``. It runs while no other test runs."""
    if item.get_closest_marker("timing"):
        return True
    registry = registry_of(item.config)
    return any(registry[c].kind == "d" for c in claim_ids(item) if c in registry)


def one_thread(item) -> bool:
    """A timing test whose claim's entry times it on one thread (``threads = { count =
    "one", ... }``)."""
    registry = registry_of(item.config)
    return any(registry[c].threads.get("count") == "one"
               for c in claim_ids(item) if c in registry)


def shared_folder(config) -> str | None:
    """The folder the controller made for its workers' locks (None without xdist)."""
    return config.stash.get(LOCK_FOLDER, None)


def report_dir(config) -> Path:
    opt = config.getoption("--claims-report")
    return Path(opt) if opt else Path(config.rootpath) / "reports"
