"""Negative controls (support/rules/controls.py, control_summary.py, control_options.py): a control that turns
its claim red is counted, one that leaves it holding is reported as surviving, one that crashes
the test as broken; test-scope controls stay out of shared fixtures, process-scope ones reach
them; a test's figures are looked up by its own variant id under a control.

Each test runs a tiny suite of its own (pytester) with a two-claim registry."""
from __future__ import annotations

import json
import textwrap

import pytest

from support.harness import claim_modules, device_marks
from support.rules import control_summary as summ
from support.rules import controls as ctl
from support.tests import tiny_registry

REGISTRY = """
[[claim]]
id = "XX-01"
document = "lecture"
section = "S"
source = "L:1"
paraphrase = "the subject returns two"
kind = "a"
tier = "fast"
figures = [{ name = "value", stated = "2.0", tol = "exact" },
           { name = "big", bound = "> 1", variant = "big" }]

[[claim]]
id = "XX-02"
document = "lecture"
section = "S"
source = "L:2"
paraphrase = "a shared result"
kind = "a"
tier = "fast"
figures = [{ name = "shared", stated = "3.0", tol = "exact" }]
"""

TESTS = '''
import sys
import pytest
from support.rules.controls import control

def subject():
    return 2.0

@pytest.fixture(scope="session")
def shared():
    return subject() + 1.0

@pytest.mark.claim("XX-01")
@pytest.mark.parametrize("size", ["big"])
def test_subject(claim, size):
    claim.check("value", subject())
    claim.check("big", subject())
    assert subject() > 1.5

@pytest.mark.claim("XX-02")
def test_shared(claim, shared):
    claim.check("shared", shared)

me = sys.modules[__name__]

@control("XX-01", what="the subject returns one")
def returns_one(mp):
    mp.setattr(me, "subject", lambda: 1.0)

@control("XX-01", what="something the test never calls")
def elsewhere(mp):
    mp.setattr(me, "shared", None)

@control("XX-01", what="the subject breaks")
def breaks(mp):
    mp.setattr(me, "subject", lambda: "two")

@control("XX-01", what="the subject returns 2.5 (the stated figure moves)", moves=("value",))
def drifts_named(mp):
    mp.setattr(me, "subject", lambda: 2.5)

@control("XX-01", what="the subject returns 2.5, no figure named")
def drifts_unnamed(mp):
    mp.setattr(me, "subject", lambda: 2.5)

@control("XX-02", what="the subject returns one, test scope")
def shared_test_scope(mp):
    mp.setattr(me, "subject", lambda: 1.0)

@control("XX-02", what="the subject returns one, from the session's start", scope="process",
         moves=("shared",))
def shared_process_scope(mp):
    mp.setattr(me, "subject", lambda: 1.0)

@control("XX-01", what="the subject returns two and a half: the sentence is false",
         expect="holds")
def positive_but_false(mp):
    mp.setattr(me, "subject", lambda: 2.5)

@control("XX-01", what="the subject returns two, as it does", expect="holds")
def positive_and_true(mp):
    mp.setattr(me, "subject", lambda: 2.0)
'''


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(ctl, "CONTROLS", dict(ctl.CONTROLS))     # the nested run's stay there
    tiny_registry.write(pytester.path / "reg", REGISTRY)
    (pytester.path / "expect.toml").write_text("")
    pytester.makeini(textwrap.dedent("""
        [pytest]
        claims_folder = reg
        claims_expectations = expect.toml
        addopts = -p support.harness.plugin -p support.harness.control_options -p no:cacheprovider
    """))
    pytester.makepyfile(test_claims=TESTS)

    def run(*args):
        pytester.runpytest("--claims-report", str(pytester.path / "out"), *args)
        report = json.loads((pytester.path / "out" / "claims.json").read_text())
        return {name: ctl.evaluate(ctl.CONTROLS[name], report, 0.0, "test", {})["results"]
                for name in ctl.CONTROLS if name in _names(report)}

    return run


def _names(report) -> set[str]:
    return {n for c in report["claims"] for v in c.get("variants") or []
            for n in (v.get("control") or "").split(",") if n}


