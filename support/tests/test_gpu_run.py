"""support/commands/gpu_run.py and its steps without a GPU: where CUDA is absent the command
refuses loudly and runs nothing; its steps are stopped at their deadlines, process group and all; the summary is
on disk after every step, a stopped one included; the whole run keeps to its budget; and the
GPU tier's code paths import nothing the GPU machine lacks.

The run's steps are fake child processes here (a script standing in for pytest) and the
device probe is replaced by a stub named as such: nothing in this file measures a claim or
pretends that this machine has a GPU."""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from argparse import Namespace
from pathlib import Path

import pytest

from support import cli
from support.commands import gpu_reports, gpu_run, gpu_steps, step_process
from support.machine import devices

FAKE_DEVICE = {"device": "cuda", "name": "stub accelerator of the self-tests"}


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (reaped, or a zombie) within ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- refusal
@pytest.mark.skipif(devices.available("cuda"), reason="this machine has CUDA: the run would start")
def test_without_cuda_nothing_runs_and_the_summary_says_why(tmp_path, capsys):
    assert cli.main(["gpu-run", "--out", str(tmp_path)]) == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False and "no CUDA device" in summary["error"]
    assert summary["steps"] == []
    assert "NO CUDA DEVICE" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_run.log", "summary.json"]


# --------------------------------------------------------------------------- deadlines
def test_a_step_past_its_deadline_is_stopped_with_its_whole_process_group(tmp_path):
    # the child starts a grandchild, prints half a line and sleeps; the old loop read lines
    # until the child closed its output, so neither the deadline nor the log saw anything
    child = _script(tmp_path, "child.py", f"""
        import subprocess, sys, time
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(tmp_path / "grandchild.pid")!r}, "w").write(str(g.pid))
        sys.stdout.write("half a line, no newline")
        sys.stdout.flush()
        time.sleep(60)
    """)
    log = tmp_path / "log"
    t0 = time.monotonic()
    st = step_process.run_step("slow", [sys.executable, str(child)], 3.0, log, grace=1.0)
    wall = time.monotonic() - t0
    assert st["rc"] == step_process.STOPPED and "interrupted (SIGINT)" in st["stopped"]
    assert wall < 3.0 + 1.0, f"stopped after {wall:.1f} s, past its 3 s limit"
    assert "half a line, no newline" in log.read_text()
    assert _gone(int((tmp_path / "grandchild.pid").read_text()))


def test_a_run_started_in_the_background_still_interrupts_its_steps(tmp_path, monkeypatch):
    # a shell starts a background command with SIGINT ignored, and children inherit that:
    # the deadline's SIGINT must still reach the step, which then writes its report
    import signal
    child = _script(tmp_path, "child.py", """
        import time
        print("started", flush=True)
        time.sleep(60)
    """)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        st = step_process.run_step("background", [sys.executable, str(child)], 3.0,
                              tmp_path / "log", grace=2.0)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert st["rc"] == step_process.STOPPED and "interrupted (SIGINT)" in st["stopped"]


def test_a_child_deaf_to_sigint_is_killed_when_the_grace_ends(tmp_path):
    child = _script(tmp_path, "deaf.py", """
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ignoring SIGINT", flush=True)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    st = step_process.run_step("deaf", [sys.executable, str(child)], 2.0, tmp_path / "log", grace=1.0)
    assert st["rc"] == step_process.STOPPED and "killed (SIGKILL)" in st["stopped"]
    assert time.monotonic() - t0 < 2.0 + 1.0


def test_what_a_finished_step_leaves_running_is_stopped_too(tmp_path):
    # a grandchild that outlives its parent keeps the output pipe open: without the group's
    # kill the log reader would wait for it
    child = _script(tmp_path, "leaves.py", f"""
        import subprocess, sys
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(tmp_path / "left.pid")!r}, "w").write(str(g.pid))
        print("done", flush=True)
    """)
    t0 = time.monotonic()
    st = step_process.run_step("leaves", [sys.executable, str(child)], 30.0, tmp_path / "log")
    assert st["rc"] == 0 and "stopped" not in st
    assert time.monotonic() - t0 < 10.0
    assert _gone(int((tmp_path / "left.pid").read_text()))


# --------------------------------------------------------------------------- the whole run
FAKE_PYTEST = """
import json, os, sys, time
args = sys.argv[1:]
report = next(a.split("=", 1)[1] for a in args if a.startswith("--claims-report="))
step = os.path.basename(report)
with open(os.environ["FAKE_CALLS"], "a") as fh:
    fh.write(json.dumps({"step": step, "args": args}) + "\\n")
