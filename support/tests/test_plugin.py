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

from support.tests import tiny_registry

REGISTRY = """
[[claim]]
id = "XX-01"
document = "lecture"
section = "S"
source = "L:1"
paraphrase = "first"
kind = "a"
tier = "fast"
figures = [
  { name = "ratio", stated = "2.0", tol = "exact" },
  { name = "err", stated = "1.7e-18", bound = "<= 1e-15" },
  { name = "speedup", stated = 2.0, tol = "timing:ratio", bound = "> 1.2" },
]

[[claim]]
id = "XX-02"
document = "lecture"
section = "S"
source = "L:2"
paraphrase = "second"
kind = "a"
tier = "slow"
figures = [{ name = "x", stated = "1.0" }]

[[claim]]
id = "XX-03"
document = "sheet"
section = "T"
source = "S:3"
paraphrase = "third"
kind = "a"
tier = "fast"
status = "pending"

[[claim]]
id = "XX-04"
document = "sheet"
section = "T"
source = "S:4"
paraphrase = "opinion"
kind = "h"
tier = "fast"
status = "not-testable"
reason = "an opinion"

[[claim]]
id = "XX-05"
document = "lecture"
section = "S"
source = "L:5"
paraphrase = "moving to the GPU"
kind = "e"
tier = "fast"
requires = ["cuda"]
status = "pending"
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    """A throwaway project using the claims plugin with its own registry."""
    # the nested run is not an xdist worker, even when this test runs in one
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    tiny_registry.write(pytester.path / "reg", REGISTRY)
    pytester.makeini(textwrap.dedent("""
        [pytest]
        claims_folder = reg
        claims_expectations = expect.toml
        addopts = -p support.harness.plugin -p support.harness.schedule -p no:cacheprovider
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
    claim.check("ratio", 2.0)

@pytest.mark.claim("XX-02")
def test_other(claim):
    claim.check("x", 1.2)
"""

KNOWN_DRIFT = """
[[expect]]
id = "XX-02"
verdict = "drift"
measurement = "x"
reason = "the notes round differently"
"""


def test_holds_drift_pending_and_not_testable_verdicts(suite):
    result, data, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT)
    result.assert_outcomes(passed=2)
    assert verdicts == {"XX-01": "holds", "XX-02": "drift", "XX-03": "pending", "XX-04": "not-testable",
                        "XX-05": "pending"}
    xx2 = next(c for c in data["claims"] if c["id"] == "XX-02")
    assert xx2["measured"] == 1.2 and "x = 1.2 is outside stated 1.0" in xx2["reason"]
    assert data["schema"] == 2 and "torch" in data["environment"]["versions"]
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


def test_a_stated_error_that_does_not_come_is_fails(suite):
    # "x raises" contradicted: pytest.raises' DID NOT RAISE is the claim failing, not a crash
    result, data, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.record("x", 1)
            with pytest.raises(ValueError):
                pass
    """)
    result.assert_outcomes(failed=1)
    assert verdicts["XX-01"] == "fails"
    assert "DID NOT RAISE" in next(c for c in data["claims"] if c["id"] == "XX-01")["reason"]


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
            claim.check("err", 2e-15)          # the notes are wrong here: a bound breaks

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            claim.check("x", 1.0)
    """
    expectations = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        measurement = "err"
        reason = "known"

        [[expect]]
        id = "XX-02"
        verdict = "fails"
        measurement = "x"
        reason = "thought wrong"
    """
    result, data, verdicts = suite(src, expectations)
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*XX-02: UNEXPECTED PASS*"])
    assert verdicts == {"XX-01": "fails", "XX-02": "holds", "XX-03": "pending", "XX-04": "not-testable",
                        "XX-05": "pending"}
    assert data["expected_verdicts"] == 1