def test_a_control_that_turns_its_claim_red_is_counted_one_that_leaves_it_holding_survives(suite):
    got = suite("--controls")
    assert got["returns-one"]["XX-01"]["outcome"] == "red"
    assert "assert 1.0 > 1.5" in got["returns-one"]["XX-01"]["evidence"]
    assert got["elsewhere"]["XX-01"]["outcome"] == "survived"
    assert got["breaks"]["XX-01"]["outcome"] == "broken"          # a crash proves nothing
    assert got["drifts-named"]["XX-01"]["outcome"] == "red"
    assert got["drifts-unnamed"]["XX-01"]["outcome"] == "survived"
    assert "does not name" in got["drifts-unnamed"]["XX-01"]["evidence"]


def test_a_positive_control_must_turn_its_claim_green(suite):
    """A positive control (expect="holds") makes the sentence true: the claim must hold under
    it (green); a claim that still fails or drifts under it stayed red."""
    got = suite("--controls")
    assert got["positive-and-true"]["XX-01"]["outcome"] == "green"
    assert got["positive-but-false"]["XX-01"]["outcome"] == "stayed red"


def test_a_claim_is_controlled_only_when_every_control_did_what_it_declared():
    def result(name, outcome, expect="red"):
        return {"name": name, "expect": expect, "results": {"XX-01": {"outcome": outcome}}}
    registry = {"XX-01": type("C", (), {"kind": "a", "status": "testable",
                                        "control_reason": ""})()}
    red, green = result("a", "red"), result("p", "green", "holds")
    assert summ.summarise([red, green], registry, None)["XX-01"]["state"] == "controlled"
    summary = summ.summarise([red, result("b", "survived")], registry, None)["XX-01"]
    assert summary["state"] == "survived"           # one red control is not enough
    assert summary["outcomes"] == {"a": "red", "b": "survived"}
    assert summ.summarise([red, result("q", "stayed red", "holds")], registry,
                         None)["XX-01"]["state"] == "survived"


def test_a_control_left_to_a_later_rotation_is_judged_by_its_last_outcome(tmp_path):
    """The report remembers: a control this run did not run (the rotation left it for later)
    shows its last outcome on this machine and the run (commit, date) that produced it, and
    says "not run this time", never "uncontrolled"; "uncontrolled" is for a claim with no
    control, or whose last controls did not do as declared."""
    from support.reports import controlled
    registry = {cid: type("C", (), {"kind": "c", "status": "testable", "control_reason": ""})()
                for cid in ("XX-01", "XX-02", "XX-03", "XX-04")}
    ledger = tmp_path / "ledger.json"
    earlier = [{"name": "a", "results": {"XX-01": {"outcome": "red", "evidence": "e",
                                                    "near": True}}},
               {"name": "b", "results": {"XX-02": {"outcome": "survived", "evidence": "e"}}}]
    summ.remember(earlier, "3c3a40b0ffff", "2026-12-01T10:00:00+00:00", ledger)
    # a later run in which "a" did not run (device absent) keeps its red
    skipped = [{"name": "a", "results": {"XX-01": {"outcome": "not run", "evidence": "no GPU"}}}]
    kept = summ.remember(skipped, "9d00f1e0ffff", "2026-12-02T10:00:00+00:00", ledger)
    assert kept["a"]["XX-01"]["outcome"] == "red" and kept["a"]["XX-01"]["commit"] == "3c3a40b0ffff"
    assert summ.read_ledger(ledger) == kept
    known = {"XX-01": ["a"], "XX-02": ["b"], "XX-03": ["c"]}
    summary = summ.summarise([], registry, None, known, kept, left=("a", "b", "c"))
    one = summary["XX-01"]
    assert one["state"] == "not run this time" and one["scale"] == "near"
    assert one["not_run_this_time"]["a"] == {"outcome": "red", "commit": "3c3a40b0ffff",
                                             "date": "2026-12-01T10:00:00+00:00",
                                             "why": "left to a later rotation"}
    text = controlled.control_text({"verdict": "holds", "control": one})
    assert "not run this time" in text and "red at 3c3a40b0, 2026-12-01" in text
    assert "uncontrolled" not in text
    # the last run of a control survived: uncontrolled, whenever it ran
    assert summary["XX-02"]["state"] == "survived"
    # a control never run here: not run this time, with nothing to show, not uncontrolled
    three = summary["XX-03"]
    assert three["state"] == "not run this time"
    assert "no earlier outcome" in controlled.control_text({"verdict": "holds", "control": three})
    # no control at all: uncontrolled
    assert summary["XX-04"]["state"] == "uncontrolled"
    # one control ran red now, another is remembered red: controlled, the other shown
    now = [{"name": "c", "results": {"XX-01": {"outcome": "red", "evidence": "e"}}}]
    both = summ.summarise(now, registry, None, {"XX-01": ["a", "c"]}, kept, left=("a",))
    text = controlled.control_text({"verdict": "holds", "control": both["XX-01"]})
    assert both["XX-01"]["state"] == "controlled"
    assert text.startswith(" · controlled (c)") and "a: last red at 3c3a40b0" in text
    lines = controlled.controls_lines({"controls": {"suite_commit": "9d00f1e", "wall_s": 1},
                                   "claims": [{"id": k, "verdict": "holds", "control": v}
                                              for k, v in summary.items()]})
    assert any(line.strip().startswith("not run this time") and "XX-01" in line
               and "XX-03" in line for line in lines)
    assert not any("uncontrolled" in line and "XX-01" in line for line in lines)