action = json.loads(os.environ["FAKE_PLAN"]).get(step, "report")
if action == "copy-summary":    # what a later step finds on disk
    out = os.environ["FAKE_OUT"]
    with open(os.path.join(out, "summary.json")) as src, open(os.environ["FAKE_SEEN"], "w") as dst:
        dst.write(src.read())
    action = "report"
if action == "deaf":          # deaf to SIGINT: it runs until the SIGKILL
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    action = "hang"
if action == "hang":
    print(step, "hangs", flush=True)
    time.sleep(600)
bench = next((a.split("=", 1)[1] for a in args if a.startswith("--benchmark-json=")), None)
if bench:
    open(bench, "w").write(json.dumps({"benchmarks": []}))
claims = [a.split("=", 1)[1] for a in args if a.startswith("--claim=")] or ["DEV-05"]
entry = lambda cid, verdict: {"id": cid, "document": "lecture", "section": "Devices",
    "paraphrase": cid, "stated": "", "measured": None, "verdict": verdict, "reason": "",
    "expected": None, "variants": [], "tests": []}
ran = [entry(c, "holds") for c in claims]
rest = [entry(c, "not-run") for c in ("DEV-01", "DEV-05", "DEV-07") if c not in claims]
os.makedirs(report, exist_ok=True)
json.dump({} if action == "empty" else
          {"schema": 2, "environment": {}, "elapsed_s": 1.0, "summary": {},
           "unexpected": [], "stale_expectations": [], "claims": ran + rest},
          open(os.path.join(report, "claims.json"), "w"))
