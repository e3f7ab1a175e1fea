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

from support.reports import causes, diff, keep

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "claims" / "history"
JAX010 = HISTORY / "2026-11-29-py311-torch213-jax010-cpu2core"
JAX04 = HISTORY / "2026-11-29-py311-torch213-jax04-cpu2core"
OLDEST = HISTORY / "2026-11-29-py311-oldest-cpu2core"
FULL = HISTORY / "2026-12-01-latest-cpu2core"             # every default tier, schema 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "support", "diff", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _copy(src: Path, dest: Path, edit=None, run=None) -> Path:
    """A copy of a kept run's report, its claims edited by ``edit`` ({id: claim}) and the
    report itself by ``run``."""
    data = json.loads((src / "claims.json").read_text())
    if edit:
        edit({c["id"]: c for c in data["claims"]})
    if run:
        run(data)
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
    assert "ran in OLD only" in text and "\n8 claims changed (13 differences); by cause: " in text
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
    run = _copy(FULL, tmp_path / "reports" / "latest")
    (run / "claims.md").write_text("# report\n")
    dest = keep.keep(run, "latest", note="tox -e latest", history=history, date="2027-01-02")
    assert dest == history / "2027-01-02-latest-cpu2core"
    assert sorted(p.name for p in dest.iterdir()) == ["NOTE.md", "claims.json", "claims.md"]
    note = (dest / "NOTE.md").read_text()
    assert "jax 0.10.2" in note and "tox -e latest" in note
    assert "cpu vector level X86_V3; numpy argsort (int64) AVX2; blas kernels openblas Haswell" \
        in note
    # a report of the 2026-11-29 runs, which recorded no selection: partial by its not-run claims
    older = keep.keep(JAX04, "jax04", history=history, date="2027-01-02")
    assert older.name == "2027-01-02-jax04-partial-cpu2core"
    with pytest.raises(diff.DiffError, match="exists already"):
        keep.keep(run, "latest", history=history, date="2027-01-02")
    newer = keep.keep(run, "py312-latest", history=history, date="2027-01-03")
    assert diff.resolve("last", history)[0] == newer
    assert diff.resolve("last:latest", history)[0] == dest    # a label, not a substring
    assert diff.resolve("last:py312-latest", history)[0] == newer
    with pytest.raises(diff.DiffError, match="no run kept"):
        diff.resolve("last:oldest", history)


# --------------------------------------------------------------------------- partial runs
def _fast(data: dict) -> None:
    """The report of a fast-tier run: the plugin's record of its selection, and the claims
    of the other tiers not run."""
    data["selection"] = {"tiers": ["fast"], "default_tiers": ["fast", "slow", "gpu"],
                         "claims": [], "keyword": "", "markexpr": "", "paths": [],
                         "last_failed": False}
    for c in data["claims"]:
        if c.get("tier") in ("slow", "gpu") and c.get("verdict") != "not-testable":
            c["verdict"], c["variants"] = "not-run", []


def test_keep_records_what_a_partial_run_selected(tmp_path):
    history = tmp_path / "history"
    run = _copy(FULL, tmp_path / "reports" / "latest", run=_fast)
    dest = keep.keep(run, "latest", history=history, date="2027-01-02")
    assert dest.name == "2027-01-02-latest-fast-cpu2core"       # never taken for a full run
    note = (dest / "NOTE.md").read_text()
    sel = diff.runs.selection(json.loads((run / "claims.json").read_text()))
    assert not sel.full and sel.not_run
    assert f"* selection: a partial run: tiers fast; {len(sel.not_run)} claims not run: " \
           + ", ".join(sel.not_run[:3]) in note
    full = keep.keep(FULL, "latest", history=history, date="2027-01-02")
    assert full.name == "2027-01-02-latest-cpu2core"
    assert "* selection: every default tier\n" in (full / "NOTE.md").read_text()