@pytest.mark.parametrize("verdicts,outcome", [
    (["inconclusive"], "level"),                    # what an interval says of equal sides
    (["fails"], "level"),                           # a bound asking more than equality: decided
    (["inconclusive", "holds"], "level"),           # the half it reaches; the other holds
    (["holds"], "survived"),                        # decides on noise
    (["drift"], "survived"),                        # its comparison decided, a figure moved
    (["error"], "broken")])
def test_a_level_control_must_leave_its_claim_undecided_or_red(verdicts, outcome):
    """A level control (expect="inconclusive") makes the two sides of the sentence's comparison
    equal: a test that still says holds decides on noise, timing claim or not."""
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None, expect="inconclusive")
    variants = [{"verdict": v, "reason": "r"} for v in verdicts]
    for timing in (False, True):
        assert ctl.outcome(c, "XX-01", variants, timing=timing)[0] == outcome
    assert "level" in ctl.AS_DECLARED


@pytest.mark.parametrize("verdict,moves,outcomes", [
    # the figure it moves left its tolerance: seen, on a busy machine too (a decided figure
    # outside is a drift beside the undecided comparison)
    ("drift", ("g",), ("red", "red")),
    # another figure moved: not what it declares (a timing claim's: undecided)
    ("drift", ("h",), ("survived", "undecided")),
    ("drift", (), ("survived", "undecided"))])
def test_a_moved_figure_counts_even_beside_an_undecided_comparison(verdict, moves, outcomes):
    """SPLIT-05: the printed gains are checked as points while the gain difference's interval
    may straddle 0; a control that moves a printed gain is seen through that figure."""
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None, moves=moves)
    variants = [{"verdict": verdict, "reason": "r",
                 "figures": {"g": {"outcome": "outside"},
                             "b": {"outcome": "undecided", "decided_by": "bound"}}}]
    for timing, outcome in zip((False, True), outcomes):
        assert ctl.outcome(c, "XX-01", variants, timing=timing)[0] == outcome


@pytest.mark.parametrize("verdict,figures,outcome", [
    # the figure it makes true holds; another's magnitude is left undecided: green (JIT-18)
    ("inconclusive", {"g": "within", "s": "undecided"}, "green"),
    ("drift", {"g": "within", "s": "outside"}, "green"),
    ("holds", {"g": "within"}, "green"),
    # the named figure is still off, or undecided (on a timing claim: undecided)
    ("drift", {"g": "outside", "s": "within"}, "stayed red"),
    ("inconclusive", {"g": "undecided"}, ("stayed red", "undecided")),
    # a failure anywhere counts, and a figure never recorded is not shown to hold
    ("fails", {"g": "within", "s": "broken"}, "stayed red"),
    ("holds", {"s": "within"}, "stayed red")])
