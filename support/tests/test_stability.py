"""``python -m support stability --load K``: the busy processes it starts stop with the run
(and without it), and only a change between a decided verdict and inconclusive is put down
to the load."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from support.commands import suite_runs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone: it runs nothing
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_the_load_spins_for_the_run_and_is_gone_after_it():
    with suite_runs.Load(2) as load:
        pids = [p.pid for p in load.procs]
        time.sleep(0.5)
        assert all(p.poll() is None for p in load.procs)
        if os.path.exists(f"/proc/{pids[0]}/stat"):
            # busy: each spinner used CPU time while the block ran
            ticks = [sum(map(int, open(f"/proc/{pid}/stat").read().split(")")[-1].split()[11:13]))
                     for pid in pids]
            assert all(t > 0 for t in ticks), ticks
    assert not any(_alive(pid) for pid in pids)


def test_a_spinner_stops_by_itself_when_the_command_that_started_it_dies():
    # the command is killed outright (no cleanup runs): its spinner notices and exits
    code = ("import sys, time; from support.commands import suite_runs\n"
            "load = suite_runs.Load(1).__enter__()\n"
            "print(load.procs[0].pid, flush=True)\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    spinner = int(parent.stdout.readline())
    assert _alive(spinner)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(spinner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(spinner), "a spinner outlived the command that started it"


def test_a_spinner_stops_at_its_deadline():
    p = subprocess.Popen([sys.executable, "-c", suite_runs.SPINNER, str(os.getpid()), "0.3"])
    assert p.wait(timeout=10) == 0


@pytest.mark.parametrize("seen,load", [
    ({"holds": [1, 2], "inconclusive": [3]}, True),
    ({"fails": [1], "inconclusive": [2]}, True),
    ({"holds": [1], "drift": [2]}, False),                  # a move, load or not
    ({"holds": [1], "fails": [2], "inconclusive": [3]}, False),
    ({"partial": [1], "inconclusive": [2]}, False),
])
def test_only_decided_versus_inconclusive_is_put_down_to_the_load(seen, load):
    assert suite_runs.with_the_load(seen) is load


def test_a_change_is_listed_with_the_figures_and_intervals_it_was_read_from():
    report = {"claims": [{"id": "AD-01", "verdict": "inconclusive", "variants": [
        {"variant": "jax", "verdict": "inconclusive", "figures": {
            "(forward+backward)/forward": {"value": 3.31, "interval": [2.52, 4.33],
                                           "outcome": "undecided"},
            "forward min": {"value": 0.002}}}]}]}
    assert suite_runs.deciding_figures(report, "AD-01[jax]") == \
        "(forward+backward)/forward = 3.31 [2.52, 4.33] (undecided)"


@pytest.mark.parametrize("cached", [False, True])
def test_cached_runs_keep_the_result_cache_and_fresh_runs_do_not(cached, monkeypatch, tmp_path):
    import argparse
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "1 passed\n", "")

    monkeypatch.setattr(suite_runs.subprocess, "run", fake_run)
    args = argparse.Namespace(out=tmp_path, workers="2", cached=cached, order="none",
                              profile="dev", load=0)
    got = suite_runs.run_once(1, None, args, [])
    assert ("--fresh" in seen[0]) is not cached
    assert got["green"]


def test_stability_reports_a_verdict_that_changed_and_nothing_that_did_not():
    runs = [{"run": 1, "verdicts": {"AD-03": "holds", "TAPE-12": "holds"}},
            {"run": 2, "verdicts": {"AD-03": "holds", "TAPE-12": "inconclusive"}},
            {"run": 3, "verdicts": {"AD-03": "holds"}}]
    assert suite_runs.changed(runs) == {
        "TAPE-12": {"holds": [1], "inconclusive": [2], "absent": [3]}}


def test_stability_reads_claim_and_variant_verdicts_from_a_report():
    report = {"claims": [
        {"id": "AD-03", "verdict": "holds", "variants": [
            {"variant": "torch", "verdict": "holds"}, {"variant": "jax", "verdict": "holds"}]},
        {"id": "GPU-01", "verdict": "not-run", "variants": []}]}
    assert suite_runs.verdicts_of(report) == {"AD-03": "holds", "AD-03[torch]": "holds",
                                            "AD-03[jax]": "holds"}
