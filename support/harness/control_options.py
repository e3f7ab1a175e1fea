"""The pytest wiring of negative controls (support/rules/controls.py).

* ``--control NAME`` (repeatable) runs the tests of the named controls' claims under them;
* ``--controls`` runs every test-scope control of the selected claims, each test once under
  each of its controls (and not without one).

A test-scope control becomes a parameter of the claim's test (``[control=NAME]``): applied by
a function-scoped fixture set up before the test's other function-scoped fixtures (module and
session fixtures are set up before it and stay unperturbed), undone after the test, with
every shared result computed afresh and kept nowhere meanwhile
(:func:`support.lab.cache.isolated`). A process-scope control is applied once, when
collection is done and before any test or fixture runs, and never undone: its session is a
process of its own (``python -m support controls`` starts one per such control, with an
empty result cache), where the shared experiments train too rather than in a pool of spawned
processes the patch would not reach, and its results are kept in a folder of the run's own,
never in the user's cache. Either way each record carries the control's name, and
the variant id a test's figures are looked up by stays the test's own.
"""
from __future__ import annotations

import os

import pytest

from support.harness import claim_modules
from support.rules import controls as ctl
from support.harness.session import CONTROL, CONTROL_PARAM as PARAM


def pytest_addoption(parser):
    group = parser.getgroup("claims")
    group.addoption("--control", action="append", default=[], metavar="NAME",
                    help="run the claims' tests under this negative control (repeatable; "
                         "python -m support controls runs them all)")
    group.addoption("--controls", action="store_true",
                    help="run every test-scope negative control of the selected claims")


def pytest_collection(session):
    """Under ``--control``/``--controls``, every control of the suite is registered before any
    test is collected: a control written beside one claim's test may also name a claim whose
    test sits in a module collected earlier (tanh-derivative-approximate, in section 06, names
    AD-02 of section 03), and that test is parametrized when its own module is collected."""
    from support.paths import ROOT
    config = session.config
    # the suite's own claims only: a suite of another root (the harness's self-tests) has its own
    if (config.getoption("--control") or config.getoption("--controls")) \
            and config.rootpath.resolve() == ROOT.resolve():
        claim_modules.discover()


def _wanted(config) -> list[ctl.Control] | None:
    names = config.getoption("--control")
    if not names and not config.getoption("--controls"):
        return None
    unknown = [n for n in names if n not in ctl.CONTROLS]
    if unknown:
        raise pytest.UsageError(f"--control: no control named {', '.join(unknown)} (known: "
                                f"{', '.join(sorted(ctl.CONTROLS)) or 'none'})")
    if names:
        return [ctl.CONTROLS[n] for n in names]
    return [c for c in ctl.CONTROLS.values() if c.scope == "test"]


def _claim_ids(definition) -> list[str]:
    return [cid for m in getattr(definition, "pytestmark", []) if m.name == "claim"
            for cid in m.args]


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc):
    # names are known once the test modules are imported: collection has imported this one
    if metafunc.config.getoption("--control") and any(
            n not in ctl.CONTROLS for n in metafunc.config.getoption("--control")):
        return                              # reported once, at collection's end
    wanted = _wanted(metafunc.config)
    if wanted is None:
        return
    ids = set(_claim_ids(metafunc.function)) | set(_claim_ids(getattr(metafunc, "cls", None)))
    mine = [c for c in wanted if c.scope == "test" and ids & set(c.claims)]
    if not mine:
        return
    # first among the function-scoped fixtures, so that the control is in place before any
    # of them computes what the test measures
    metafunc.fixturenames.insert(0, PARAM)
    metafunc.parametrize(PARAM, [c.name for c in mine], ids=[f"control={c.name}" for c in mine])


@pytest.fixture(autouse=True)
def _claims_control(request):
    """The test-scope control this test runs under, if any (the parameter ``--control`` or
    ``--controls`` adds): applied for the test, undone after it, shared results isolated
    meanwhile. Autouse, so it is set up before the test's other function-scoped fixtures."""
    cs = getattr(request.node, "callspec", None)
    name = cs.params.get(PARAM) if cs is not None else None
    if name is None:
        yield
        return
    from support.lab import cache
    mp = pytest.MonkeyPatch()
    with cache.isolated():
        try:
            _retraced()
            ctl.CONTROLS[name].apply(mp)
            yield
        finally:
            mp.undo()
            _retraced()


def _retraced() -> None:
    """JAX compiles a function once and keeps the program: one jitted before a control would
    run unperturbed under it, one jitted under it would keep the perturbation after it is
    undone. So JAX's caches are cleared on either side of every control, where JAX is
    loaded: the control patches the library and nothing else."""
    import sys
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    wanted = _wanted(config)
    if wanted is None:
        return
    claimed = {cid for c in wanted for cid in c.claims}
    keep, drop = [], []
    for item in items:
        cs = getattr(item, "callspec", None)
        under = cs.params.get(PARAM) if cs is not None else None
        ids = {cid for m in item.iter_markers("claim") for cid in m.args}
        process = [c.name for c in wanted if c.scope == "process" and ids & set(c.claims)]
        if under is not None:
            item.stash[CONTROL] = under
            keep.append(item)
        elif process:
            item.stash[CONTROL] = ",".join(process)
            keep.append(item)
        elif ids & claimed and any(c.scope == "process" for c in wanted):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session):
    wanted = _wanted(session.config)
    if not wanted:
        return
    process = [c for c in wanted if c.scope == "process"]
    if process:
        # the shared experiments train in a pool of spawned processes, which a patch made
        # here never reaches: under a process-scope control they train in this process
        os.environ["LECTURE11_WORKERS"] = "1"
        # and what they compute is perturbed: kept apart from the user's cache, shared by this
        # run's workers only (python -m support controls also gives each session an empty one)
        import tempfile
        from pathlib import Path

        from support.lab import cache
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
        cache.keep_results_in(Path(tempfile.gettempdir()) / f"claims-control-results-{run}")
    for c in process:
        # never undone: this session is the control's own process
        _retraced()
        c.apply(pytest.MonkeyPatch())