def test_a_positive_control_that_names_its_figures_is_judged_on_them(verdict, figures, outcome):
    """A positive control makes the failing half true; the claim's other figures may read
    this machine's magnitude against the notes' (an edge of a factor-2 band), which it does
    not aim at: reported in its evidence, a failure among them still counted."""
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None, moves=("g",), expect="holds")
    variants = [{"verdict": verdict, "reason": "r",
                 "figures": {n: {"outcome": o} for n, o in figures.items()}}]
    want = outcome if isinstance(outcome, tuple) else (outcome, outcome)
    for timing, o in zip((False, True), want):
        assert ctl.outcome(c, "XX-01", variants, timing=timing)[0] == o
    if want[0] == "green" and "s" in figures and figures["s"] != "within":
        assert "not aimed at: s " in ctl.outcome(c, "XX-01", variants)[1]


@pytest.mark.parametrize("expect,moves,result,figures,landed", [
    # red: the broken figures; a named one outside or undecided too
    ("red", (), "red", {"g": ("broken", 7.0), "h": ("undecided", 5.0)}, ["g"]),
    ("red", ("h",), "red", {"g": ("broken", 7.0), "h": ("undecided", 7.0)}, ["g", "h"]),
    # level: whatever the equal sides left off its line
    ("inconclusive", (), "level", {"g": ("undecided", 6.0), "h": ("within", 3.0)}, ["g"]),
    # green: the figures it made hold (those it names, when it names them)
    ("holds", (), "green", {"g": ("within", 3.0), "h": ("within", 4.0)}, ["g", "h"]),
    ("holds", ("g",), "green", {"g": ("within", 3.0), "h": ("within", 4.0)}, ["g"]),
    # not as declared: nothing to say of its scale
    ("red", (), "survived", {"g": ("within", 3.0)}, [])])
def test_a_controls_landings_are_the_figures_that_decided_it(expect, moves, result, figures,
                                                             landed):
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None, moves=moves, expect=expect)
    variants = [{"verdict": "fails", "figures": {
        n: {"value": v, "outcome": o, "bound": ["< 6"]} for n, (o, v) in figures.items()}}]
    got = ctl.landings(c, variants, result)
    assert [x["figure"] for x in got] == landed
    assert all(x["line"] == "bound < 6" for x in got)


def test_a_claim_is_at_its_own_scale_when_one_control_landed_near():
    """A sledgehammer beside a control at the threshold: near; sledgehammers only: far; red
    through assertions only: unmeasured. Only controls that did as declared count."""
    near = {"outcome": "red", "near": True}
    far = {"outcome": "red", "near": False}
    assert summ.scale([far, near]) == "near"
    assert summ.scale([far, far]) == "far"
    assert summ.scale([{"outcome": "red"}, {"outcome": "level"}]) == "unmeasured"
    assert summ.scale([{"outcome": "survived", "near": True}, far]) == "far"


def test_an_undeclared_expectation_is_refused():
    with pytest.raises(ValueError, match="expect must be one of"):
        ctl.control("XX-01", what="w", expect="fails")


def test_a_test_scope_control_stays_out_of_shared_fixtures_a_process_control_reaches_them(suite):
    assert suite("--controls")["shared-test-scope"]["XX-02"]["outcome"] == "survived"
    got = suite("--control", "shared-process-scope")
    assert got["shared-process-scope"]["XX-02"]["outcome"] == "red"


def test_under_a_control_a_test_keeps_its_own_variant_and_runs_only_under_controls(suite, pytester):
    suite("--control", "returns-one")
    report = json.loads((pytester.path / "out" / "claims.json").read_text())
    [xx01] = [c for c in report["claims"] if c["id"] == "XX-01"]
    [v] = xx01["variants"]
    # the figure stated for variant "big" was found: the control's id is not part of it
    assert v["variant"] == "big" and "big" in v["figures"] and v["control"] == "returns-one"
    assert v["params"] == {"size": "big"}
    [xx02] = [c for c in report["claims"] if c["id"] == "XX-02"]
    assert not xx02["variants"]                      # not a claim of the control: not run


def test_an_unknown_control_is_a_usage_error(pytester, suite):
    result = pytester.runpytest("--control", "no-such-control")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no control named no-such-control*"])


