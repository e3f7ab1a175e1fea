"""The claims plugin: turns claim tests into verdicts and the run into a report.

A claim test carries ``@pytest.mark.claim("ID")`` and measures through the ``claim``
fixture (:class:`support.harness.recorder.ClaimRecorder`). How a variant's verdict follows from how
its test ended, and a claim's from its variants, is :mod:`support.rules.verdicts`; this module only
wires those rules into pytest:

* a verdict that must be expected (fails, drift, error) and that ``claims/expectations.toml``
  does not name fails the test, with the figure that moved or the message that did not
  match; an expected failure is reported as xfailed; a claim expected to fail that holds is
  an unexpected pass and fails the test;
* a test using pytest-benchmark's ``benchmark`` fixture informs its claim and decides
  nothing; where benchmarks are disabled (``-n``, ``--benchmark-disable``) it is skipped with
  that reason;
* every record travels as a user property (so xdist workers' records reach the controller),
  and ``--junitxml`` gets each test's claim ID, verdict, stated and measured figures.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from support.harness import device_marks, shutdown
from support.harness.recorder import ClaimRecorder, NotApplicable
from support.harness.session import (CONTROL, CONTROL_PARAM, DATA_SOURCE, RECORD_KEY, STATE,
                                     ClaimsState, claim_ids, report_dir, state as _state,
                                     variant_id)
from support.machine import fingerprint
from support.rules import expectations
from support.rules import entries as reg
from support.rules import verdicts

_recorder_key = pytest.StashKey[ClaimRecorder]()
_tier_key = pytest.StashKey[str]()
_summary_key = pytest.StashKey[tuple]()


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
    group.addoption("--fresh", action="store_true",
                    help="recompute shared expensive results instead of reading the cache")
    group.addoption("--notes", action="append", default=[], metavar="PATH",
                    help="a copy of the notes (plain text or Markdown; repeatable): the run "
                         "lists the claims whose sentence changed or vanished there "
                         "(default: ../shared/notes beside the checkout, where present)")
    parser.addini("claims_tiers", "tiers run by default", default="fast,slow,gpu")
    parser.addini("claims_folder", "the claims folder whose lecture/ and sheet/ hold the "
                  "section files (default: claims)", default="")
    parser.addini("claims_expectations", "the expectations file (default: claims/expectations.toml)",
                  default="")


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(id, ...): the catalogue ID(s) this test verifies")
    # tests that share the cached concrete experiments group on one xdist worker; the mark
    # must also be known when the run has no xdist (-n 0 or -p no:xdist, --strict-markers)
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker with its group")
    for tier in reg.TIERS:
        config.addinivalue_line("markers", f"{tier}: tier {tier} (set from the claims' entries)")
    missing = [p for p in config.getoption("--notes") if not Path(p).is_file()]
    if missing:
        raise pytest.UsageError(f"--notes: no such file: {', '.join(missing)}")
    try:
        state = ClaimsState(config)
    except reg.EntryError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = state
    config.pluginmanager.register(state, f"claims-state-{id(config)}")


def _tiers(config) -> set[str]:
    raw = config.getoption("--tier") or config.getini("claims_tiers")
    tiers = {t.strip() for t in raw.split(",") if t.strip()}
    bad = tiers - set(reg.TIERS)
    if bad:
        raise pytest.UsageError(f"unknown tier(s) {sorted(bad)}; known: {', '.join(reg.TIERS)}")
    return tiers


def _tier(item, ids: list[str], registry: dict) -> str:
    explicit = [t for t in reg.TIERS if item.get_closest_marker(t)]
    if explicit:
        return explicit[-1]
    if ids and all(c in registry for c in ids):
        return max((registry[c].tier for c in ids), key=reg.TIERS.index)
    return "fast"


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
    for item in items:
        ids = claim_ids(item)
        for cid in ids:
            (collected if cid in state.registry else unknown).setdefault(cid, []).append(item.nodeid)
            item.extra_keyword_matches.add(cid)
        tier = _tier(item, ids, state.registry)
        item.add_marker(getattr(pytest.mark, tier))
        item.stash[_tier_key] = tier
        if tier not in tiers or (wanted and not (wanted & set(ids))):
            drop.append(item)
        else:
            keep.append(item)
    if unknown:
        lines = [f"{cid}: {', '.join(nodes)}" for cid, nodes in sorted(unknown.items())]
        raise pytest.UsageError("claim marker(s) name IDs that no claim entry has:\n  "
                                + "\n  ".join(lines))
    state.collected = collected
    if hasattr(config, "workeroutput"):
        config.workeroutput["claims_collected"] = json.dumps(collected)
        # the environment the tests run in is the worker's (its BLAS, its threads), taken
        # before any test can change a switch; the controller need not import the frameworks
        config.workeroutput["claims_environment"] = json.dumps(fingerprint.fingerprint())
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist: merge what a worker collected (the controller collects nothing itself)."""
    out = getattr(node, "workeroutput", {}) or {}
    if "claims_collected" in out:
        state = _state(node.config)
        for cid, nodes in json.loads(out["claims_collected"]).items():
            have = state.collected.setdefault(cid, [])
            have.extend(n for n in nodes if n not in have)
    if "claims_environment" in out:
        _state(node.config).environments[node.gateway.id] = json.loads(out["claims_environment"])


