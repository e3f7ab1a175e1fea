"""The cross-environment HTML report renders in a real browser.

Builds the claims matrix (support/reports/matrix.py) from two small synthetic runs, opens
``matrix.html`` in headless Chromium and reads back what the page's own script found after
loading: how many figures there are and how many decoded, how many tables and claim rows,
and the script errors caught; Chromium's console log (``--enable-logging=stderr``) must hold
no error either. A deliberately broken copy of the page (an undecodable image, a throwing
script) must be caught by the same check, so the check can fail.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skips with the reason where it
is absent.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.reports import matrix, runs

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium on this machine (Debian: apt-get install -y chromium)")


def _claim(cid, section, verdict, figures, stated=""):
    return {"id": cid, "document": "lecture", "section": section, "source": "L:1",
            "paraphrase": f"claim {cid}", "kind": "b", "tier": "fast", "stated": stated,
            "measured": None, "tolerance": "", "verdict": verdict, "reason": "", "expected": None,
            "tests": [f"claims/x.py::test_{cid}"],
            "variants": [{"test": f"claims/x.py::test_{cid}", "params": {}, "variant": "",
                          "verdict": verdict, "reason": "", "notes": [],
                          "measured": {k: m["value"] for k, m in figures.items()},
                          "figures": figures}]}


def _run(torch_v: str, jax_v: str, best_error: float, ad19: str, flag: bool) -> dict:
    steps = [10 ** (-1 - 12 * i / 39) for i in range(40)]
    errs = [max(h * h, 1e-16 / h) for h in steps]
    tol_p = {"printed": True, "key": "printed", "text": "printed"}
    claims = [
        _claim("AD-14", "Automatic differentiation", "holds", {
            "steps": {"value": steps, "unit": ""}, "errors": {"value": errs, "unit": ""},
            "best_error": {"value": best_error, "unit": "", "stated": "1.4e-12",
                           "tolerance": tol_p, "within": abs(best_error - 1.4e-12) < 0.05e-12},
            "best_h": {"value": 3e-7, "unit": "", "stated": "3e-7", "tolerance": tol_p,
                       "within": True}}, stated="1.4e-12"),
        _claim("ADAM-16", "Adam", "holds", {
            "step_over_lr_beta2_0.9": {"value": [1.0] * 200 + [0.2] * 50 + [0.9] * 350, "unit": ""},
            "step_over_lr_beta2_0.999": {"value": [1.0] * 200 + [1 / 60] * 400, "unit": ""}}),
        _claim("AD-19", "Automatic differentiation", ad19, {
            "warnings": {"value": 0, "unit": "", "stated": 0, "tolerance": {"key": "exact"},
                         "within": True}}),
        _claim("DTYPE-09", "The dtype trap", "holds", {
            "x64_default": {"value": flag, "unit": ""}}),
    ]
    return {"schema": 1, "elapsed_s": 1.0,
            "environment": {"python": "3.11", "cpu": "test cpu", "versions": {
                "torch": torch_v, "jax": jax_v, "numpy": "2.4.6"},
                "devices": [{"framework": "any", "type": "cpu", "name": "test cpu"}],
                "precision": {"torch_default_dtype": "torch.float32"}},
            "summary": {"holds": 3}, "claims": claims}


def _bench(device_ms: dict) -> dict:
    return {"machine_info": {"environment": {"versions": {"torch": "2.14.1"}}}, "benchmarks": [
        {"group": "width sweep, width 1024", "name": f"test_bench_width_sweep[{d}-w1024]",
         "fullname": f"claims/lecture/test_devices.py::test_bench_width_sweep[{d}-w1024]",
         "params": {"device": d, "width": 1024},
         "extra_info": {"claim": "DEV-07", "device": d, "width": 1024},
         "stats": {"median": ms / 1e3, "min": ms / 1e3}} for d, ms in device_ms.items()]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    a, b = root / "2026-01-01-torch213-jax010", root / "2026-01-02-torch214-jax04"
    for folder, data in ((a, _run("2.13.0", "0.10.2", 1.4e-12, "holds", False)),
                         (b, _run("2.14.1", "0.4.38", 9.0e-12, "fails", True))):
        folder.mkdir()
        (folder / "claims.json").write_text(json.dumps(data))
    (b / "bench_test_cuda.json").write_text(json.dumps(_bench({"cpu": 40.0, "cuda": 2.0})))
    res = matrix.build([a, b], root / "out", figures=HAS_MPL)
    return res, root / "out"


def test_the_matrix_lists_what_differs_before_the_full_table(built):
    res, out = built
    kinds = {(d["id"], d["kind"]) for d in res["differences"]}
    assert ("AD-19", "verdict flipped") in kinds
    assert ("AD-14", "figure moved") in kinds           # 1.4e-12 -> 9e-12, beyond "printed"
    assert ("DTYPE-09", "value changed") in kinds       # an unstated flag that changed
    assert not any(d["id"] == "ADAM-16" for d in res["differences"])   # identical series
    md = (out / "matrix.md").read_text()
    assert md.index("What differs") < md.index("## All claims")
    assert "0.4.38" in md and "2.14.1" in md            # the fingerprint names the versions
    cuda = [g for g in res["benchmarks"] if g["device"] == "cuda"]
    assert cuda and cuda[0]["speedup_vs_cpu"] == pytest.approx(20.0)


def _render(browser: str, page: Path, profile: Path) -> tuple[dict, list[str]]:
    proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tag = re.search(r"<span id=\"render-check\"([^>]*)>", proc.stdout)
    assert tag, "the page's render check did not run (no render-check span in the DOM)"
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', tag.group(1)))
    console = [line for line in proc.stderr.splitlines()
               if "CONSOLE" in line and ("Uncaught" in line or ":ERROR:" in line or "Error" in line)]
    return attrs, console


def test_the_html_report_renders_in_a_browser(built, tmp_path):
    browser = _browser()
    res, out = built
    attrs, console = _render(browser, out / "matrix.html", tmp_path / "profile")
    n_fig = len(res["figures"])
    assert int(attrs["figures"]) == n_fig and (n_fig == 6 or not HAS_MPL)
    assert int(attrs["loaded"]) == n_fig, "a figure did not decode"
    # environments, differences, benchmarks, and one table per section of the notes
    assert int(attrs["tables"]) >= 3 + 3
    assert int(attrs["rows"]) == 4
    assert attrs["errors"] == "" and console == []

    # negative control: a broken image and a throwing script are both caught
    broken = out / "broken.html"
    page = (out / "matrix.html").read_text()
    broken.write_text(page.replace(
        "<body>", "<body><script>window.notAFunction();</script>"
                  "<img class='figure' alt='broken' src='data:image/png;base64,AAAA'>", 1))
    attrs2, console2 = _render(browser, broken, tmp_path / "profile2")
    assert int(attrs2["figures"]) == n_fig + 1
    assert int(attrs2["loaded"]) == n_fig
    assert "notAFunction" in attrs2["errors"]
    assert any("notAFunction" in line for line in console2)


def test_the_matrix_survives_runs_that_measured_nothing(tmp_path):
    """A run with no figures' series gives 'not measured' panels, never a crash."""
    empty = copy.deepcopy(_run("2.13.0", "0.10.2", 1.4e-12, "holds", False))
    empty["claims"] = [c for c in empty["claims"] if c["id"] == "AD-19"]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "claims.json").write_text(json.dumps(empty))
    res = matrix.build([tmp_path / "r"], tmp_path / "out", figures=HAS_MPL)
    assert (tmp_path / "out" / "matrix.html").exists()
    if HAS_MPL:
        assert len(res["figures"]) == 6 and all(f["note"] for f in res["figures"])


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed (pip install -e '.[figures]')")
def test_every_figure_draws_from_a_real_report(tmp_path):
    """On a kept run (claims/history), no figure fails to draw: a measurement a figure
    reads and its DRAWN table does not declare raises, and the note says so."""
    from support.reports import figures
    kept = sorted(p for p in runs.HISTORY.glob("*/claims.json")
                  if json.loads(p.read_text()).get("schema") == 2)
    if not kept:
        pytest.skip("no schema-2 run kept in claims/history")
    newest = kept[-1]
    drawn = figures.draw_all([(newest.parent.name, json.loads(newest.read_text()), [])], tmp_path)
    assert drawn and not [f for f in drawn if "could not draw" in f.get("note", "")]


def test_every_claim_a_figure_reads_belongs_to_that_figure():
    """A figure lists the claims it draws (the annotated notes embed it beside them)."""
    from support.reports.figure_data import DRAWN
    pytest.importorskip("matplotlib")
    from support.reports.panels import FIGURES
    listed = {c for *_f, claims in FIGURES for c in claims}
    assert set(DRAWN) <= listed, sorted(set(DRAWN) - listed)
