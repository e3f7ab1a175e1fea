"""The verdict rules as plain functions (support/rules/verdicts.py, support/tolerances.judge):
what a variant's ending and its figures make of it, what its expectations accept, and a
claim's verdict from its variants. The pytest wiring is tested end to end in test_plugin."""
from __future__ import annotations

import pytest

from support.rules.expectations import Expectation
from support.rules import verdicts as v
from support.rules.tolerances import TABLE, Bound, judge, landing


def fig(outcome, value=1.0, rule="stated 1 (exact)", interval=None):
    m = {"value": value, "outcome": outcome, "rule": rule}
    if interval:
        m["interval"] = list(interval)
    return m


def outcome(**kw):
    base = dict(when="call", passed=True, skipped=False)
    base.update(kw)
    return v.variant_outcome(**base)


# --------------------------------------------------------------------------- figures
@pytest.mark.parametrize("value,interval,want", [
    (2.0, None, "within"),
    (4.5, None, "outside"),          # stated 2 within x2: 1..4
    (3.0, (2.0, 4.5), "undecided"),  # straddles the tolerance's upper edge
    (5.0, (4.5, 6.0), "outside"),
    (1.1, None, "broken"),           # bound > 1.2, whatever the tolerance says
    (1.5, (1.1, 1.9), "undecided"),  # straddles the bound
])
def test_judge_orders_bound_then_tolerance_then_interval(value, interval, want):
    assert judge(value, interval, 2.0, TABLE["timing:ratio"], (Bound.parse("> 1.2"),)) == want


@pytest.mark.parametrize("record,line,past,widths", [
    # a positive line: a share of the line itself, either way (a factor 2 is 1)
    ({"value": 7.84, "bound": ["> 1", "< 6"]}, "bound < 6", 0.3067, None),
    ({"value": 0.75, "bound": ["> 1.5"]}, "bound > 1.5", 1.0, None),
    ({"value": 50.0, "bound": ["< 6"]}, "bound < 6", 7.3333, None),        # a sledgehammer's
    ({"value": 1.05, "bound": ["> 1"]}, "bound > 1", -0.0476, None),       # holds, close by
    # a stated figure's band: its edge as a line, and the band's half-widths past it
    ({"value": 17.6, "stated": "17.8", "tolerance": {"printed": True, "atol": 0.1}},
     "edge 17.7 of stated 17.8", 0.0057, 1.0),
    ({"value": 17.0, "stated": "5.5", "tolerance": {"printed": True}},
     "edge 5.55 of stated 5.5", 2.0631, 229.0),                           # ReLU returning 0
    # the line crossed by least, when several are
    ({"value": 7.84, "bound": ["< 6"], "stated": 2.8, "tolerance": {"factor": 2.0}},
     "bound < 6", 0.3067, None),
    # a bound at 0 has no scale of its own: the measurement's interval gives it
    ({"value": 0.2, "bound": ["< 0"], "interval": [0.09, 0.31]}, "bound < 0", 1.8182, None)])
def test_a_landing_is_measured_in_its_lines_own_scale(record, line, past, widths):
    """Where a control landed a figure: how far past its line, as a share of the line (of
    the interval for a bound at 0), and in half-widths of a stated figure's band; near
    within a factor 2 of the line."""
    got = landing(record)
    assert got["line"] == line and got["past"] == pytest.approx(past, abs=1e-4)
    assert got.get("widths") == (None if widths is None else pytest.approx(widths, abs=1e-4))
    assert got["near"] == (abs(past) <= 1)


def test_a_figure_below_1e_15_can_drift_while_its_bound_holds():
    bound = (Bound.parse("<= 1e-15"),)
    assert judge(4.44e-16, None, "1.7e-18", TABLE["printed"], bound) == "outside"
    assert judge(1.7e-18, None, "1.7e-18", TABLE["printed"], bound) == "within"
    assert judge(2e-15, None, "1.7e-18", TABLE["printed"], bound) == "broken"


