"""support.reports.diff: `python -m support diff OLD NEW` says what changed between two runs and
exits 1 when a claim changed; `keep` adds a run to claims/history. Read from the runs kept in
claims/history/ and from edited copies of them."""
from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from support.reports import diff

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "claims" / "history"
JAX010 = HISTORY / "2026-11-29-py311-torch213-jax010-cpu2core"
JAX04 = HISTORY / "2026-11-29-py311-torch213-jax04-cpu2core"
OLDEST = HISTORY / "2026-11-29-py311-oldest-cpu2core"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "support", "diff", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _copy(src: Path, dest: Path, edit=None) -> Path:
    data = json.loads((src / "claims.json").read_text())
    if edit:
        edit({c["id"]: c for c in data["claims"]})
    dest.mkdir(parents=True)
    (dest / "claims.json").write_text(json.dumps(data))
    return dest


def test_two_kept_runs_print_their_differences_and_exit_1(tmp_path):
    out = _cli(JAX010, JAX04, "--md", tmp_path / "d.md", "--html", tmp_path / "d.html")
    assert out.returncode == 1, out.stdout + out.stderr
    text = out.stdout
    # the environments: the JAX era and scikit-learn moved, torch did not
    assert "jax                              0.10.2 -> 0.4.38" in text
    assert "scikit-learn                     1.9.1 -> 1.5.2" in text
    assert "\n  torch " not in text
    # verdicts, figures and API facts, OLD -> NEW
    assert "STORY-17  verdict changed          fails (known) -> drift" in text
    assert "JIT-10    figure moved             n_equations: stated 16; 16 -> 17" in text
    assert "JAX-12    value changed            array_device: cpu:0 -> TFRT_CPU_0" in text
    # a timing claim moved with the load: reported, not counted
    timing = text.split("not counted:")[1]
    assert "TAPE-12" in timing and "TAPE-12" not in text.split("not counted:")[0]
    # the same verdict, known in one run and unexpected in the other
    assert "AMP-01    expectation changed      drift (known) -> drift" in text
    assert "ran in OLD only" in text and "\n8 claims changed (13 differences)\n" in text
    md = (tmp_path / "d.md").read_text()
    assert "| STORY-17 | verdict changed | fails (known) | drift |" in md
    page = (tmp_path / "d.html").read_text()
    HTMLParser().feed(page)
    assert "<td>JIT-10</td>" in page
    assert " src=" not in page and "<link" not in page   # one self-contained page


def test_a_run_against_itself_exits_0(tmp_path):
    out = _cli(JAX010, JAX010 / "claims.json", "--md", tmp_path / "same.md")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nothing changed" in out.stdout and "environment:" not in out.stdout
    assert "Nothing changed" in (tmp_path / "same.md").read_text()


def test_claims_that_became_not_applicable_or_partial_are_changes(tmp_path):
    def partial(claims):
        claims["ACC-03"]["verdict"] = "partial"
    new = _copy(JAX010, tmp_path / "new", partial)
    res = diff.compare(diff.load_run(OLDEST), diff.load_run(new))
    what = {(r["id"], r["what"]) for r in res["changes"]}
    assert ("AMP-04", "no longer not-applicable") in what
    res = diff.compare(diff.load_run(JAX010), diff.load_run(new))
    assert [(r["id"], r["what"], r["old"], r["new"]) for r in res["changes"]] == \
        [("ACC-03", "became partial", "holds", "partial")]
    res = diff.compare(diff.load_run(JAX010), diff.load_run(OLDEST))
    assert ("AMP-04", "became not-applicable") in {(r["id"], r["what"]) for r in res["changes"]}