def test_last_picks_a_run_of_the_same_selection_and_never_a_partial_one_for_a_full_run(tmp_path):
    history = tmp_path / "history"
    full_run = keep.keep(FULL, "latest", history=history, date="2027-01-01")
    fast_run = keep.keep(_copy(FULL, tmp_path / "fast", run=_fast), "latest", history=history,
                         date="2027-01-02")
    full, fast = diff.load_run(FULL), diff.load_run(fast_run)
    path, how = diff.resolve("last:latest", history, like=full)
    assert path == full_run and "same selection (every default tier)" in how
    path, how = diff.resolve("last:latest", history, like=fast)
    assert path == fast_run and "same selection (a partial run: tiers fast" in how
    # only partial runs kept: taken, and said
    only = tmp_path / "only"
    keep.keep(fast_run, "latest", history=only, date="2027-01-03")
    path, how = diff.resolve("last:latest", only, like=full)
    assert path.name.endswith("latest-fast-cpu2core") and "no full run kept" in how
    # a fast-tier NEW with only a full run kept: compared on what both ran, and said
    one = tmp_path / "one"
    keep.keep(FULL, "latest", history=one, date="2027-01-01")
    path, how = diff.resolve("last:latest", one, like=fast)
    assert "no kept run of NEW's selection" in how
    res = diff.compare(diff.load_run(path), fast)
    assert "NEW is a partial run: tiers fast" in diff.text(res)


# --------------------------------------------------------------------------- causes
def test_fail_on_release_counts_only_the_changes_a_release_caused(tmp_path):
    def machine_only(data):
        data["environment"]["cpu_dispatch"]["argsort_int64"] = "AVX512_SKX"
        data["environment"]["cpu_dispatch"]["features"] += ["AVX512F", "X86_V4"]
        c = {c["id"]: c for c in data["claims"]}["STORY-17"]
        for v in c["variants"]:
            v["variant"] = v["variant"].replace("AVX2", "AVX512_SKX")
            v["test"] = v["test"].replace("AVX2", "AVX512_SKX")
            v["figures"]["numpy argsort dispatch"]["value"] = "AVX512_SKX"

    def and_release(data):
        machine_only(data)
        data["environment"]["versions"]["jax"] = "0.11.0"
        data["environment"]["versions"]["jaxlib"] = "0.11.0"
        c = {c["id"]: c for c in data["claims"]}["JAX-12"]
        for v in c["variants"]:
            for m in v["figures"].values():
                if m["value"] == "cpu:0":
                    m["value"] = "CpuDevice(id=0)"

    base = _copy(FULL, tmp_path / "base", run=lambda d: None)
    moved = _copy(FULL, tmp_path / "machine", run=machine_only)
    out = _cli(base, moved, "--fail-on", "release")
    assert out.returncode == 0, out.stdout
    assert "by cause: machine 1" in out.stdout and "0 claim(s) changed by a release" in out.stdout
    assert _cli(base, moved).returncode == 1                  # strict by default
    both = _copy(FULL, tmp_path / "both", run=and_release)
    out = _cli(base, both, "--fail-on", "release")
    assert out.returncode == 1, out.stdout
    assert "JAX-12" in out.stdout and "release: jax 0.10.2 -> 0.11.0, jaxlib 0.10.2 -> 0.11.0" \
        in out.stdout


def test_a_changed_claim_says_what_its_entry_knows_moves_it(tmp_path):
    """An entry's version_note ("JAX-version-sensitive") is what a lecturer reading a change
    needs beside it: the diff prints it under the claim, from the checkout's entries, so kept
    runs written before the note get it too; a claim without one prints none."""
    lines = _cli(JAX010, JAX04).stdout.splitlines()

    def under(change: str) -> list[str]:
        at = next(i for i, line in enumerate(lines) if line.startswith("  " + change))
        block = []
        for line in lines[at + 1:]:
            if not line.startswith(" " * 34):       # the next change, or the end
                return block
            block.append(line)
        return block
    assert any("known to move: JAX-version-sensitive" in x for x in under("JIT-10    figure"))
    assert not any("known to move" in x for x in under("AMP-01    expectation"))
    assert causes.todays_entries(tmp_path) == {}       # no entries there: nothing to say