def test_a_reference_figure_never_drifts_and_its_bounds_still_decide():
    from support.rules.entries import Figure
    ref = Figure("XX-01", "minutes", stated=5, bounds=(Bound.parse(">= 1"), Bound.parse("< 60")),
                 reference=True)
    # 7.4 minutes against the catalogue's reading of 5: shown, not compared
    assert ref.judge(7.4) == ("within", "bound")
    assert ref.judge(90.0) == ("broken", "bound")
    assert ref.judge(59.0, (40.0, 75.0)) == ("undecided", "bound")
    assert ref.tolerance() is None and "reference 5" in ref.rule()
    # the same figure as the notes' own would drift
    stated = Figure("XX-01", "minutes", stated=5, tol="about", bounds=ref.bounds)
    assert stated.judge(7.4) == ("outside", "tolerance")


def test_a_figure_that_is_the_sentence_fails_outside_its_tolerance():
    """fails_outside: "the default num_workers is 0" is false at 2, not a moved number; the
    same count without it (the number of equations in a jaxpr) drifts."""
    from support.rules.entries import Figure
    fact = Figure("XX-01", "default num_workers", stated=0, tol="exact", fails_outside=True)
    assert fact.judge(0) == ("within", "tolerance")
    assert fact.judge(2) == ("broken", "tolerance")
    assert "outside it the claim fails" in fact.rule()
    moved = Figure("XX-01", "n_equations", stated=16, tol="exact")
    assert moved.judge(17) == ("outside", "tolerance")
    out = v.variant_outcome(when="call", passed=True, skipped=False, measurements={
        "default num_workers": {"value": 2, "outcome": "broken", "decided_by": "tolerance",
                                "rule": fact.rule()}})
    assert out.verdict == "fails" and "contradicts the sentence's stated 0" in out.reason


def test_text_and_bools_compare_exactly():
    assert judge("float32", None, "float32") == "within"
    assert judge("float64", None, "float32") == "outside"
    assert judge(True, None, True) == "within"


def test_a_bound_reads_its_operator():
    assert Bound.parse(">= 64").judge(64, 64) == "within"
    assert Bound.parse("> 64").judge(64, 64) == "broken"
    assert Bound.parse("< 2").judge(1.5, 2.5) == "undecided"
    with pytest.raises(ValueError):
        Bound.parse("about 3")


# --------------------------------------------------------------------------- one variant
def test_a_variant_holds_drifts_fails_or_is_inconclusive_by_its_figures():
    assert outcome(measurements={"a": fig("within")}).verdict == "holds"
    assert outcome(measurements={"a": fig("within"), "b": fig("outside")}).verdict == "drift"
    o = outcome(measurements={"b": fig("outside"), "c": fig("broken")})
    assert o.verdict == "fails" and o.figures == ("c",)
    o = outcome(measurements={"c": fig("undecided", interval=(0.9, 1.1))})
    assert o.verdict == "inconclusive" and "[0.9, 1.1]" in o.reason


def test_a_figure_outside_its_tolerance_is_outside_while_its_bound_straddles():
    """AD-14: the count 3.498 [2.896, 3.498] lies wholly below its stated 4's band [3.5, 4.5]
    (it moved, decided) while its interval straddles the bound >= 3: the figure is outside,
    and only a broken bound outranks that."""
    from support.rules.tolerances import TABLE, judge_where
    b = (Bound.parse(">= 3"),)
    assert judge_where(3.498, (2.896, 3.498), 4, TABLE["orders"], b) == ("outside", "tolerance")
    assert judge_where(3.8, (2.896, 3.9), 4, TABLE["orders"], b) == ("undecided", "bound")
    assert judge_where(2.5, (2.4, 2.6), 4, TABLE["orders"], b) == ("broken", "bound")