def test_expectations_are_keyed_by_version_and_stale_entries_are_reported(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.check("err", 2e-15)

        @pytest.mark.claim("XX-02")
        def test_b(claim):
            claim.record("x", 1)
    """
    expectations = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        measurement = "err"
        reason = "only in an ancient torch"
        versions = { torch = "<1.0" }

        [[expect]]
        id = "XX-02"
        verdict = "drift"
        measurement = "x"
        reason = "only on a GPU"
        variant = "cuda"

        [[expect]]
        id = "XX-02"
        verdict = "drift"
        measurement = "x"
        reason = "everywhere, but it holds"
    """
    result, data, _ = suite(src, expectations)
    # the version-keyed entry does not apply here, so the failure is unexpected ...
    result.assert_outcomes(failed=1, passed=1)
    # ... and it is not stale (it belongs to other versions); neither is the variant entry
    # (no cuda variant ran); the entry that applied and did not occur is
    assert data["stale_expectations"] == ["XX-02 drift (x)"]


def test_variants_must_all_hold(suite):
    result, data, verdicts = suite("""
        import pytest

        @pytest.mark.claim("XX-02")
        @pytest.mark.parametrize("framework", ["torch", "jax"])
        def test_a(claim, framework):
            claim.check("x", 1.0 if framework == "torch" else 3.0)
    """, KNOWN_DRIFT)
    result.assert_outcomes(passed=2)
    c = next(c for c in data["claims"] if c["id"] == "XX-02")
    assert verdicts["XX-02"] == "drift"
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
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "-k", "XX-01")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-01"] == "holds" and verdicts["XX-02"] == "not-run"
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "--claim", "XX-02")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-02"] == "drift" and verdicts["XX-01"] == "not-run"
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "--tier", "fast")
    result.assert_outcomes(passed=1)
    assert verdicts["XX-02"] == "not-run"


def test_a_run_records_what_it_selected_and_a_partial_one_says_so(suite):
    result, data, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "--tier", "fast")
    assert data["selection"]["tiers"] == ["fast"]
    assert data["selection"]["default_tiers"] == ["fast", "slow", "gpu"]
    result.stdout.fnmatch_lines(["*a partial run: tiers fast; 1 claims not run: XX-02*",
                                 "*no kept full run holds their last verdicts*"])
    result, data, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "-k", "XX-01")
    assert data["selection"]["keyword"] == "XX-01"
    result.stdout.fnmatch_lines(["*a partial run: tiers fast, slow, gpu; -k 'XX-01'; 1 claims "
                                 "not run: XX-02*"])
    result, data, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "test_claims.py")
    assert data["selection"]["paths"] == ["test_claims.py"]
    result, data, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT)
    assert data["selection"]["tiers"] == ["fast", "slow", "gpu"]
    assert not (data["selection"]["paths"] or data["selection"]["claims"])
    assert "partial run" not in result.stdout.str()


def test_records_from_xdist_workers_are_merged(suite, monkeypatch):
    pytest.importorskip("xdist")
    # the controller's own fingerprint, which the report must not use: the workers' is taken
    from support.machine import fingerprint
    monkeypatch.setattr(fingerprint, "fingerprint", lambda: {"controller": True})
    result, data, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=2)
    assert verdicts["XX-01"] == "holds" and verdicts["XX-02"] == "drift"
    assert all(c["tests"] for c in data["claims"] if c["id"] in ("XX-01", "XX-02"))
    # the environment is the workers' (identical processes: nothing listed as differing)
    env = data["environment"]
    assert "controller" not in env and env["versions"]["pytest"] and "workers_differ" not in env


def test_the_report_names_what_differs_between_workers():
    from types import SimpleNamespace

    from support.reports.report import _environment
    base = {"python": "3.11", "threads": {"torch_threads": 2}, "blas": []}
    other = dict(base, threads={"torch_threads": 1})
    env = _environment(SimpleNamespace(environments={"gw1": other, "gw0": base}))
    assert env["threads"] == {"torch_threads": 2} and env["workers_differ"] == ["threads"]
    assert "workers_differ" not in _environment(SimpleNamespace(environments={"gw0": base, "gw1": base}))


def test_claims_markdown_lists_every_claim(suite):
    suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT)
    import pathlib
    md = next(pathlib.Path(".").rglob("out/claims.md")).read_text()
    for cid in ("XX-01", "XX-02", "XX-03", "XX-04"):
        assert f"| {cid} |" in md


def _claim(data, cid):
    return next(c for c in data["claims"] if c["id"] == cid)


def test_an_unexpected_drift_fails_the_run_and_names_the_figure(suite):
    result, data, verdicts = suite(HOLDS_AND_DRIFTS)
    result.assert_outcomes(passed=1, failed=1)
    assert verdicts["XX-02"] == "drift"
    result.stdout.fnmatch_lines(["*XX-02: drift not listed in claims/expectations.toml: x*"])
    assert any("XX-02" in p for p in data["unexpected"])


