"""The claims plugin itself: verdicts, expectations, selection, the report, xdist.

Each test runs a tiny suite of its own in a temporary folder (pytester) with a three-claim
registry, so what is checked is the plugin's behaviour, not the notes.
"""
from __future__ import annotations

import json
import textwrap

import pytest

# The in-process runs restore sys.modules afterwards; importing the frameworks here keeps
# them loaded across runs (re-importing torch in one process crashes it).
import jax  # noqa: F401,E402
import torch  # noqa: F401,E402

REGISTRY = """
[[claim]]
id = "XX-01"
document = "lecture"
section = "S"
source = "L:1"
paraphrase = "first"
stated = "2.0"
kind = "a"
tier = "fast"

[[claim]]
id = "XX-02"
document = "lecture"
section = "S"
source = "L:2"
paraphrase = "second"
stated = ""
kind = "a"
tier = "slow"

[[claim]]
id = "XX-03"
document = "sheet"
section = "T"
source = "S:3"
paraphrase = "third"
stated = ""
kind = "a"
tier = "fast"
status = "pending"

[[claim]]
id = "XX-04"
document = "sheet"
section = "T"
source = "S:4"
paraphrase = "opinion"
stated = ""
kind = "h"
tier = "fast"
status = "not-testable"
reason = "an opinion"
"""


@pytest.fixture
def suite(pytester):
    """A throwaway project using the claims plugin with its own registry."""
    (pytester.path / "reg").mkdir()
    (pytester.path / "reg" / "XX.toml").write_text(REGISTRY)
    pytester.makeini(textwrap.dedent("""
        [pytest]
        claims_registry = reg
        claims_expectations = expect.toml
        addopts = -p support.plugin -p no:cacheprovider
    """))
    (pytester.path / "expect.toml").write_text("")

    def run(test_src: str, expectations: str = "", *args):
        (pytester.path / "expect.toml").write_text(textwrap.dedent(expectations))
        pytester.makepyfile(test_claims=textwrap.dedent(test_src))
        result = pytester.runpytest("--claims-report", str(pytester.path / "out"), *args)
        path = pytester.path / "out" / "claims.json"
        data = json.loads(path.read_text()) if path.exists() else None
        verdicts = {c["id"]: c["verdict"] for c in data["claims"]} if data else {}
        return result, data, verdicts

    return run


HOLDS_AND_DRIFTS = """
import pytest

@pytest.mark.claim("XX-01")
def test_ratio(claim):
    claim.record("ratio", 2.0, stated="2.0", tol="exact")

@pytest.mark.claim("XX-02")
def test_other(claim):
    claim.record("x", 1.2, stated="1.0", tol="printed")
"""


def test_holds_drift_pending_and_not_testable_verdicts(suite):
    result, data, verdicts = suite(HOLDS_AND_DRIFTS)
    result.assert_outcomes(passed=2)
    assert verdicts == {"XX-01": "holds", "XX-02": "drift", "XX-03": "pending", "XX-04": "not-testable"}
    xx2 = next(c for c in data["claims"] if c["id"] == "XX-02")
    assert xx2["measured"] == 1.2 and "outside tolerance" in xx2["reason"]
    assert data["schema"] == 1 and "torch" in data["environment"]["versions"]
    result.stdout.fnmatch_lines(["*claims: stated vs measured*", "*XX-02*drift*stated*"])


def test_failed_assert_is_fails_and_other_exceptions_are_error(suite):
    result, _, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.record("x", 1)
            assert 1 == 2

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            raise KeyError("boom")
    """)
    result.assert_outcomes(failed=2)
    assert verdicts["XX-01"] == "fails" and verdicts["XX-02"] == "error"


def test_a_claim_test_that_records_nothing_is_an_error(suite):
    result, data, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-01")
        def test_silent(claim):
            assert True
    """)
    result.assert_outcomes(failed=1)
    assert verdicts["XX-01"] == "error"
    assert "without recording" in next(c for c in data["claims"] if c["id"] == "XX-01")["reason"]


def test_expected_failure_is_xfailed_and_unexpected_pass_fails_the_run(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.record("x", 1)
            assert False, "the notes are wrong here"

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            claim.record("x", 1)
    """
    expectations = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        reason = "known"

        [[expect]]
        id = "XX-02"
        verdict = "fails"
        reason = "thought wrong"
    """
    result, data, verdicts = suite(src, expectations)
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*UNEXPECTED PASS of XX-02*"])
    assert verdicts == {"XX-01": "fails", "XX-02": "holds", "XX-03": "pending", "XX-04": "not-testable"}
    assert data["expected_verdicts"] == 1


def test_expectations_are_keyed_by_version_and_stale_entries_are_reported(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.record("x", 1)
            assert False

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            claim.record("x", 1)
    """
    expectations = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        reason = "only in an ancient torch"
        versions = { torch = "<1.0" }

        [[expect]]
        id = "XX-02"
        verdict = "drift"
        reason = "only on a GPU"
        variant = "cuda"
    """
    result, data, _ = suite(src, expectations)
    # the version-keyed entry does not apply here, so the failure is unexpected ...
    result.assert_outcomes(failed=1, passed=1)
    # ... and it is not stale (it belongs to other versions); the variant entry is
    assert data["stale_expectations"] == ["XX-02 [cuda]"]


def test_variants_must_all_hold(suite):
    result, data, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-01")
        @pytest.mark.parametrize("framework", ["torch", "jax"])
        def test_a(claim, framework):
            claim.record("x", 1.0 if framework == "torch" else 3.0, stated="1.0", tol="exact")
    """)
    result.assert_outcomes(passed=2)
    c = next(c for c in data["claims"] if c["id"] == "XX-01")
    assert verdicts["XX-01"] == "drift"
    assert {v["variant"]: v["verdict"] for v in c["variants"]} == {"torch": "holds", "jax": "drift"}
    assert c["measured"] == {"torch:x": 1.0, "jax:x": 3.0}


def test_not_applicable_and_skipped(suite):
    result, _, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.not_applicable("API absent in this version")

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            pytest.skip("no GPU")
    """)
    result.assert_outcomes(skipped=2)
    assert verdicts["XX-01"] == "not-applicable" and verdicts["XX-02"] == "skipped"


def test_unknown_claim_id_is_a_usage_error(suite):
    result, _, _ = suite("""
        import pytest

        @pytest.mark.claim("XX-99")
        def test_a(claim):
            claim.record("x", 1)
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*XX-99*"])


def test_select_one_claim_with_k_or_claim_option_and_tiers(suite):
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, "", "-k", "XX-01")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-01"] == "holds" and verdicts["XX-02"] == "not-run"
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, "", "--claim", "XX-02")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-02"] == "drift" and verdicts["XX-01"] == "not-run"
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, "", "--tier", "fast")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-02"] == "not-run"


def test_records_from_xdist_workers_are_merged(suite):
    pytest.importorskip("xdist")
    result, data, verdicts = suite(HOLDS_AND_DRIFTS, "", "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=2)
    assert verdicts["XX-01"] == "holds" and verdicts["XX-02"] == "drift"
    assert all(c["tests"] for c in data["claims"] if c["id"] in ("XX-01", "XX-02"))


def test_claims_markdown_lists_every_claim(suite):
    suite(HOLDS_AND_DRIFTS)
    import pathlib
    md = next(pathlib.Path(".").rglob("out/claims.md")).read_text()
    for cid in ("XX-01", "XX-02", "XX-03", "XX-04"):
        assert f"| {cid} |" in md