def test_a_reach_goes_both_ways_unless_every_computation_moves_the_figure_one_way():
    """REACH: how far rounding alone moves a figure; REACH_SIDE: a reach whose every
    alternative computation moves the figure one way stops at the measured value (AD-14's
    count: torch's and JAX's loss give fewer orders than NumPy's, never more)."""
    from support.rules import tolerances
    both = tolerances.within_reach(0.0, "mpa:mean of 5")
    r = tolerances.REACH["mpa:mean of 5"]
    assert both["interval"] == (-r, r) and "+- 0.11" in both["note"]
    one = tolerances.within_reach(3.5, "orders:best central difference")
    assert one["interval"] == (3.5 - tolerances.REACH["orders:best central difference"], 3.5)
    assert "- 0.60" in one["note"] and "+-" not in one["note"]
    assert set(tolerances.REACH_SIDE) <= set(tolerances.REACH)
    assert set(tolerances.REACH_SIDE.values()) <= {"below", "above"}


def test_a_decided_figure_is_never_hidden_by_an_undecided_one():
    # the worst decided figure decides: a stated figure outside its tolerance is a drift
    # beside an undecided bound (named in the reason), a broken bound a failure
    bound = dict(fig("undecided", interval=(0.9, 1.1)), decided_by="bound")
    edge = dict(fig("undecided"), decided_by="tolerance")
    o = outcome(measurements={"a": fig("outside"), "b": bound})
    assert o.verdict == "drift" and o.figures == ("a",)
    assert "b = " in o.reason and "straddles" in o.reason
    assert outcome(measurements={"a": fig("broken"), "b": bound}).verdict == "fails"
    assert outcome(measurements={"a": fig("outside"), "b": edge}).verdict == "drift"
    # inconclusive only when nothing decided is wrong
    assert outcome(measurements={"a": fig("within"), "b": bound}).verdict == "inconclusive"


def test_an_assertion_is_fails_anything_else_error_and_nothing_recorded_error():
    o = outcome(passed=False, assertion=True, message="AssertionError: x\nassert 1 == 2")
    assert o.verdict == "fails" and "\n" not in o.reason and "\n" in o.message
    assert outcome(passed=False, assertion=False, message="KeyError").verdict == "error"
    assert outcome(passed=False, assertion=True, when="setup").verdict == "error"
    assert outcome(measurements={}).verdict == "error"


def test_skips_and_benchmarks():
    assert outcome(skipped=True, skip_reason="no GPU").verdict == "skipped"
    assert outcome(skipped=True, not_applicable=True).verdict == "not-applicable"
    assert outcome(benchmark=True, measurements={}).verdict == v.BENCHMARK


# --------------------------------------------------------------------------- expectations
def exp(verdict, measurement="", reason="r"):
    return Expectation(id="XX-01", verdict=verdict, reason=reason, measurement=measurement)


def test_an_expectation_accepts_only_the_failure_it_names():
    broken = v.Outcome("fails", "independent = False breaks its bound", ("independent",))
    assert v.unexpected(broken, [exp("fails", measurement="independent")])[1] == ""
    assert "fails not listed" in v.unexpected(broken, [exp("fails", measurement="other")])[1]
    assert "fails not listed" in v.unexpected(broken, [])[1]
    # an assertion names no figure: no entry knows it, whatever its words
    asserted = v.Outcome("fails", "AssertionError: LSTM mixes", (), "AssertionError: LSTM mixes")
    assert "by an assertion" in v.unexpected(asserted, [exp("fails", measurement="x")])[1]
    assert "unexpected fails" in v.unexpected(asserted, [])[1]


def test_a_bound_broken_at_once_is_the_figures_failure():
    """claim.check(..., halt=True) raises at once (Hypothesis shrinks on it): the failure is
    still the figure's, so a known failure that names the figure knows it."""
    ms = {"share": fig("broken", 2.0, "bound <= 1")}
    o = outcome(passed=False, assertion=True, halted=True, message="share = 2.0 breaks",
                measurements=ms)
    assert o.verdict == "fails" and o.figures == ("share",) and not o.message
    assert v.unexpected(o, [exp("fails", measurement="share")])[1] == ""