def test_an_expectation_matches_only_the_failure_it_names(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        @pytest.mark.parametrize("case", ["known", "other", "assertion"])
        def test_a(claim, case):
            claim.check("ratio", 2.0)
            claim.check("err", 2e-15 if case == "known" else 1e-16)
            claim.check("speedup", 1.0 if case == "other" else 2.0)
            assert case != "assertion", "the sentence is false here, in other words"
    """
    expectations = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        measurement = "err"
        reason = "known"
    """
    result, data, verdicts = suite(src, expectations)
    # the same claim, the same verdict: another figure's bound, or an assertion's words, is
    # not what is known
    result.assert_outcomes(xfailed=1, failed=2)
    result.stdout.fnmatch_lines(["*fails not listed in claims/expectations.toml: speedup*"])
    result.stdout.fnmatch_lines(["*fails by an assertion, not as claims/expectations.toml says*"])


def test_a_broken_bound_fails_after_the_rest_of_the_test_ran(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.check("err", 2e-15)          # breaks "<= 1e-15": fails, but later
            claim.check("ratio", 2.0)          # ... so this still runs
            claim.record("reached the end", True)
    """
    result, data, verdicts = suite(src)
    result.assert_outcomes(failed=1)
    c = _claim(data, "XX-01")
    assert verdicts["XX-01"] == "fails" and "err = 2e-15" in c["reason"]
    assert c["variants"][0]["measured"]["reached the end"] is True
    known = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        measurement = "err"
        reason = "the bound does not hold here"
    """
    result, _, _ = suite(src, known)
    result.assert_outcomes(xfailed=1)


def test_a_printed_figure_below_1e_15_can_drift_while_its_bound_holds(suite):
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.check("err", 4.44e-16)       # within <= 1e-15, not the printed 1.7e-18
    """
    known = """
        [[expect]]
        id = "XX-01"
        verdict = "drift"
        measurement = "err"
        reason = "another summation order"
    """
    result, data, verdicts = suite(src, known)
    result.assert_outcomes(passed=1)
    assert verdicts["XX-01"] == "drift"


@pytest.mark.parametrize("interval,verdict", [
    ((1.5, 3.0), "holds"),          # above the bound 1.2, inside stated 2.0 x2 = [1, 4]
    ((1.1, 3.0), "inconclusive"),   # straddles the bound
    ((3.0, 5.0), "inconclusive"),   # straddles the tolerance's upper edge 4
    ((0.5, 1.1), "fails"),          # below the bound beyond noise
])
def test_a_timing_interval_decides_holds_fails_or_inconclusive(suite, interval, verdict):
    lo, hi = interval
    src = f"""
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.check("speedup", {(lo + hi) / 2}, interval=({lo}, {hi}))
    """
    known = """
        [[expect]]
        id = "XX-01"
        verdict = "fails"
        measurement = "speedup"
        reason = "slower here"
    """
    result, data, verdicts = suite(src, known)
    assert verdicts["XX-01"] == verdict
    if verdict == "inconclusive":
        assert result.ret == 0 and "straddles" in _claim(data, "XX-01")["reason"]


def test_a_moved_figure_beside_an_undecided_comparison_is_a_drift_that_fails_the_run(suite):
    """The worst decided figure decides: "ratio" moved off its exact 2.0 while "speedup"'s
    interval straddles its bound. Undecided is no cover for a figure that moved: the claim
    drifts, the run is red, and the reason names both."""
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_a(claim):
            claim.check("ratio", 2.5)
            claim.check("speedup", 1.3, interval=(1.1, 1.5))
    """
    result, data, verdicts = suite(src)
    assert verdicts["XX-01"] == "drift"
    assert result.ret != 0
    reason = _claim(data, "XX-01")["reason"]
    assert "ratio = 2.5 is outside" in reason and "speedup" in reason and "straddles" in reason


def test_a_claim_whose_required_variant_did_not_run_is_partial(suite):
    src = """
        import pytest
        from support.harness import device_marks

        @pytest.mark.claim("XX-05")
        @pytest.mark.parametrize("device", device_marks.params("cpu", "cuda"))
        def test_a(claim, device):
            if device == "cuda":
                pytest.skip("CUDA absent: no card")
            claim.record("moved", True)
    """
    result, data, verdicts = suite(src, "", "-p", "support.harness.device_options")
    assert result.ret == 0
    c = _claim(data, "XX-05")
    assert verdicts["XX-05"] == "partial"
    assert "its cuda variant did not run" in c["reason"]
    # the same run on a machine that promised CUDA is an error
    result, _, _ = suite(src, "", "-p", "support.harness.device_options", "--require-device", "cuda")
    assert result.ret != 0


def test_a_disabled_benchmark_is_skipped_with_the_reason_and_decides_nothing(suite):
    pytest.importorskip("pytest_benchmark")
    src = """
        import pytest

        @pytest.mark.claim("XX-01")
        def test_bench(claim, benchmark):
            benchmark(lambda: None)
            claim.record("ran", True)
    """
    result, data, verdicts = suite(src, "", "--benchmark-disable")
    result.assert_outcomes(skipped=1)
    assert verdicts["XX-01"] == "skipped"
    assert "--benchmark-disable" in _claim(data, "XX-01")["reason"]
    result, data, verdicts = suite(src)
    result.assert_outcomes(passed=1)
    # a benchmark that ran informs its claim but gives it no verdict
    assert verdicts["XX-01"] == "not-run"
    assert "benchmarks inform a claim but decide nothing" in _claim(data, "XX-01")["reason"]


def test_junit_xml_carries_claim_verdict_stated_and_measured(suite, pytester):
    result, _, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "--junitxml", "junit.xml")
    xml = (pytester.path / "junit.xml").read_text()
    assert '<property name="claim" value="XX-01"' in xml
    assert '<property name="verdict" value="drift"' in xml
    assert '<property name="stated"' in xml and '<property name="measured"' in xml
    assert "claim_record" not in xml


def test_runs_without_xdist(suite):
    result, _, verdicts = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "-p", "no:xdist")
    assert result.ret == 0 and verdicts["XX-01"] == "holds"


