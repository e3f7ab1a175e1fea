"""support.reports.causes: every change ``diff`` finds is labelled by its cause (a release,
the suite, the machine, or unexplained), from what the two reports record and the suite at
their two commits (support.reports.revisions). Read from edited copies of a kept run, each
edit the one difference the cause names."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT
from support.reports import diff, revisions

FULL = ROOT / "claims" / "history" / "2026-12-01-latest-cpu2core"


def _copy(dest: Path, edit=None) -> diff.runs.Run:
    data = json.loads((FULL / "claims.json").read_text())
    if edit:
        edit(data, {c["id"]: c for c in data["claims"]})
    dest.mkdir(parents=True)
    (dest / "claims.json").write_text(json.dumps(data))
    return diff.load_run(dest)


def _causes(tmp_path, edit, old_edit=None) -> dict[tuple[str, str], diff.causes.Cause]:
    old = _copy(tmp_path / "old", old_edit)
    new = _copy(tmp_path / "new", edit)
    res = diff.compare(old, new, count_timing=True)
    return {(r["id"], r.get("figure") or r["what"]): r["cause"] for r in res["changes"]}


def _figure(claims, cid, name):
    return next(v["figures"][name] for v in claims[cid]["variants"] if name in v["figures"])


def test_a_figure_judged_by_another_rule_is_the_suites(tmp_path):
    def edit(data, claims):
        m = _figure(claims, "DS-09", "ratio")
        m["value"], m["outcome"], m["within"] = 3.9, "outside", False
        m["tolerance"] = {"rtol": 0.1, "key": "about", "text": "rtol 0.1"}
        m["rule"] = "stated 3 (rtol 0.1)"
        claims["DS-09"]["verdict"] = "drift"
    got = _causes(tmp_path, edit)
    cause = got[("DS-09", "verdict changed")]
    assert cause.kind == "suite" and "the rule of 'ratio' changed" in cause.why
    assert "-> stated 3 (rtol 0.1)" in cause.why


def test_a_figure_the_test_no_longer_records_is_the_suites(tmp_path):
    def edit(data, claims):
        claims["DS-09"]["verdict"] = "fails"
        for v in claims["DS-09"]["variants"]:
            v["figures"]["tripled, read otherwise"] = {"value": False, "outcome": "broken",
                                                       "bound": ["== true"], "stated": None}
    cause = _causes(tmp_path, edit)[("DS-09", "verdict changed")]
    assert cause.kind == "suite" and "records other figures" in cause.why


def _avx512(data):
    cpu = data["environment"]["cpu_dispatch"]
    cpu["features"] = sorted(cpu["features"] + ["AVX512F", "AVX512CD", "X86_V4"])
    cpu["argsort_int64"] = "AVX512_SKX"
    for lib in data["environment"]["blas"]:
        if lib.get("architecture"):
            lib["architecture"] = "SkylakeX"


def test_figures_an_entry_says_follow_the_cpu_are_the_machines(tmp_path):
    def edit(data, claims):
        _avx512(data)
        _figure(claims, "AD-13", "torch_vs_hand")["value"] = 1.734723475976807e-18
    cause = _causes(tmp_path, edit)[("AD-13", "torch_vs_hand")]
    assert cause.kind == "machine", cause
    assert "cpu vector level X86_V3 -> X86_V4 (AVX-512)" in cause.why
    assert "blas kernels openblas Haswell -> openblas SkylakeX" in cause.why
    # the same move on the same machine: nothing recorded explains it
    def same_machine(data, claims):
        _figure(claims, "AD-13", "torch_vs_hand")["value"] = 1.734723475976807e-18
    cause = _causes(tmp_path / "same", same_machine)[("AD-13", "torch_vs_hand")]
    assert cause.kind == "unexplained"
    assert "the versions, the suite and the machine are the same" in cause.why


def test_a_variant_named_by_the_machine_is_the_machines(tmp_path):
    def edit(data, claims):
        _avx512(data)
        for v in claims["STORY-17"]["variants"]:
            v["variant"] = "numpy_argsort_AVX512_SKX"
            v["figures"]["numpy argsort dispatch"]["value"] = "AVX512_SKX"
    cause = _causes(tmp_path, edit)[("STORY-17", "numpy argsort dispatch")]
    assert cause.kind == "machine" and "numpy argsort (int64): AVX2 -> AVX512_SKX" in cause.why


def test_a_moved_api_fact_under_a_new_release_is_the_releases(tmp_path):
    def edit(data, claims):
        data["environment"]["versions"].update(jax="0.11.0", jaxlib="0.11.0", torch="2.16.0")
        _figure(claims, "JAX-12", "array_device")["value"] = "CpuDevice(id=0)"
    cause = _causes(tmp_path, edit)[("JAX-12", "array_device")]
    assert cause.kind == "release"
    assert "jax 0.10.2 -> 0.11.0" in cause.why and "jaxlib 0.10.2 -> 0.11.0" in cause.why


def test_the_test_tools_versions_are_no_release(tmp_path):
    def edit(data, claims):
        data["environment"]["versions"]["hypothesis"] = "7.0.0"
        _figure(claims, "JAX-12", "array_device")["value"] = "CpuDevice(id=0)"
    cause = _causes(tmp_path, edit)[("JAX-12", "array_device")]
    assert cause.kind == "unexplained" and "hypothesis 6.170.17 -> 7.0.0" in cause.why


def test_the_same_outcomes_read_into_another_verdict_are_the_verdict_rules(tmp_path):
    def edit(data, claims):
        claims["TAPE-07"]["verdict"] = "inconclusive"
    cause = _causes(tmp_path, edit)[("TAPE-07", "verdict changed")]
    assert cause.kind == "suite" and "support/rules/verdicts.py" in cause.why


def _commit_known(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode == 0


def test_a_test_rewritten_between_the_two_commits_is_the_suites(tmp_path):
    """JIT-23's test was rewritten after the kept run's commit to catch the exception class
    JAX raises for a Python if on a traced value: read from git at both commits."""
    old_commit = "2e3136e4edc271be255da0d1d8fbdb307b9d1ed4"
    if not _commit_known(old_commit) or not revisions.Revision("HEAD").readable:
        pytest.skip("the suite's history is not in this checkout (a shallow clone)")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    from support.rules.sources import static_claim_markers
    now = static_claim_markers()["JIT-23"]

    def old(data, claims):
        data["environment"]["suite_commit"] = old_commit

    def new(data, claims):
        data["environment"]["suite_commit"] = head
        claims["JIT-23"]["tests"] = now
        m = _figure(claims, "JIT-23", "python_if_under_jit")
        m["value"] = "TracerBoolConversionError"
    cause = _causes(tmp_path, new, old)[("JIT-23", "python_if:python_if_under_jit")]
    assert cause.kind == "suite" and "its test changed between the commits" in cause.why
    assert "test_data_dependent_branches_need_framework_control_flow" in cause.why


def test_a_commit_git_does_not_have_is_said(tmp_path):
    def edit(data, claims):
        data["environment"]["suite_commit"] = "0" * 40
        _figure(claims, "JAX-12", "array_device")["value"] = "CpuDevice(id=0)"
    cause = _causes(tmp_path, edit)[("JAX-12", "array_device")]
    assert cause.kind == "unexplained" and "is not in this checkout's history" in cause.why


def test_an_entry_is_compared_by_what_decides_not_by_its_file_or_prose():
    """The same claim in the registry's two layouts (one file per prefix, then one file per
    section beside its tests) is the same entry when its judged fields are."""
    rev = revisions.Revision(None)
    assert not rev.readable and "records no suite commit" in rev.problem
    a = revisions._without_prose({"figures": [{"name": "x", "stated": 3, "why": "a"}]})
    b = revisions._without_prose({"figures": [{"name": "x", "stated": 3, "why": "b"}]})
    assert a == b
    one = revisions._code(__import__("ast").parse(
        'def test_a(claim):\n    """words"""\n    claim.check("x", 1)  # why\n').body[0])
    two = revisions._code(__import__("ast").parse(
        'def test_renamed(claim):\n    claim.check("x", 1)\n').body[0])
    three = revisions._code(__import__("ast").parse(
        'def test_a(claim):\n    claim.check("x", 2)\n').body[0])
    assert one == two != three