def test_a_drift_must_name_every_figure_that_moved():
    drift = v.Outcome("drift", "a and b moved", ("a", "b"))
    assert v.unexpected(drift, [exp("drift", measurement=["a", "b"])])[1] == ""
    assert "b" in v.unexpected(drift, [exp("drift", measurement="a")])[1]
    assert "drift not listed" in v.unexpected(drift, [])[1]


def test_a_known_failure_that_holds_is_an_unexpected_pass():
    assert "UNEXPECTED PASS" in v.unexpected(v.Outcome("holds"), [exp("fails", measurement="x")])[1]
    # inconclusive neither confirms nor contradicts: never a red run
    assert v.unexpected(v.Outcome("inconclusive"), [exp("fails", measurement="x")])[1] == ""


# --------------------------------------------------------------------------- one claim
def rec(verdict, role="test"):
    return {"verdict": verdict, "role": role}


def test_a_claim_is_its_worst_executed_variant():
    assert v.claim_verdict([rec("holds"), rec("drift")], []) == ("drift", "")
    assert v.claim_verdict([rec("inconclusive"), rec("fails")], []) == ("fails", "")
    assert v.claim_verdict([rec("holds"), rec("skipped")], []) == ("holds", "")


def test_a_claim_whose_required_variant_did_not_run_is_partial():
    verdict, why = v.claim_verdict([rec("holds"), rec("skipped")], ["its cuda variant did not run"])
    assert verdict == "partial" and "cuda" in why
    # a contradiction needs no more variants: it stays fails
    assert v.claim_verdict([rec("fails")], ["its cuda variant did not run"])[0] == "fails"


def test_benchmarks_never_decide_a_claim():
    assert v.claim_verdict([rec(v.BENCHMARK, "benchmark")], [])[0] == "not-run"
    assert v.claim_verdict([rec("skipped", "benchmark")], [])[0] == "skipped"
    assert v.claim_verdict([rec("drift"), rec(v.BENCHMARK, "benchmark")], [])[0] == "drift"


def test_the_vocabulary_is_ordered_worst_first_and_complete():
    assert v.ORDER[0] == "error" and v.ORDER.index("fails") < v.ORDER.index("drift") \
        < v.ORDER.index("inconclusive") < v.ORDER.index("partial") < v.ORDER.index("holds")
    assert set(v.MUST_BE_EXPECTED) <= set(v.ORDER) and set(v.COLOURS) == set(v.ORDER)


def test_halt_judges_the_example_not_the_running_worst():
    """A property that halts on a broken bound must let Hypothesis shrink: after one bad
    example, a good one passes (the report still keeps the worst)."""
    from support.harness.recorder import ClaimRecorder
    from support.rules.entries import Claim, Figure
    c = Claim(id="XX-01", document="lecture", section="S", source="L:1", paraphrase="p",
              notes_words="", kind="g", tier="fast")
    c.figures = {"share": [Figure("XX-01", "share", None, None, (Bound.parse("<= 1"),))]}
    rec = ClaimRecorder(["XX-01"], {"XX-01": c})
    with pytest.raises(AssertionError):
        rec.check("share", 2.0, reduce="max", halt=True)
    assert rec.check("share", 0.5, reduce="max", halt=True) == 2.0   # no raise
    assert rec.measurements["share"]["outcome"] == "broken"


def test_an_undecided_comparison_does_not_hide_a_figure_that_moved():
    """SPLIT-05: the gain difference straddles its bound, while a printed figure of the same
    test left its tolerance: the printed figure moved whatever the comparison says, so the
    variant drifts on it, and the reason names the undecided comparison beside it."""
    ms = {"gain difference": {**fig("undecided", 0.18, "bound > 0", (-0.2, 0.6)),
                              "decided_by": "bound"},
          "HGB gain": fig("outside", 1.95, "stated 1.81")}
    o = outcome(measurements=ms)
    assert o.verdict == "drift" and o.figures == ("HGB gain",)
    assert "HGB gain = 1.95 is outside stated 1.81" in o.reason
    assert "gain difference = 0.18 [-0.2, 0.6] straddles" in o.reason
