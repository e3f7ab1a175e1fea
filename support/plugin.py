"""The claims plugin: turns claim tests into verdicts and the run into a report.

A claim test carries ``@pytest.mark.claim("ID")`` and measures through the ``claim``
fixture::

    @pytest.mark.claim("TAPE-07")
    def test_backward_twice_doubles_the_gradient(claim):
        ratio = ...
        claim.record("ratio", ratio, stated=2.0, tol="exact")
        assert ratio > 1.5          # the qualitative claim itself

The variant verdict follows from how the test ends:

* an ``AssertionError``               -> ``fails`` (the claim is contradicted)
* any other exception                  -> ``error``
* ``claim.not_applicable(reason)``     -> ``not-applicable``; ``pytest.skip`` -> ``skipped``
* it returns and recorded nothing      -> ``error`` (a claim test must measure something)
* it returns and a recorded figure is
  outside its tolerance of the stated   -> ``drift``; otherwise ``holds``

Then the expectations file is consulted: a ``fails`` that is expected is reported by
pytest as xfailed (the run passes), an unexpected ``fails`` or ``error`` fails the test,
and a claim expected to fail that holds fails the test as an unexpected pass.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from . import registry as reg
from . import tolerances

RECORD_KEY = "claim_record"
NA_PREFIX = "not-applicable: "
_collected_key = pytest.StashKey[dict]()
_state_key = pytest.StashKey["ClaimsState"]()


# --------------------------------------------------------------------------- recorder
def _jsonable(value):
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    if hasattr(value, "item") and hasattr(value, "numel"):  # a torch scalar tensor
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class ClaimRecorder:
    """What one test (one variant) measured. Obtained through the ``claim`` fixture."""

    def __init__(self, ids: list[str], registry: dict):
        self.ids = ids
        self._registry = registry
        self.measurements: dict[str, dict] = {}
        self.notes: list[str] = []

    def record(self, name: str, value, stated=None, tol=None, unit: str = "",
               reduce: str | None = None, note: str = ""):
        """Record a measured value (and the figure the notes state for it, if any).

        ``tol`` is a key of :data:`support.tolerances.TABLE` or a ``Tol(..., why=...)``.
        ``reduce="max"``/``"min"`` keeps the worst value over repeated calls (properties).
        Returns ``value`` so it can be used inline.
        """
        value = _jsonable(value)
        prev = self.measurements.get(name)
        if prev is not None and reduce in ("max", "min"):
            pick = max if reduce == "max" else min
            value = pick(prev["value"], value)
            prev["count"] = prev.get("count", 1) + 1
        entry = {"value": value, "unit": unit}
        if prev is not None and reduce:
            entry["count"] = prev.get("count", 1)
        if note:
            entry["note"] = note
        if stated is not None:
            t = tolerances.resolve(tol)
            entry["stated"] = stated if isinstance(stated, (str, bool)) else _jsonable(stated)
            entry["tolerance"] = t.as_dict()
            num = _number(value)
            if isinstance(stated, bool) or num is None:
                entry["within"] = value == stated
            else:
                entry["within"] = tolerances.within(num, stated, t)
        self.measurements[name] = entry
        return value

    def note(self, text: str) -> None:
        """A sentence for the report (e.g. which version behaved how)."""
        self.notes.append(str(text))

    def not_applicable(self, reason: str):
        """End the test: the claim does not apply here (an API absent in this version...)."""
        pytest.skip(NA_PREFIX + reason)

    def payload(self) -> dict:
        return {"measurements": self.measurements, "notes": self.notes}


# --------------------------------------------------------------------------- state
class ClaimsState:
    """Controller-side store of every variant record of the run."""

    def __init__(self, config):
        self.config = config
        root = Path(config.rootpath)
        reg_dir = config.getini("claims_registry")
        exp_file = config.getini("claims_expectations")
        self.registry = reg.load_registry(root / reg_dir if reg_dir else reg.REGISTRY_DIR)
        self.expectations = reg.load_expectations(root / exp_file if exp_file else reg.EXPECTATIONS,
                                                  registry=self.registry)
        self.records: list[dict] = []
        self.collected: dict[str, list[str]] = {}
        self.started = time.time()

    def pytest_runtest_logreport(self, report):
        # registered per config, so a nested in-process session (pytester) keeps its own
        # records; the controller also receives xdist workers' reports through this hook
        for key, value in getattr(report, "user_properties", []):
            if key == RECORD_KEY:
                self.records.append(json.loads(value))


def _state(config) -> ClaimsState:
    return config.stash[_state_key]


# --------------------------------------------------------------------------- options
def pytest_addoption(parser):
    group = parser.getgroup("claims", "executable-specification claims")
    group.addoption("--claims-report", default=None, metavar="DIR",
                    help="folder for claims.json and claims.md (default: reports/)")
    group.addoption("--tier", default=None, metavar="LIST",
                    help="comma-separated tiers to run: fast,slow,gpu,bench "
                         "(default: the claims_tiers ini value, fast,slow,gpu)")
    group.addoption("--claim", action="append", default=[], metavar="ID",
                    help="run only the tests of this claim ID (repeatable)")
    group.addoption("--concrete-data", default=None, metavar="PATH",
                    help="the concrete data (.xls/.csv, or a folder holding one)")
    group.addoption("--require-data", action="store_true",
                    help="missing concrete data is an error, not a skip")
    group.addoption("--fresh", action="store_true",
                    help="recompute shared expensive results instead of reading the cache")
    parser.addini("claims_tiers", "tiers run by default", default="fast,slow,gpu")
    parser.addini("claims_registry", "folder of the claim registry (default: claims/registry)", default="")
    parser.addini("claims_expectations", "the expectations file (default: claims/expectations.toml)",
                  default="")


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(id, ...): the catalogue ID(s) this test verifies")
    for tier in reg.TIERS:
        config.addinivalue_line("markers", f"{tier}: tier {tier} (set from the registry)")
    try:
        state = ClaimsState(config)
    except reg.RegistryError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_state_key] = state
    config.pluginmanager.register(state, f"claims-state-{id(config)}")


def _tiers(config) -> set[str]:
    raw = config.getoption("--tier") or config.getini("claims_tiers")
    tiers = {t.strip() for t in raw.split(",") if t.strip()}
    bad = tiers - set(reg.TIERS)
    if bad:
        raise pytest.UsageError(f"unknown tier(s) {sorted(bad)}; known: {', '.join(reg.TIERS)}")
    return tiers


def claim_ids(item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("claim"):
        for cid in mark.args:
            if cid not in ids:
                ids.append(cid)
    return ids


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    state = _state(config)
    unknown: dict[str, list[str]] = {}
    collected: dict[str, list[str]] = {}
    tiers = _tiers(config)
    wanted = set(config.getoption("--claim"))
    bad_wanted = wanted - set(state.registry)
    if bad_wanted:
        raise pytest.UsageError(f"--claim names unknown ID(s): {sorted(bad_wanted)}")
    keep, drop = [], []
    order = {t: i for i, t in enumerate(reg.TIERS)}
    for item in items:
        ids = claim_ids(item)
        for cid in ids:
            if cid not in state.registry:
                unknown.setdefault(cid, []).append(item.nodeid)
            else:
                collected.setdefault(cid, []).append(item.nodeid)
            item.extra_keyword_matches.add(cid)
        explicit = [t for t in reg.TIERS if item.get_closest_marker(t)]
        if explicit:
            tier = explicit[-1]
        elif ids and all(c in state.registry for c in ids):
            tier = max((state.registry[c].tier for c in ids), key=order.__getitem__)
        else:
            tier = "fast"
        item.add_marker(getattr(pytest.mark, tier))
        item.stash[_tier_key] = tier
        if tier not in tiers or (wanted and not (wanted & set(ids))):
            drop.append(item)
        else:
            keep.append(item)
    if unknown:
        lines = [f"{cid}: {', '.join(nodes)}" for cid, nodes in sorted(unknown.items())]
        raise pytest.UsageError("claim marker(s) name IDs missing from the registry:\n  "
                                + "\n  ".join(lines))
    config.stash[_collected_key] = collected
    state.collected = collected
    if hasattr(config, "workeroutput"):
        config.workeroutput["claims_collected"] = json.dumps(collected)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_tier_key = pytest.StashKey[str]()


def collected_claims(config) -> dict[str, list[str]]:
    """Claim ID -> node ids of every test collected for it (before deselection)."""
    return config.stash.get(_collected_key, {})


def pytest_testnodedown(node, error):
    """xdist: merge what a worker collected (the controller collects nothing itself)."""
    out = getattr(node, "workeroutput", {}) or {}
    if "claims_collected" in out:
        state = _state(node.config)
        for cid, nodes in json.loads(out["claims_collected"]).items():
            have = state.collected.setdefault(cid, [])
            have.extend(n for n in nodes if n not in have)


# --------------------------------------------------------------------------- running
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    ids = claim_ids(item)
    if not ids:
        return
    state = _state(item.config)
    item.stash[_recorder_key] = ClaimRecorder(ids, state.registry)
    for cid in ids:
        applies = state.registry[cid].applies
        why = reg.version_mismatch(applies.get("versions", {}))
        if why:
            pytest.skip(f"{NA_PREFIX}{cid} applies to {applies['versions']}; {why}")


_recorder_key = pytest.StashKey[ClaimRecorder]()


@pytest.fixture
def claim(request) -> ClaimRecorder:
    """The recorder of the running claim test (see :class:`ClaimRecorder`)."""
    rec = request.node.stash.get(_recorder_key, None)
    if rec is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the claim fixture but has no "
                                "@pytest.mark.claim(...) marker")
    return rec


def _variant(item) -> tuple[str, dict]:
    cs = getattr(item, "callspec", None)
    if cs is None:
        return "", {}
    return cs.id, {k: (v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
                   for k, v in cs.params.items()}


def _short(longrepr) -> str:
    if longrepr is None:
        return ""
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    if crash:
        return crash.strip()
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr).strip().splitlines()[-1] if str(longrepr).strip() else ""


def _drifted(measurements: dict) -> list[str]:
    return [n for n, m in measurements.items() if m.get("within") is False]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    rec = item.stash.get(_recorder_key, None)
    if rec is None:
        return
    if call.when == "teardown":
        if report.failed:  # a teardown error is still an error of the claim test
            _attach(item, report, rec, "error", _short(report.longrepr), teardown=True)
        return
    if call.when == "setup" and report.passed:
        return
    reason = ""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(NA_PREFIX):
            verdict, reason = "not-applicable", reason[len(NA_PREFIX):]
        else:
            verdict = "skipped"
    elif report.failed:
        if call.excinfo is not None and call.excinfo.errisinstance(AssertionError) \
                and call.when == "call":
            verdict = "fails"
        else:
            verdict = "error"
        reason = _short(report.longrepr)
    else:
        if not rec.measurements:
            verdict = "error"
            reason = "the claim test ended without recording a measurement"
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: {reason} (use claim.record(...))"
        else:
            off = _drifted(rec.measurements)
            verdict = "drift" if off else "holds"
            if off:
                reason = "outside tolerance: " + ", ".join(
                    f"{n} = {_fmt(rec.measurements[n]['value'])} vs stated "
                    f"{rec.measurements[n]['stated']}" for n in off)
    _attach(item, report, rec, verdict, reason)


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.4g}"
    return str(v)


def _attach(item, report, rec: ClaimRecorder, verdict: str, reason: str, teardown=False):
    state = _state(item.config)
    variant, params = _variant(item)
    expected_info = {}
    for cid in rec.ids:
        exp = reg.find_expectation(state.expectations, cid, variant)
        if exp is None:
            continue
        expected_info[cid] = {"verdict": exp.verdict, "reason": exp.reason, "label": exp.label()}
        if teardown:
            continue
        if verdict == "fails" and exp.verdict == "fails":
            report.outcome = "skipped"
            report.wasxfail = f"known failure of {cid}: {exp.reason}"
        elif verdict in ("holds", "drift") and exp.verdict == "fails":
            report.outcome = "failed"
            report.longrepr = (f"UNEXPECTED PASS of {cid}: the expectations file says it fails "
                               f"({exp.reason}) but it {verdict} here. Measured: "
                               + json.dumps({k: v['value'] for k, v in rec.measurements.items()}))
    payload = {
        "nodeid": item.nodeid,
        "ids": rec.ids,
        "variant": variant,
        "params": params,
        "verdict": verdict,
        "reason": reason,
        "expected": expected_info,
        "duration": getattr(report, "duration", 0.0),
        "tier": item.stash.get(_tier_key, "fast"),
        **rec.payload(),
    }
    report.user_properties.append((RECORD_KEY, json.dumps(payload, default=repr)))


# --------------------------------------------------------------------------- reporting
def _report_dir(config) -> Path:
    opt = config.getoption("--claims-report")
    return Path(opt) if opt else Path(config.rootpath) / "reports"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    state = _state(config)
    from . import report
    data = report.build(state, elapsed=time.time() - state.started)
    out = _report_dir(config)
    paths = report.write(data, out)
    config.stash[_summary_key] = (data, paths)


_summary_key = pytest.StashKey[tuple]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput") or _summary_key not in config.stash:
        return
    from . import report
    data, paths = config.stash[_summary_key]
    report.terminal(terminalreporter, data, paths)