@pytest.mark.parametrize("verdict,outcome", [("fails", "red"), ("holds", "survived"),
                                             ("inconclusive", "survived"),
                                             ("error", "broken"), ("skipped", "not run")])
def test_the_outcome_rule(verdict, outcome):
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None)
    assert ctl.outcome(c, "XX-01", [{"verdict": verdict, "reason": "r"}])[0] == outcome


@pytest.mark.parametrize("verdicts,outcome", [(["inconclusive"], "undecided"),
                                              (["inconclusive", "holds"], "survived"),
                                              (["inconclusive", "fails"], "red")])
def test_a_timing_claim_left_inconclusive_by_a_busy_machine_is_undecided(verdicts, outcome):
    """Under load a timing claim's intervals widen until nothing is decided: that shows
    neither that its test sees the control nor that it cannot. A variant that still holds
    beside it is a survivor, one that fails is red; a claim that is no timing claim is held
    to the plain rule (inconclusive survives)."""
    c = ctl.Control("c", ("XX-01",), "w", lambda mp: None)
    variants = [{"verdict": v, "reason": "r"} for v in verdicts]
    assert ctl.outcome(c, "XX-01", variants, timing=True)[0] == outcome
    assert ctl.outcome(c, "XX-01", variants[:1])[0] == ("red" if verdicts[0] == "fails"
                                                         else "survived")


def test_a_shared_result_is_computed_afresh_and_kept_nowhere_under_a_control(tmp_path, monkeypatch):
    from support.lab import cache
    store = cache.memo_store()
    store["k"] = "unperturbed"
    calls = []
    with cache.isolated():
        assert "k" not in store
        assert cache.cached("t", {}, "support.lab.cache", lambda: calls.append(1) or "perturbed",
                            folder=tmp_path) == "perturbed"
        store["k"] = "perturbed"
    assert store == {"k": "unperturbed"} and not list(tmp_path.glob("*.pkl"))


def test_under_a_process_control_the_shared_experiments_train_where_the_patch_is(monkeypatch):
    # a pool of spawned processes would train them with the library unpatched
    from types import SimpleNamespace

    from support.harness import control_options
    from support.lab import experiments
    from support.lab import cache
    applied = []
    c = ctl.Control("p", ("XX-02",), "w", lambda mp: applied.append(1), scope="process")
    monkeypatch.setattr(ctl, "CONTROLS", {"p": c})
    monkeypatch.setattr(cache, "_results_folder", None)
    monkeypatch.setenv("LECTURE11_WORKERS", "2")
    opts = {"--control": ["p"], "--controls": False}
    control_options.pytest_collection_finish(
        SimpleNamespace(config=SimpleNamespace(getoption=opts.__getitem__)))
    assert applied == [1] and experiments.workers() == 1


def test_a_process_control_keeps_its_perturbed_results_out_of_the_users_cache(tmp_path,
                                                                              monkeypatch):
    """`pytest --control NAME` run by hand, without the runner's empty cache: what the session
    computes under the perturbation must not be what a later unperturbed run reads."""
    from types import SimpleNamespace

    from support.harness import control_options
    from support.lab import cache
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # the run's folder lands here
    monkeypatch.setenv("LECTURE11_CACHE", str(tmp_path / "user"))
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"t{tmp_path.name}")
    monkeypatch.setattr(cache, "_results_folder", None)
    c = ctl.Control("p", ("XX-02",), "w", lambda mp: None, scope="process")
    monkeypatch.setattr(ctl, "CONTROLS", {"p": c})
    opts = {"--control": ["p"], "--controls": False}
    control_options.pytest_collection_finish(
        SimpleNamespace(config=SimpleNamespace(getoption=opts.__getitem__)))
    assert cache.cached("t", {"a": 1}, "support.lab.cache", lambda: "perturbed") == "perturbed"
    assert not (tmp_path / "user" / "results").exists()
    kept = list(cache._results_folder.glob("t-*.pkl"))
    assert kept and cache._results_folder.parent == tmp_path


@pytest.mark.parametrize("here,asked,discovered", [(True, True, True), (True, False, False),
                                                   (False, True, False)])