def test_the_run_lists_claims_whose_sentence_changed_in_the_notes(suite, pytester):
    """--notes: a claim whose sentence is gone from the given notes is listed in the
    terminal summary and the report (the registry entry carries its fingerprint)."""
    from support.notes import locate as notes
    text = "A first sentence about tensors.\nThe second sentence names XX-01.\n"
    first = notes.fingerprint(notes.words("A first sentence about tensors."))
    second = notes.fingerprint(notes.words("The second sentence names XX-01."))
    section = pytester.path / "reg" / "lecture" / "01_s.toml"
    # XX-01 is the second line's sentence, XX-02 the first's
    toml = section.read_text()
    toml = toml.replace('source = "L:1"', "@1", 1).replace('source = "L:2"', "@2", 1)
    toml = toml.replace("@1", f'source = "L:2"\nfingerprint = "{second}"').replace(
        "@2", f'source = "L:1"\nfingerprint = "{first}"')
    section.write_text(toml)
    doc = pytester.path / "lecture.txt"
    doc.write_text(text.replace("second sentence names", "sentence now says"))
    result, data, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, f"--notes={doc}")
    changed = {c["id"]: c["status"] for c in data["notes"]["changed"]}
    assert changed.get("XX-01") in ("changed", "missing")
    result.stdout.fnmatch_lines(["*sentence(s) changed or missing*", "*XX-01*"])
    result, _, _ = suite(HOLDS_AND_DRIFTS, KNOWN_DRIFT, "--notes=/no/such/notes.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_whole_suite_collects_without_xdist(pytester, monkeypatch):
    """-n 0 runs the suite in one process (the bench tier needs that): every module
    collects, and no xdist-only hook or mark breaks it. (In this process: the modules are
    imported already, so collecting them again costs little.)"""
    from pathlib import Path
    # not a worker of this run's xdist (pytest-benchmark, for one, reads the variable)
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(var, raising=False)
    root = Path(__file__).resolve().parents[2]
    res = pytester.runpytest_inprocess(
        "-n", "0", "--collect-only", "-q", "--tier", "fast,slow,gpu,bench",
        "-p", "no:randomly", "-p", "no:cacheprovider", "--rootdir", str(root),
        "-c", str(root / "pyproject.toml"), "--claims-report", str(pytester.path / "out"),
        str(root))
    assert res.ret == 0, "\n".join(res.outlines[-40:] + res.errlines[-40:])
    res.stdout.fnmatch_lines(["*claims/lecture/test_22_adam_and_what_its_parameters_do.py::*",
                              "*support/tests/*"])
    assert not any("INTERNALERROR" in line for line in res.outlines + res.errlines)


def test_a_timing_test_runs_while_no_other_test_runs(suite, pytester):
    """support/harness/timing_lock.py: under xdist, a timing test holds the workers' lock exclusively."""
    pytest.importorskip("xdist")
    log = pytester.path / "spans.txt"
    src = f"""
        import time
        import pytest

        def span(name, seconds):
            t0 = time.time()
            time.sleep(seconds)
            with open({str(log)!r}, "a") as fh:
                fh.write(f"{{name}} {{t0}} {{time.time()}}\\n")

        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        def test_timed(claim):
            time.sleep(0.3)             # let the other worker start its first test
            span("timing", 1.0)
            claim.record("x", 1)

        @pytest.mark.claim("XX-02")
        @pytest.mark.parametrize("i", range(4))
        def test_other(claim, i):
            span(f"other{{i}}", 0.4)
            claim.record("x", 1)
    """
    result, _, _ = suite(src, "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock")
    result.assert_outcomes(passed=5)
    spans = {n: (float(a), float(b)) for n, a, b in
             (line.split() for line in log.read_text().splitlines())}
    t0, t1 = spans.pop("timing")
    # the whole timing span (from before its sleep) against every other test's span
    overlapping = [n for n, (a, b) in spans.items() if a < t1 and b > t0 - 0.3]
    assert not overlapping, (spans, (t0, t1))


def test_a_test_beside_another_worker_gets_its_share_of_the_cores(suite, monkeypatch):
    """support/harness/timing_lock.py: under -n 2 a test that shares the machine runs the OpenMP and BLAS
    pools on its share of the cores (PyTorch too: the next test) and gets the counts back
    after; a timing test, which runs alone, keeps the counts the process started with; a
    process a test starts is given the share."""
    pytest.importorskip("xdist")
    # a count the user chose turns the share off (environment.shared_threads)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    src = """
        import numpy                          # its BLAS pool, loaded before any test
        import pytest
        from threadpoolctl import threadpool_info
        from support.machine.environment import cores, shared_env

        def pools():
            return sorted(lib["num_threads"] for lib in threadpool_info())

        DEFAULT = pools()                     # read at collection, before any test
        SHARE = max(1, cores() // 2)

        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        def test_alone(claim):
            assert pools() == DEFAULT
            assert shared_env() == {"OMP_NUM_THREADS": str(SHARE)}
            claim.record("x", 1)

        @pytest.mark.claim("XX-02")
        @pytest.mark.parametrize("i", range(2))
        def test_beside(claim, i):
            assert DEFAULT and pools() == [SHARE] * len(DEFAULT)
            claim.record("x", 1)
    """
    result, _, _ = suite(src, "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock")
    result.assert_outcomes(passed=3)


def test_the_share_sets_torchs_threads_and_restores_them():
    from threadpoolctl import threadpool_info

    from support.harness.timing_lock import _Share
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with _Share(1)():
            assert torch.get_num_threads() == 1
            assert {lib["num_threads"] for lib in threadpool_info()} == {1}
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("order", [[], ["--random-order-bucket=global"]],
                         ids=["durations", "shuffled"])
def test_under_n_the_timing_tests_run_first_each_module_on_one_worker(suite, pytester, order):
    """support/harness/schedule.py: under -n 2 the timing tests run before the rest, and the tests
    of one timing module all run on the worker that started it, so that its module-scoped
    fixture (the jit table: seconds of timing under the exclusive lock) is set up once; in an
    order pytest-random-order shuffled too (the scheduler keeps it and still sends the timing
    tests first)."""
    pytest.importorskip("xdist")
    if order:
        pytest.importorskip("random_order")
    log = pytester.path / "log.txt"
    common = f"""
        import os, time
        import pytest

        def note(*words):
            with open({str(log)!r}, "a") as fh:
                fh.write(" ".join(map(str, (*words, os.environ["PYTEST_XDIST_WORKER"]))) + "\\n")

        @pytest.fixture(scope="module")
        def table():
            note("setup", __name__)
    """
    timed = """
        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        @pytest.mark.parametrize("i", range(4))
        def test_timed(claim, table, i):
            t0 = time.time()
            time.sleep(0.05)
            note("timing", t0, time.time())
            claim.record("x", 1)
    """
    pytester.makepyfile(test_jit=textwrap.dedent(common) + textwrap.dedent(timed),
                        test_alone=textwrap.dedent(common) + textwrap.dedent(timed))
    result, _, _ = suite(textwrap.dedent(common) + textwrap.dedent("""
        @pytest.mark.claim("XX-02")
        @pytest.mark.parametrize("i", range(6))
        def test_other(claim, i):
            t0 = time.time()
            time.sleep(0.02)
            note("other", t0, time.time())
            claim.record("x", 1)
    """), "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock", *order)
    result.assert_outcomes(passed=14)
    lines = [line.split() for line in log.read_text().splitlines()]
    setups = [(mod, worker) for kind, mod, worker in (x for x in lines if x[0] == "setup")
              if mod in ("test_jit", "test_alone")]
    assert sorted(m for m, _ in setups) == ["test_alone", "test_jit"], setups
    # each worker starts with timing tests (a worker that still holds timing tests when the
    # last are sent may be sent the next test, so the boundary is not exact)
    timing_start = min(float(x[1]) for x in lines if x[0] == "timing")
    other_start = sorted(float(x[1]) for x in lines if x[0] == "other")
    ends = sorted(float(x[2]) for x in lines if x[0] == "timing")
    assert timing_start < other_start[0] and other_start[0] >= ends[-3], (ends, other_start)


@pytest.mark.timeout(120)
def test_a_crashed_workers_timing_module_goes_to_the_other_worker(suite, pytester):
    """support/harness/schedule.py: a module belongs to the worker that started it; when that worker
    dies, the module's remaining tests run elsewhere instead of waiting for it forever."""
    pytest.importorskip("xdist")
    result, _, verdicts = suite("""
        import os
        import pytest

        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        @pytest.mark.parametrize("i", range(4))
        def test_timed(claim, i):
            if i == 0:
                os._exit(1)
            claim.record("x", 1)
    """, "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running*test_timed[[]0[]]*"])


@pytest.mark.timeout(120)
def test_one_timing_test_beside_one_other_test_runs_under_n(suite):
    """support/harness/schedule.py: with two tests and two workers, the timing test goes to one
    worker, the other test is held back while that worker holds timing tests, and the worker
    cannot start its only test before it is sent another: the run waited forever (``pytest
    -n 2 --claim TAPE-12``, one test in each of two modules, did)."""
    pytest.importorskip("xdist")
    result, _, _ = suite("""
        import pytest

        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        def test_timed(claim):
            claim.record("x", 1)

        @pytest.mark.claim("XX-02")
        def test_other(claim):
            claim.record("x", 1)
    """, "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock")
    result.assert_outcomes(passed=2)


@pytest.mark.timeout(120)
def test_two_timing_tests_of_one_module_run_under_n(suite):
    """support/harness/schedule.py: with two timing tests of one module and two workers, the
    first goes to one worker and the second belongs to that worker's module, so the other is
    sent nothing; the module's worker cannot start its only test before it is sent another:
    the run waited forever (a negative control's session, ``-n 2 --claim JIT-17 --claim
    JIT-18``, did)."""
    pytest.importorskip("xdist")
    result, _, _ = suite("""
        import pytest

        @pytest.mark.timing
        @pytest.mark.claim("XX-01")
        @pytest.mark.parametrize("i", range(2))
        def test_timed(claim, i):
            claim.record("x", 1)
    """, "", "-n", "2", "-p", "xdist", "-p", "support.harness.timing_lock")
    result.assert_outcomes(passed=2)


def test_last_failed_reruns_only_what_failed(pytester, monkeypatch):
    """The project's addopts leave pytest's cache on, so `python -m pytest --lf` after a
    failing run reruns the failures alone (under xdist too, as the addopts run)."""
    from pathlib import Path
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    root = Path(__file__).resolve().parents[2]
    addopts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["addopts"]
    assert "cacheprovider" not in addopts and "-n auto" in addopts
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeini("[pytest]\naddopts = -n 2 -p xdist\n")
    pytester.makepyfile(test_two="def test_holds():\n    pass\n\n\n"
                                 "def test_fails():\n    assert False\n")
    pytester.runpytest().assert_outcomes(passed=1, failed=1)
    again = pytester.runpytest("--lf")
    again.assert_outcomes(failed=1)            # test_holds is not run again