# --------------------------------------------------------------------------- running
def _benchmarks_off(config) -> str:
    """Why pytest-benchmark will not time anything in this run ("" if it will)."""
    if not config.pluginmanager.hasplugin("benchmark"):
        return "pytest-benchmark is not installed"
    if config.getoption("benchmark_disable", False) and not config.getoption("benchmark_enable", False):
        return "benchmarks are disabled (--benchmark-disable)"
    if config.getoption("dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER"):
        return ("pytest-benchmark turns itself off under xdist (-n); run the bench tier in one "
                "process: python -m pytest --tier bench -n 0")
    return ""


_variant_id = variant_id


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    ids = claim_ids(item)
    if not ids:
        return
    state = _state(item.config)
    item.stash[_recorder_key] = ClaimRecorder(ids, state.registry, _variant_id(item))
    for cid in ids:
        applies = state.registry[cid].applies
        why = reg.version_mismatch(applies.get("versions", {}))
        if why:
            raise NotApplicable(f"{cid} applies to {applies['versions']}; {why}")
    if "benchmark" in getattr(item, "fixturenames", ()):
        off = _benchmarks_off(item.config)
        if off:
            pytest.skip(off)


@pytest.fixture
def claim(request) -> ClaimRecorder:
    """The recorder of the running claim test (see :class:`support.harness.recorder.ClaimRecorder`)."""
    rec = request.node.stash.get(_recorder_key, None)
    if rec is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the claim fixture but has no "
                                "@pytest.mark.claim(...) marker")
    return rec


def _params(item) -> dict:
    cs = getattr(item, "callspec", None)
    if cs is None:
        return {}
    return {k: (v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
            for k, v in cs.params.items() if k != CONTROL_PARAM}


def _short(report, call) -> str:
    if call.excinfo is not None:
        return call.excinfo.exconly().strip()
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
    return (crash or str(report.longrepr or "")).strip()


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    rec = item.stash.get(_recorder_key, None)
    if rec is None:
        return
    if call.when == "teardown":
        if report.failed:  # a teardown error is still an error of the claim test
            _attach(item, report, rec, verdicts.Outcome("error", _short(report, call)),
                    teardown=True)
        return
    if call.when == "setup" and report.passed:
        return
    o = verdicts.variant_outcome(
        when=call.when, passed=report.passed, skipped=report.skipped,
        skip_reason=_skip_reason(report) if report.skipped else "",
        not_applicable=call.excinfo is not None and call.excinfo.errisinstance(NotApplicable),
        # pytest.raises' "DID NOT RAISE" and pytest.fail() say the sentence is contradicted
        # (a stated error that does not come), as a failed assert does
        assertion=call.excinfo is not None and call.excinfo.errisinstance(
            (AssertionError, pytest.fail.Exception)),
        halted=call.excinfo is not None and call.excinfo.errisinstance(verdicts.BrokenBound),
        message=_short(report, call) if report.failed else "",
        measurements=rec.measurements,
        benchmark="benchmark" in getattr(item, "fixturenames", ()))
    _attach(item, report, rec, o)


def _attach(item, report, rec: ClaimRecorder, o: verdicts.Outcome, teardown=False):
    state = _state(item.config)
    variant = _variant_id(item)
    matched, applied, problems = {}, {}, []
    for cid in rec.ids:
        entries = expectations.find_expectations(state.expectations, cid, variant)
        applied[cid] = [e.label() for e in entries]
        if teardown:
            continue
        hits, problem = verdicts.unexpected(o, entries)
        matched[cid] = [{"verdict": e.verdict, "reason": e.reason, "label": e.label()}
                        for e in hits]
        if problem:
            problems.append(f"{cid}: {problem}")
    if not teardown:
        _set_outcome(item, report, o, matched, problems)
    payload = {
        "nodeid": item.nodeid, "ids": rec.ids, "variant": variant, "params": _params(item),
        "verdict": o.verdict, "reason": o.reason, "figures_decisive": list(o.figures),
        "expected": matched, "expectations_applied": applied,
        "unexpected": problems, "devices": device_marks.item_devices(item),
        "role": "benchmark" if "benchmark" in getattr(item, "fixturenames", ()) else "test",
        "duration": getattr(report, "duration", 0.0),
        "tier": item.stash.get(_tier_key, "fast"), **rec.payload(),
    }
    if CONTROL in item.stash:
        payload["control"] = item.stash[CONTROL]
    report.user_properties.append((RECORD_KEY, json.dumps(payload, default=repr)))
    # --junitxml writes the properties of the teardown report, which copies the item's
    figs = {n: m for n, m in rec.measurements.items() if "outcome" in m}
    for cid in rec.ids:
        item.user_properties += [
            ("claim", cid), ("verdict", o.verdict),
            ("stated", json.dumps({n: m.get("rule", "") for n, m in figs.items()})),
            ("measured", json.dumps({n: m["value"] for n, m in rec.measurements.items()},
                                    default=repr))]


def _set_outcome(item, report, o: verdicts.Outcome, matched: dict, problems: list[str]):
    """Make pytest's outcome agree with the verdict and the expectations."""
    if problems:
        text = "\n".join(problems)
        if report.failed:
            report.sections.append(("claims: not as expected", text))
        else:
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}\n{text}"
        return
    if o.verdict in ("fails", "error") and all(matched.values()):
        report.outcome = "skipped"
        report.wasxfail = "; ".join(f"known {o.verdict} of {cid}: {m[0]['reason']}"
                                    for cid, m in matched.items())