def test_every_control_is_registered_before_collection_under_controls(monkeypatch, tmp_path,
                                                                      here, asked, discovered):
    """A control beside one section's test can name a claim tested in a module collected
    before it (AD-02, in section 03, by section 06's tanh-derivative-approximate): unless every
    control is registered first, that test is never parametrized and the control 'did not
    run'. Only the suite's own root, and only when controls are asked for."""
    from types import SimpleNamespace

    from support.harness import control_options
    from support.paths import ROOT
    calls = []
    monkeypatch.setattr(claim_modules, "discover", lambda: calls.append(1))
    opts = {"--control": [], "--controls": asked}
    config = SimpleNamespace(getoption=opts.__getitem__, rootpath=ROOT if here else tmp_path)
    control_options.pytest_collection(SimpleNamespace(config=config))
    assert bool(calls) == discovered


def test_a_process_control_whose_tests_all_need_an_absent_device_starts_no_session():
    """python -m support controls lists such a control as not run, with the reason its
    tests would be skipped with, and spends no session's start-up on it; a claim with a CPU
    variant (DEV-01), or with a benchmark on the CPU only (DEV-07's, a tier a controls
    session does not select), is judged by its other tests."""
    from support.machine import devices
    claim_modules.discover()
    dev = ctl.Control("probe", ("DEV-06", "DEV-07"), "a probe", lambda mp: None, "process")
    cpu = ctl.Control("probe", ("DEV-01",), "a probe", lambda mp: None, "process")
    if devices.available("cuda"):
        assert claim_modules.absent_here(dev) is None
    else:
        assert claim_modules.absent_here(dev) == devices.absent_reason("cuda")
    assert claim_modules.absent_here(cpu) is None
    import claims.lecture.test_24_devices_and_when_a_gpu_helps as tests
    assert device_marks.variants(tests.test_moving_a_model_is_two_lines) == [["cpu"], ["cuda"],
                                                                         ["mps"]]
    assert device_marks.variants(tests.test_a_narrow_operation_loses_on_the_gpu) == [["cuda"]]
    cpu_half = tests.test_autocast_keeps_float32_weights_and_saves_half_size_activations_on_cpu
    assert device_marks.variants(cpu_half) == [[]]


def test_the_report_names_a_claim_whose_controls_all_landed_far():
    from support.reports import controlled
    e = {"id": "XX-01", "verdict": "holds",
         "control": {"state": "controlled", "controls": ["a"], "scale": "far"}}
    run = {"controls": {"suite_commit": "abc", "wall_s": 1.0}, "claims": [e]}
    assert "far past its line" in controlled.control_text(e)
    assert any("XX-01" in line and "far past" in line for line in controlled.controls_lines(run))
    e["control"]["scale"] = "near"
    assert "far" not in controlled.control_text(e)
    assert not any("far past" in line for line in controlled.controls_lines(run))


def test_the_scale_summary_leaves_out_claims_that_fail_without_a_control():
    """A negative control of a failing claim is red by construction: its landing says
    nothing of the sentence's scale, and the summary does not count it."""
    summary = {"XX-01": {"scale": "far", "verdict_without_control": "holds"},
               "XX-02": {"scale": "far", "verdict_without_control": "fails"},
               "XX-03": {"scale": "near"}, "XX-04": {"state": "controlled"}}
    assert summ.scale_summary(summary) == {"near": ["XX-03"], "far": ["XX-01"],
                                          "unmeasured": []}


@pytest.mark.parametrize("kind,scaled", [("c", True), ("d", True), ("e", True), ("a", False),
                                         ("b", False)])
def test_only_a_claim_whose_sentence_sets_a_threshold_is_given_a_scale(kind, scaled):
    """An API fact or a precision bound has no threshold of its own to land near: a control
    that turns it red far past its line is as good as any, and is not reported far."""
    registry = {"XX-01": type("C", (), {"kind": kind, "status": "testable",
                                        "control_reason": ""})()}
    far = {"name": "a", "expect": "red",
           "results": {"XX-01": {"outcome": "red", "near": False}}}
    entry = summ.summarise([far], registry, None)["XX-01"]
    assert entry["state"] == "controlled" and ("scale" in entry) == scaled