def test_a_figure_inside_its_tolerance_or_judged_by_another_rule_is_not_a_change(tmp_path):
    def nudge(claims):
        for v in claims["STORY-17"]["variants"]:
            v["figures"]["GroupKFold fold-0 baseline"]["value"] += 0.001
        # the same value, no longer judged against a stated figure (a newer report schema)
        for v in claims["ACC-07"]["variants"]:
            for m in v["figures"].values():
                m.pop("stated", None), m.pop("within", None)

    res = diff.compare(diff.load_run(JAX010), diff.load_run(_copy(JAX010, tmp_path / "n", nudge)))
    assert res["changes"] == []


def test_a_timing_that_misses_its_interval_is_not_counted_unless_asked(tmp_path):
    def slow(claims):
        c = claims["TAPE-12"]
        c["verdict"] = "fails"
        for v in c["variants"]:
            v["figures"]["grad/no_grad"] = {"value": 0.71, "outcome": "broken", "rule": "bound > 1",
                                            "interval": [0.33, 0.88]}
    old, new = diff.load_run(JAX04), diff.load_run(_copy(JAX04, tmp_path / "slow", slow))
    res = diff.compare(old, new)
    assert res["changes"] == [] and [r["id"] for r in res["timing"]] == ["TAPE-12"]
    assert [r["id"] for r in diff.compare(old, new, count_timing=True)["changes"]] == ["TAPE-12"]


def test_a_statistical_interval_that_misses_its_bound_is_a_change(tmp_path):
    # STORY-04's fall in noise SDs comes with a +-2 SE interval over seeded epochs: it moves
    # with a release, not with the load; the same figure marked timed is set apart
    def stat(timed):
        def edit(claims):
            c = claims["STORY-04"]
            c["verdict"] = "fails"
            for v in c["variants"]:
                v["figures"]["fall after the first epoch, in noise SDs"] = {
                    "value": 2.53, "outcome": "broken", "rule": "bound >= 4",
                    "interval": [1.63, 3.42], "timed": timed}
        return edit
    full = HISTORY / "2026-11-29-ci-full-torch213-jax010-cpu2core"    # STORY-04 holds there
    old = diff.load_run(full)
    res = diff.compare(old, diff.load_run(_copy(full, tmp_path / "s", stat(False))))
    assert [r["id"] for r in res["changes"]] == ["STORY-04"] and res["timing"] == []
    res = diff.compare(old, diff.load_run(_copy(full, tmp_path / "t", stat(True))))
    assert res["changes"] == [] and [r["id"] for r in res["timing"]] == ["STORY-04"]


def test_unreadable_inputs_are_a_usage_error(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    for bad in (tmp_path / "missing", tmp_path / "bad.json", "last:no-such-label"):
        out = _cli(bad, JAX010)
        assert out.returncode == 2 and "diff:" in out.stdout, out.stdout


def test_keep_adds_the_run_to_the_history_and_last_finds_it(tmp_path, monkeypatch):
    history = tmp_path / "history"
    monkeypatch.setattr(diff.runs, "HISTORY", history)
    run = _copy(JAX04, tmp_path / "reports" / "latest")
    (run / "claims.md").write_text("# report\n")
    dest = diff.keep(run, "latest", note="tox -e latest -- --tier fast", history=history,
                     date="2027-01-02")
    assert dest == history / "2027-01-02-latest-cpu2core"
    assert sorted(p.name for p in dest.iterdir()) == ["NOTE.md", "claims.json", "claims.md"]
    note = (dest / "NOTE.md").read_text()
    assert "jax 0.4.38" in note and "tox -e latest -- --tier fast" in note
    with pytest.raises(diff.DiffError, match="exists already"):
        diff.keep(run, "latest", history=history, date="2027-01-02")
    newer = diff.keep(run, "py312-latest", history=history, date="2027-01-03")
    assert diff.resolve("last", history) == newer
    assert diff.resolve("last:latest", history) == dest       # a label, not a substring
    assert diff.resolve("last:py312-latest", history) == newer
    with pytest.raises(diff.DiffError, match="no run kept"):
        diff.resolve("last:oldest", history)