# --------------------------------------------------------------------------- reporting
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    state = _state(config)
    if not state.collected and not state.records:
        # no claim test in what was collected (the harness's own tests, support/tests): no
        # claims report, so that this run does not replace the last run's
        return
    from support.reports import report
    data = report.build(state, elapsed=time.time() - state.started)
    if DATA_SOURCE in config.stash:
        data["environment"]["concrete_data"] = config.stash[DATA_SOURCE]
    data["notes"] = _notes_check(config, state.registry)
    data["selection"] = _selection(config)
    out = report_dir(config)
    previous = out / "controls" / "controls.json"
    if previous.is_file() and not config.getoption("--control") \
            and not config.getoption("--controls"):
        # the last negative-controls run beside this report: each holding claim is marked
        # controlled or not, with that run's commit (a control run is no claims report)
        from support.rules.control_summary import annotate
        annotate(data, json.loads(previous.read_text()))
    paths = report.write(data, out)
    config.stash[_summary_key] = (data, paths)
    if device_marks.REQUIRED and data["summary"].get("partial"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _selection(config) -> dict:
    """What this run selected: its tiers (and the default ones), and anything that narrowed
    them (--claim, -k, -m, test paths, --lf). A run that narrows leaves claims not run; the
    report, ``keep``, ``diff`` and the errata say so (support.reports.runs.selection)."""
    # test paths named on the command line, other than the default ones (pytest's testpaths)
    testpaths = {str((Path(config.rootpath) / p).resolve()) for p in config.getini("testpaths")}
    named = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    given = [a for a in config.args if named
             and str(Path(config.invocation_params.dir, a).resolve()) not in testpaths]
    default = [t.strip() for t in config.getini("claims_tiers").split(",") if t.strip()]
    return {"tiers": [t for t in reg.TIERS if t in _tiers(config)],
            "default_tiers": [t for t in reg.TIERS if t in default],
            "claims": sorted(config.getoption("--claim") or []),
            "keyword": config.getoption("keyword") or "",
            "markexpr": config.getoption("markexpr") or "",
            "paths": given,
            "last_failed": bool(config.getoption("lf", False))}


def _notes_check(config, registry) -> dict:
    """Where each claim's sentence is in the notes given (--notes), and which changed."""
    from support.notes import locate as notes
    paths = [Path(p) for p in config.getoption("--notes")] or notes.default_paths(
        Path(config.rootpath))
    if not paths:
        return {"paths": [], "checked": False,
                "reason": "no copy of the notes given (--notes PATH)"}
    locs = notes.locate_all(registry, paths)
    changed = [loc.as_json() for loc in locs if loc.status not in ("found", "moved")]
    moved = [loc.as_json() for loc in locs if loc.status == "moved"]
    return {"paths": [str(p) for p in paths], "checked": True, "located":
            sum(loc.found for loc in locs), "changed": changed, "moved": moved}


def pytest_unconfigure(config):
    # every process of the run (xdist's workers too) drops the frameworks' shutdown reports
    # that follow its exit (support/harness/shutdown.py)
    shutdown.arm()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput") or _summary_key not in config.stash:
        return
    from support.reports import report
    data, paths = config.stash[_summary_key]
    report.terminal(terminalreporter, data, paths)