print(step, "ok", flush=True)
sys.exit(1 if action == "fail" else 0)     # "fail": tests failed, the report written
"""


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    """gpu_run with the device probe stubbed and a fake pytest as every step's child;
    returns run(plan, budget_s) -> (exit code, summary, calls, wall seconds)."""
    fake = _script(tmp_path, "fake_pytest.py", FAKE_PYTEST)
    out = tmp_path / "out"
    monkeypatch.setattr(gpu_run, "_preflight", lambda out: dict(FAKE_DEVICE))
    monkeypatch.setattr(gpu_steps, "PYTEST", [sys.executable, str(fake)])
    monkeypatch.setattr(gpu_run, "MIN_STEP_S", 0.5)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_OUT", str(out))
    monkeypatch.setenv("FAKE_SEEN", str(tmp_path / "seen.json"))

    def run(plan: dict, budget_s: float, no_bench: bool = False):
        monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
        args = Namespace(out=str(out), concrete_data=None, no_bench=no_bench, budget_s=budget_s)
        t0 = time.monotonic()
        rc = gpu_run.run(args)
        wall = time.monotonic() - t0
        calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
        return rc, json.loads((out / "summary.json").read_text()), calls, wall
    return run


def test_the_steps_run_in_the_order_of_what_matters_most(fake_run, tmp_path):
    rc, summary, calls, _ = fake_run({}, budget_s=gpu_run.BUDGET_S)
    assert rc == 0 and summary["ok"] and summary["complete"]
    assert [c["step"] for c in calls] == ["claims-cpu-vs-gpu", "claims-dev01-amp10",
                                          "claims-gpu-rest", "claims-cuda-variants",
                                          "controls-gpu", "control-the-card-is-the-cpu",
                                          "control-cpu-steps-cost-20-ms-more",
                                          "bench-cuda", "bench-cpu"]
    first, second, rest, variants, ctls, level, fixed = (c["args"] for c in calls[:7])
    assert {a for a in first if a.startswith("--claim=")} == {
        "--claim=DEV-07", "--claim=DEV-08", "--claim=DEV-09", "--claim=DEV-13", "--claim=DEV-14"}
    assert {a for a in second if a.startswith("--claim=")} == {"--claim=DEV-01", "--claim=AMP-10"}
    k = rest[rest.index("-k") + 1]
    assert k.startswith("not (") and all(c in k for c in ("DEV-07", "DEV-14", "DEV-01", "AMP-10"))
    for args in (first, second, rest):
        assert args[args.index("--tier") + 1] == "gpu" and "--require-device" in args
        assert "--only-device" not in args
    # outside the GPU tier, only the CUDA variants of device-generic tests
    assert variants[variants.index("--tier") + 1] == "fast,slow"
    assert variants[variants.index("--only-device") + 1] == "cuda"
    assert variants[variants.index("-m") + 1] == "needs_device"
    assert "--require-device" in variants and "--claim=DEV-10" in variants
    # the controls step: the GPU tier's quick claims under their test-scope controls
    assert "--controls" in ctls and ctls[ctls.index("--tier") + 1] == "gpu"
    assert "--require-device" in ctls and "--claim=DEV-02" in ctls
    assert "--controls" not in first + second + rest + variants + level + fixed
    # the process-scope controls: each its own fresh session, which selects its claims
    for args, name in ((level, "the-card-is-the-cpu"), (fixed, "cpu-steps-cost-20-ms-more")):
        assert f"--control={name}" in args and "--fresh" in args
        assert args[args.index("--tier") + 1] == "gpu" and "--require-device" in args
        assert not [a for a in args if a.startswith("--claim=")] and "-k" not in args
    judged = json.loads((tmp_path / "out" / "controls.json").read_text())
    names = [c["name"] for c in judged["controls"]]
    assert {"layers-move-the-data-themselves", "device-error-says-nothing",
            "the-card-is-the-cpu-nine-and-a-half-times-faster"} <= set(names)
    # the three steps' controls in one file, each once, in the order they ran
    assert names[-2:] == ["the-card-is-the-cpu", "cpu-steps-cost-20-ms-more"]
    assert len(names) == len(set(names))
    assert [c["scope"] for c in judged["controls"]][-2:] == ["process", "process"]
    assert {"DEV-06", "DEV-09", "DEV-12", "RNG-08"} <= set(judged["claims"])
    # the fake sessions ran no control variant: each is "not run", none is called red
    assert set(judged["counts"]) == {"not run"}
    assert sum(judged["counts"].values()) == sum(len(c["results"]) for c in judged["controls"])
    for i, step in ((4, "controls-gpu"), (5, "control-the-card-is-the-cpu")):
        assert summary["steps"][i]["controls"] == judged["steps"][step]
    assert judged["steps"]["control-the-card-is-the-cpu"] == {"not run": 6}
    # the merged report holds each claim from the step that ran it
    merged = json.loads((tmp_path / "out" / "claims.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in merged["claims"]}
    assert verdicts["DEV-07"] == verdicts["AMP-10"] == verdicts["DEV-05"] == "holds"
    assert merged["summary"]["holds"] == len([v for v in verdicts.values() if v == "holds"])
    # a folder that comes back whole: at most 8 files, no subfolders, nothing half-written
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert all((tmp_path / "out" / f).is_file() for f in files) and len(files) <= 8
    assert {"claims.json", "claims.md", "summary.json", "gpu_run.log",
            "controls.json"} <= set(files)
    assert sum(f.startswith("bench_") and f.endswith(("_cuda.json", "_cpu.json"))
               for f in files) == 2
    assert sorted(Path(p).name for p in summary["files"]) == files


@pytest.mark.parametrize("action,rc", [("fail", 0), ("empty", 1)])
def test_the_controls_step_passes_when_its_controls_did_what_they_declare(fake_run, action, rc):
    """Under a negative control its test fails, as it should: pytest's exit status then says
    nothing, and the step's is the controls run's (a survivor, a positive control that stayed
    red or a control whose session wrote no report fails it)."""
    code, summary, _, _ = fake_run({"controls-gpu": action}, budget_s=60.0, no_bench=True)
    [st] = [s for s in summary["steps"] if s["step"] == "controls-gpu"]
    assert st["pytest_rc"] == (1 if action == "fail" else 0) and st["rc"] == rc == code
    assert ("broken" in st["controls"]) == (action == "empty")


def test_a_summary_is_on_disk_after_a_stopped_step_and_the_run_goes_on(fake_run, tmp_path):
    rc, summary, calls, _ = fake_run({"claims-cpu-vs-gpu": "hang",
                                      "claims-dev01-amp10": "copy-summary"}, budget_s=40.0)
    # what the second step found on disk: the first step, stopped at its deadline
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["complete"] is False
    assert [s["step"] for s in seen["steps"]] == ["claims-cpu-vs-gpu"]
    assert seen["steps"][0]["rc"] == step_process.STOPPED and "deadline" in seen["steps"][0]["stopped"]
    # the run went on and says what was stopped
    assert rc == step_process.STOPPED and summary["complete"] and not summary["ok"]
    assert [s["rc"] for s in summary["steps"]] == [step_process.STOPPED] + [0] * 8
    assert summary["steps"][1]["verdicts"] == {"holds": 2}
    # a claim the stopped step did not reach says so, not "not selected"
    merged = {c["id"]: c for c in json.loads((tmp_path / "out" / "claims.json").read_text())
              ["claims"]}
    assert merged["DEV-07"]["verdict"] == "not-run"
    assert merged["DEV-07"]["reason"].startswith(
        "not reached: the GPU run's step claims-cpu-vs-gpu was interrupted (SIGINT)")


def test_the_claims_a_stopped_step_did_not_reach_say_so():
    entry = lambda cid, tier, verdict="not-run": {"id": cid, "tier": tier, "verdict": verdict,
                                                  "reason": "its tests were not selected"}
    merged = {"claims": [entry("DEV-08", "gpu"), entry("DEV-12", "gpu"),
                         entry("DEV-05", "gpu", "holds"), entry("TAPE-07", "fast")]}
    gpu_reports.mark_not_reached(merged, {"claims-gpu-rest": "was skipped: no time left"})
    reasons = {c["id"]: c["reason"] for c in merged["claims"]}
    assert reasons["DEV-12"] == ("not reached: the GPU run's step claims-gpu-rest was "
                                 "skipped: no time left")
    # another step's claim, a claim that ran, a claim outside the GPU tier: as they were
    assert reasons["DEV-08"] == reasons["DEV-05"] == reasons["TAPE-07"] == \
        "its tests were not selected"


def test_the_whole_run_keeps_to_its_budget(fake_run):
    budget = 8.0
    # every step runs until it is killed at its deadline
    rc, summary, calls, wall = fake_run({s.name: "deaf" for s in gpu_steps.plan()},
                                        budget_s=budget)
    steps = summary["steps"]
    assert rc == step_process.STOPPED and all(s["rc"] == step_process.STOPPED for s in steps)
    spent = 0.0
    for s, step in zip(steps, gpu_steps.plan()):
        if "skipped" in s:
            continue
        assert "killed (SIGKILL)" in s["stopped"]
        # no more than its share, nor than what the steps before it left
        assert s["limit_s"] <= max(step.share * budget, gpu_run.MIN_STEP_S) + 1e-6
        assert spent + s["limit_s"] <= budget + 0.1
        assert s["wall_s"] <= s["limit_s"] + 0.5
        spent += s["wall_s"]
    # the shares add up to more than the budget: the last steps are cut short or skipped
    assert sum(s.share for s in gpu_steps.plan()) > 1
    assert any("no time left" in s.get("skipped", "") for s in steps)
    assert summary["wall_s"] <= budget + 1.5 and wall <= budget + 2.0


def test_no_bench_runs_the_claims_and_controls_steps_only(fake_run):
    rc, summary, calls, _ = fake_run({}, budget_s=60.0, no_bench=True)
    assert rc == 0 and [c["step"] for c in calls] == [
        s.name for s in gpu_steps.CLAIM_STEPS + gpu_steps.CONTROL_STEPS]


def test_this_process_opens_no_device(fake_run, monkeypatch):
    # the steps' children use the card; a long-lived parent holding a CUDA context, or JAX's
    # preallocated share of the memory, would take it from them
    def refuse(*a, **k):
        raise AssertionError("gpu_run's own process queried a device")
    monkeypatch.setattr(devices, "available", refuse)
    monkeypatch.setattr(devices, "fingerprint", refuse)
    rc, summary, _, _ = fake_run({}, budget_s=60.0, no_bench=True)
    assert rc == 0 and summary["device"] == FAKE_DEVICE


def test_the_children_keep_jax_from_preallocating_the_card(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    env = gpu_steps.child_env()
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_the_budget_defaults_to_a_fifteen_minute_window():
    parser = __import__("argparse").ArgumentParser()
    gpu_run.arguments(parser)
    budget = parser.parse_args(["--out", "x"]).budget_s
    # the machine's start-up takes a few minutes of the fifteen; a command runs at most ten
    assert budget == gpu_run.BUDGET_S and 6 * 60 <= budget <= 10 * 60


def test_a_missing_pytest_timeout_leaves_the_option_out(monkeypatch):
    real = gpu_steps.importlib.util.find_spec
    monkeypatch.setattr(gpu_steps.importlib.util, "find_spec",
                        lambda name: None if name == "pytest_timeout" else real(name))
    cmd = gpu_steps.command(gpu_steps.CLAIM_STEPS[0], "data/concrete", 100.0, Path("r"))
    assert not any(a.startswith("--timeout") for a in cmd)
    assert "--concrete-data=data/concrete" in cmd


def test_benchmark_files_are_named_by_machine_device_and_versions():
    name = gpu_steps.label("NVIDIA H200")
    assert name.startswith("bench_") and "nvidia-h200" in name.lower()
    assert "_torch" in name and "_jax" in name


# --------------------------------------------------------------------------- the GPU path
BLOCKED = ("xlrd", "pandas", "keras", "onnx", "onnxruntime", "onnxscript", "flax")


def test_the_gpu_tier_needs_no_xlrd_pandas_keras_onnx_or_flax(tmp_path, concrete):
    """The GPU machine has none of these: the rest step's selection of the GPU tier, run here
    with them unimportable and the data as a CSV folder, collects, runs its CPU variants and
    skips the CUDA ones with the reason, and none of its claims errs. (Without
    --require-device: here that would make every CUDA skip an error, as it should there.)"""
    folder = tmp_path / "data"
    folder.mkdir()
    lines = [",".join(concrete.columns)] + [",".join(repr(float(x)) for x in row)
                                            for row in concrete.values]
    (folder / "Concrete_Data.csv").write_text("\n".join(lines) + "\n")
    step = next(s for s in gpu_steps.CLAIM_STEPS if not s.claims)
    cmd = gpu_steps.command(step, str(folder), 600.0, tmp_path / "report")
    i = cmd.index("--require-device")
    args = cmd[3:i] + cmd[i + 2:]          # what follows "python -m pytest"
    code = (f"import sys; sys.modules.update(dict.fromkeys({BLOCKED!r})); import pytest; "
            f"sys.exit(pytest.main({args!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=gpu_steps.ROOT, capture_output=True,
                          text=True, timeout=600, env=gpu_steps.child_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "report" / "claims.json").read_text())
    by_id = {c["id"]: c for c in report["claims"]}
    earlier = {c for s in gpu_steps.CLAIM_STEPS for c in s.claims}
    assert all(by_id[c]["verdict"] == "not-run" for c in earlier)
    assert not [c["id"] for c in report["claims"] if c["verdict"] == "error"]
    for cid in ("DEV-05", "DEV-12", "DEV-15", "RNG-09", "AMP-06"):
        assert by_id[cid]["verdict"] == "skipped", by_id[cid]
        assert "CUDA absent" in by_id[cid]["variants"][0]["reason"]


def test_every_cuda_variant_outside_the_gpu_tier_has_a_step(tmp_path):
    """A claim of the fast or slow tier with a CUDA variant (DEV-10) is decided on the CPU by
    the default run; the GPU tier's steps never select it. The last claims step's selection,
    collected here, is exactly those CUDA variants, and it names every claim they test."""
    step = next(s for s in gpu_steps.CLAIM_STEPS if s.tier != "gpu")
    cmd = gpu_steps.command(step, None, 600.0, tmp_path / "report")
    cmd = [a for a in cmd if not a.startswith(("--claim=", "--claims-report="))]
    i = cmd.index("--require-device")
    proc = subprocess.run(cmd[:i] + cmd[i + 2:] + ["--collect-only", "-p", "no:randomly"],
                          cwd=gpu_steps.ROOT, capture_output=True, text=True, timeout=300,
                          env=gpu_steps.child_env())
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    device = re.compile(r"[\[-](cuda|jax:gpu)[\]-]")
    assert ids and all(device.search(i) for i in ids), proc.stdout[-2000:]
    tested = set()
    for node in ids:
        path, name = node.split("::", 1)
        module = importlib.import_module(path[:-3].replace("/", "."))
        fn = getattr(module, name.split("[", 1)[0])
        tested |= {m.args[0] for m in getattr(fn, "pytestmark", []) if m.name == "claim"}
    assert tested == set(step.claims)


def test_every_process_control_of_the_gpu_tier_has_a_step():
    """A process-scope control of claims that only the GPU run decides (their tests need
    CUDA) never runs elsewhere: each has a step of its own, which names a control that
    exists, and the level control runs before the fixed cost's."""
    from support.harness.claim_modules import discover
    from support.rules import controls
    from support.rules import entries as reg
    registry = reg.load_entries()
    found = discover()
    gpu_only = {n for n, c in found.items() if c.scope == "process"
                and all(registry[cid].tier == "gpu" for cid in c.claims)}
    stepped = [s.control for s in gpu_steps.CONTROL_STEPS if s.control]
    assert set(stepped) == gpu_only and len(stepped) == len(set(stepped))
    assert found[stepped[0]].expect == "inconclusive"
    # and the test-scope session reaches every test-scope control of its claims
    [session] = [s for s in gpu_steps.CONTROL_STEPS if s.controls]
    assert "the-card-is-the-cpu-nine-and-a-half-times-faster" in {
        c.name for c in controls.for_claims(session.claims) if c.scope == "test"}
