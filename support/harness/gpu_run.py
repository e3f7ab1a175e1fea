"""Run the GPU tier and the benchmarks on a GPU machine, and collect everything in one folder.

    python -m support gpu-run --out DIR [--concrete-data PATH] [--no-bench] [--budget-s 540]

What it needs: a CUDA machine with this checkout, Python >= 3.10, torch with CUDA, jax, optax,
numpy, scikit-learn, pytest, pytest-benchmark and hypothesis (``pip install -e '.[test]'``,
or the same packages already there: the suite runs from the checkout without being
installed). pytest-timeout, xlrd, pandas, keras, onnx and flax are not needed: the claims that
use the last five are outside the GPU tier, and a per-test limit is set only where
pytest-timeout is installed. JAX may be the CPU build (the JAX GPU variants are then skipped
with the reason) or a CUDA build. No network is used. The concrete data is a ``.csv`` or
``.xls`` of the full-precision table, or a folder holding one (a ``.csv`` needs no xlrd),
found through ``--concrete-data``, the ``CONCRETE_DATA`` variable, the user cache that
``python -m support fetch-data`` fills, or else the copy that ships with the suite
(``support/resources/Concrete_Data.csv``); only without any of them are the claims that train
on it (DEV-08/14/15 and the real-model benchmark) skipped, and the summary says so.

The run is made for a machine borrowed for about fifteen minutes, once. It stays under
``--budget-s`` (540 s by default: what a fifteen-minute window leaves after the machine's
start-up and the copy back), and it spends the budget on what matters most first. Each step
is a pytest process of its own, in a process group of its own, with a deadline: 20 s before
it the group gets SIGINT (pytest still writes the verdicts of the tests that finished), at it
SIGKILL. A step gets its share of the budget, at least 30 s (pytest's start-up alone takes
about fifteen); one that would start with under 30 s left is skipped and said so. The steps, in order, each with the most of the budget it may take:

1. **Preflight** (a child process, so that this long-lived process never opens the card or
   JAX's share of it): exit 2, loudly, unless torch sees a CUDA device.
2. **claims-cpu-vs-gpu** (30 %): the design card's "small MLPs run faster on CPU than GPU",
   DEV-07, DEV-08, DEV-09 and DEV-14, and DEV-13, which shares their width sweep.
3. **claims-dev01-amp10** (15 %): DEV-01 (moving a model is two lines) and AMP-10 (mixed
   precision's memory and throughput).
4. **claims-gpu-rest** (40 %): the rest of the GPU tier.
5. **claims-cuda-variants** (10 %): the CUDA variants of claims outside the GPU tier, whose
   CPU variants the default run decides (DEV-10: timings are the least reproducible numbers;
   the GPU halves of DTYPE-04, JAX-12 and JIT-13, required variants), selected as
   ``--tier fast,slow --only-device cuda -m needs_device``.
6. **controls-gpu** (25 %): the test-scope controls of the GPU claims that are quick to
   run (DEV-02 to DEV-06, DEV-12, RNG-08), which have never run where CUDA is, in one
   ``pytest --controls`` session; ``controls.json`` says per control and claim what the
   verdict became, as ``python -m support controls`` does.
7. **control-the-card-is-the-cpu** (30 %), **control-cpu-steps-cost-20-ms-more** (20 %): the
   process-scope controls of the CPU-vs-GPU claims, whose width sweep and real model are
   module fixtures, each in a session of its own (``--control NAME --fresh``), judged into the
   same ``controls.json``: the level control first (the same work on both sides, on any
   card: the sentence's own threshold; its intervals straddle the bounds by design, so each
   figure takes its whole settling budget), then the fixed CPU cost.
8. **bench-cuda**, **bench-cpu** (25 % each): the bench tier on one device each, one
   pytest-benchmark JSON per device named
   ``bench_<host>_<gpu>_torch<v>_jax<v>_<device>.json`` (machine, accelerator, framework
   versions and device), so that files of different machines and versions sit side by side.

Every claims step runs ``pytest claims --tier gpu --require-device cuda`` on its selection
(the last one its tiers instead; a CUDA-absent skip is an error, and a step in which no CUDA
variant ran fails). What it leaves in
``DIR`` (seven files, no subfolders), rewritten after every step, so that a window that closes
mid-run still leaves what was done:

* ``claims.json``, ``claims.md``: the claims steps' reports merged into one (each claim from
  the step that ran it), the format of ``reports/claims.json``;
* the two benchmark JSON files;
* ``summary.json``: the budget, the plan, each step's command, limit, exit code, wall time,
  verdict counts and whether it was stopped at its deadline, the device's fingerprint, the
  claims the benchmarks ran for (benchmarks inform claims and decide nothing), the files;
* ``controls.json``: the controls steps' outcomes (:mod:`support.rules.controls`), with
  each step's counts;
* ``gpu_run.log``: the output of every step.

Exit code: 0 when every step passed, else the code of the first step that did not (124: it
was stopped at its deadline or skipped for lack of time); 2 without a CUDA device.

Producing and comparing benchmark files by hand
-----------------------------------------------
One JSON file per run and device (``--benchmark-json`` names the file exactly)::

    pytest claims --tier bench --only-device cpu  --benchmark-json bench/<label>_cpu.json
    pytest claims --tier bench --only-device cuda --benchmark-json bench/<label>_cuda.json \\
        --require-device cuda

or let pytest-benchmark number them in a storage folder, one subfolder per machine type::

    pytest claims --tier bench --only-device cpu --benchmark-save=cpu \\
        --benchmark-storage=file://bench --benchmark-group-by=group

Every benchmark carries ``extra_info`` = {claim, device, side, fingerprint, ratios of the
interleaved sides}; ``machine_info`` carries ``devices`` (fingerprint of each device present:
name, driver, CUDA/cuDNN, memory) and ``frameworks`` (torch, jax, jaxlib, numpy versions).
Groups are per workload (``benchmark.group``), the device is in ``extra_info`` and in the
file name, so one workload's CPU and GPU rows sit side by side::

    pytest-benchmark compare bench/*_cpu.json bench/*_cuda.json --group-by=group \\
        --columns=min,median,rounds
"""
from __future__ import annotations

import codecs
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# the controls' rules only: it imports no framework (finding the controls does, in a child)
from support.rules import controls
from support.paths import ROOT

# fifteen minutes on a borrowed machine: its start-up takes a few, the copy back one; nine
# are left for the steps
BUDGET_S = 540.0
# between a step's SIGINT (pytest writes what it decided) and its SIGKILL: pytest sees the
# SIGINT only once the call it is in returns to Python (a CPU epoch of the widest sweep model,
# a cuDNN benchmark), then writes its report and the interpreter shuts torch and JAX down
GRACE_S = 20.0
# a step is not started with less than this left: pytest's start-up and collection alone
# take about fifteen seconds
MIN_STEP_S = 30.0
PREFLIGHT_S = 120.0
# one test longer than this is stopped by pytest-timeout, where it is installed, so that a
# hung test does not take its step's whole share
TEST_TIMEOUT_S = 180
# the exit code of a step stopped at its deadline or skipped for lack of time (timeout(1)'s)
STOPPED = 124
# how a step's pytest is started; the self-tests put a fake child process here
PYTEST = [sys.executable, "-m", "pytest"]


@dataclass(frozen=True)
class Step:
    """One step of the run: a pytest process with at most ``share`` of the budget."""

    name: str
    what: str
    share: float
    claims: tuple[str, ...] = ()   # a claims step's selection; () = the rest of the GPU tier
    device: str = ""               # a bench step's device
    # a claims step's tiers; outside the GPU tier only the tests' CUDA variants are run
    tier: str = "gpu"
    controls: bool = False         # runs its claims' test-scope controls, not the claims
    # a process-scope control run in a session of its own (it selects its claims' tests)
    control: str = ""

    @property
    def bench(self) -> bool:
        return bool(self.device)

    @property
    def judged(self) -> bool:
        """A controls step: its report is judged into controls.json."""
        return self.controls or bool(self.control)

    @property
    def merged(self) -> bool:
        """A claims step: its report joins claims.json, and what it did not reach says so."""
        return not (self.bench or self.judged)


CLAIM_STEPS = (
    Step("claims-cpu-vs-gpu", "the design card's 'small MLPs run faster on CPU than GPU' "
         "(DEV-07, DEV-08, DEV-09, DEV-14; DEV-13 shares their width sweep)", 0.30,
         claims=("DEV-07", "DEV-08", "DEV-09", "DEV-13", "DEV-14")),
    Step("claims-dev01-amp10", "moving a model is two lines (DEV-01); mixed precision's "
         "memory and throughput (AMP-10)", 0.15, claims=("DEV-01", "AMP-10")),
    Step("claims-gpu-rest", "the rest of the GPU tier", 0.40),
    # a claim of the slow tier with a CUDA variant: the default run decides its CPU variant,
    # and the GPU tier's steps never select it (its CUDA variant had never run)
    Step("claims-cuda-variants", "the CUDA variants of claims outside the GPU tier (DEV-10: "
         "the timings are the least reproducible numbers; the GPU halves of DTYPE-04, JAX-12 "
         "and JIT-13)", 0.10, claims=("DEV-10", "DTYPE-04", "JAX-12", "JIT-13"),
         tier="fast,slow"),
)
# the GPU claims whose tests take seconds: their controls re-run them once per control;
# then the CPU-vs-GPU claims' process-scope controls (the width sweep and the real model are
# module fixtures), the level control first: it has never been run, the fixed cost's sibling
# neither
CONTROL_STEPS = (
    Step("controls-gpu", "the test-scope controls of the quick GPU claims (DEV-02 to DEV-06, "
         "DEV-12, RNG-08)", 0.25,
         claims=("DEV-02", "DEV-03", "DEV-04", "DEV-05", "DEV-06", "DEV-12", "RNG-08"),
         controls=True),
    Step("control-the-card-is-the-cpu", "the CPU-vs-GPU claims (DEV-06 to DEV-09, DEV-13, "
         "DEV-14) with the same work on both sides: their level control", 0.30,
         control="the-card-is-the-cpu"),
    Step("control-cpu-steps-cost-20-ms-more", "the width sweep and the real model with a fixed "
         "20 ms on every CPU step (DEV-07 to DEV-09, DEV-13, DEV-14)", 0.20,
         control="cpu-steps-cost-20-ms-more"),
)
BENCH_STEPS = (
    Step("bench-cuda", "the bench tier on the GPU", 0.25, device="cuda"),
    Step("bench-cpu", "the bench tier on the CPU", 0.25, device="cpu"),
)


def plan(no_bench: bool = False) -> tuple[Step, ...]:
    """The steps in the order they run: what matters most first."""
    return CLAIM_STEPS + CONTROL_STEPS + (() if no_bench else BENCH_STEPS)


def _loud(msg: str) -> None:
    bar = "!" * 78
    print(f"\n{bar}\n{msg}\n{bar}\n", file=sys.stderr, flush=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-")[:40]


def _find_data(given: str | None) -> str | None:
    named = given or os.environ.get("CONCRETE_DATA")
    if named:   # pytest stops with the reason if it holds no valid table
        return named
    import importlib.util

    from support.lab.data import BUNDLED, resolve
    kind, path = resolve()
    if path is not None and path.suffix == ".xls" and importlib.util.find_spec("xlrd") is None:
        path = BUNDLED if BUNDLED.exists() else None       # a cached .xls needs xlrd
    return str(path) if path is not None else None


def label(device_name: str) -> str:
    from support.machine.environment import version
    return "_".join(["bench", _slug(platform.node() or "host"), _slug(device_name),
                     f"torch{_slug(version('torch') or 'none')}",
                     f"jax{_slug(version('jax') or 'none')}"])


def child_env() -> dict:
    """The environment of every child: deterministic cuBLAS (RNG-08), JAX taking the card's
    memory as it needs it rather than 75 % of it the first time it is touched (torch's claims
    need the rest), output unbuffered (the log shows a step as it runs)."""
    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# --------------------------------------------------------------------------- one child
def _tee(stream, fh) -> None:
    """Copy a child's output to the log and the console as it comes, in whatever pieces it
    comes (a line without its newline too)."""
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        chunk = stream.read1(65536)
        if not chunk:
            break
        text = decode.decode(chunk)
        fh.write(text)
        fh.flush()
        sys.stdout.write(text)
        sys.stdout.flush()


def _signal_group(proc, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass   # the group is gone already


def _wait(proc, limit: float, grace: float) -> str:
    """Wait for ``proc`` until ``limit`` seconds; then SIGINT its group, and SIGKILL it
    ``grace`` seconds later. Returns how it was stopped ("" if it ended by itself)."""
    soft = max(limit - grace, 0.0)
    try:
        proc.wait(timeout=soft)
        return ""
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGINT)
    try:
        proc.wait(timeout=limit - soft)
        return f"interrupted (SIGINT) {limit - soft:.0f} s before its {limit:.0f} s deadline"
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        return f"killed (SIGKILL) at its {limit:.0f} s deadline, {grace:.0f} s after SIGINT"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_step(name: str, cmd: list[str], limit: float, log: Path, env=None,
             grace: float | None = None) -> dict:
    """Run one child in a process group of its own, its output copied to ``log`` and the
    console, and stop the whole group at ``limit`` seconds (see :func:`_wait`). Any process
    of the group still alive when the child ends is killed too."""
    grace = min(GRACE_S, limit / 3) if grace is None else grace
    head = f"\n=== {name}: {' '.join(cmd)}  (limit {limit:.0f} s)\n"
    print(head, end="", flush=True)
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(head)
        fh.flush()
        # SIGINT as a terminal has it: a command started in the background by a shell has
        # SIGINT ignored, every child inherits that, and the deadline's SIGINT would reach
        # no step (each then killed when its grace ends, its report unwritten)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_default_sigint)
        tee = threading.Thread(target=_tee, args=(proc.stdout, fh), daemon=True)
        tee.start()
        try:
            stopped = _wait(proc, limit, grace)
        except BaseException:        # Ctrl-C or a crash here: leave nothing running
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            _signal_group(proc, signal.SIGKILL)   # what the child left behind
            tee.join(timeout=5.0)
    st = {"step": name, "cmd": cmd, "limit_s": round(limit, 1),
          "rc": STOPPED if stopped else proc.returncode,
          "wall_s": round(time.monotonic() - t0, 1)}
    if stopped:
        st["stopped"] = stopped
        _loud(f"{name} {stopped}")
    return st


# --------------------------------------------------------------------------- preflight
_PROBE = """
import json
from support.machine import devices
ok = devices.available("cuda")
print(json.dumps({"cuda": ok, "fingerprint": devices.fingerprint("cuda") if ok else None,
                  "reason": "" if ok else devices.absent_reason("cuda")}, default=str))
"""


def _preflight(out: Path) -> dict | None:
    """The CUDA device's fingerprint, asked of a child process; or None after saying loudly
    why nothing can run (a GPU run on a machine without a GPU must not look like a pass)."""
    def refuse(why: str) -> None:
        _loud("gpu-run: NO CUDA DEVICE. " + why + ".\nThis command runs the GPU tier and must "
              "run on a machine with a CUDA GPU; nothing was run.")
        _write_json(out / "summary.json", {"ok": False, "complete": True,
                                           "error": "no CUDA device: " + why, "steps": []})

    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=child_env(),
                               capture_output=True, text=True, timeout=PREFLIGHT_S)
    except subprocess.TimeoutExpired:
        refuse(f"the device probe did not answer within {PREFLIGHT_S:.0f} s")
        return None
    try:
        found = json.loads(probe.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        refuse(f"the device probe failed (exit {probe.returncode}): "
               + (probe.stderr.strip().splitlines() or ["no output"])[-1])
        return None
    if not found.get("cuda"):
        refuse(found.get("reason") or "torch sees no CUDA device")
        return None
    return found["fingerprint"]


# --------------------------------------------------------------------------- commands
def _common(data: str | None, limit: float) -> list[str]:
    """The pytest command every step extends."""
    # -c pins the ini (and so the rootdir and the plugins) whatever the other paths are;
    # option values are joined with "=" so pytest never mistakes them for test paths
    # one process: the GPU tier's device timings and the benchmarks take the card alone
    cmd = PYTEST + ["-c", str(ROOT / "pyproject.toml"), "claims", "-q", "--numprocesses=0"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={int(max(1, min(TEST_TIMEOUT_S, limit)))}")
    return cmd + ([f"--concrete-data={data}"] if data else [])


def command(step: Step, data: str | None, limit: float, report: Path,
            bench_json: Path | None = None) -> list[str]:
    """The pytest command of one step."""
    cmd = _common(data, limit)
    if step.bench:
        cmd += ["--tier", "bench", "--only-device", step.device,
                f"--benchmark-json={bench_json}", "--benchmark-group-by=group"]
        if step.device == "cuda":
            cmd += ["--require-device", "cuda"]
    else:
        cmd += ["--tier", step.tier, "--require-device", "cuda"]
        if step.controls:
            cmd += ["--controls", "-p", "no:randomly"]
        if step.control:
            # the control selects its claims' tests; nothing kept from an earlier session
            cmd += ["--fresh", f"--control={step.control}", "-p", "no:randomly"]
        if step.tier != "gpu":
            # a device-generic test's CUDA variant, not the claim's other tests
            cmd += ["--only-device", "cuda", "-m", "needs_device"]
        if step.claims:
            cmd += [f"--claim={c}" for c in step.claims]
        elif not step.control:
            earlier = [c for s in CLAIM_STEPS for c in s.claims]
            cmd += ["-k", "not (" + " or ".join(earlier) + ")"]
    return cmd + [f"--claims-report={report}"]


# --------------------------------------------------------------------------- reports
def merge_reports(reports: list[dict]) -> dict:
    """The claims steps' reports as one: each claim from the step that ran it (a claim no
    step ran keeps its not-run entry), the counts recomputed, the lists joined."""
    from support.rules import verdicts
    merged = json.loads(json.dumps(reports[0]))
    index = {c["id"]: i for i, c in enumerate(merged["claims"])}
    for rep in reports[1:]:
        for c in rep.get("claims", []):
            i = index.get(c["id"])
            if i is None:
                index[c["id"]] = len(merged["claims"])
                merged["claims"].append(c)
            elif merged["claims"][i]["verdict"] == "not-run" and c["verdict"] != "not-run":
                merged["claims"][i] = c
        for key in ("unexpected", "stale_expectations"):
            merged[key] = list(dict.fromkeys(merged.get(key, []) + rep.get(key, [])))
        merged["elapsed_s"] = round(merged.get("elapsed_s", 0) + rep.get("elapsed_s", 0), 1)
    summary = {v: 0 for v in verdicts.ORDER}
    for c in merged["claims"]:
        summary[c["verdict"]] = summary.get(c["verdict"], 0) + 1
    merged["summary"] = summary
    merged["expected_verdicts"] = sum(1 for c in merged["claims"] if c.get("expected")
                                      and c["verdict"] == c["expected"]["verdict"])
    return merged


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)      # a reader never sees half a file


def _step_of(claim: dict) -> str:
    """The claims step that runs a claim's GPU tests (a claim of the registry's gpu tier that no
    earlier step names is the last one's)."""
    for s in CLAIM_STEPS:
        if claim["id"] in s.claims or (not s.claims and claim.get("tier") == "gpu"):
            return s.name
    return ""


def mark_not_reached(merged: dict, stopped: dict[str, str]) -> None:
    """A claim its step did not reach before that step was stopped says so, rather than
    "not selected": ``stopped`` maps a step's name to how it was stopped or skipped."""
    for c in merged["claims"]:
        why = stopped.get(_step_of(c))
        if c["verdict"] == "not-run" and why:
            c["reason"] = f"not reached: the GPU run's step {_step_of(c)} {why}"


def _write_claims(reports: list[dict], out: Path, stopped: dict[str, str]) -> list[Path]:
    from support.reports import report
    merged = merge_reports(reports)
    mark_not_reached(merged, stopped)
    _write_json(out / "claims.json", merged)
    (out / "claims.md").write_text(report.markdown(merged), encoding="utf-8")
    return [out / "claims.json", out / "claims.md"]


def _write_controls(step: Step, report: Path, wall: float, out: Path) -> Path | None:
    """A controls step's outcomes, judged as ``python -m support controls`` judges them and
    added to ``controls.json``, in a child process: finding the controls imports every claim
    module, and this long-lived process never imports torch or JAX (the card stays the
    steps')."""
    path = out / "controls.json"
    code = "import sys; from support.harness import gpu_run; gpu_run.judge_controls(*sys.argv[1:])"
    chosen = ["process", step.control] if step.control else ["test", *step.claims]
    proc = subprocess.run([sys.executable, "-c", code, str(report), str(path), str(wall),
                           step.name, *chosen], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=PREFLIGHT_S)
    if proc.returncode != 0 or not path.exists():
        print(f"controls: could not judge the step's report: {proc.stderr[-2000:]}", flush=True)
        return None
    return path


def judge_controls(report: str, out: str, wall: str, step: str, scope: str, *chosen: str
                   ) -> None:
    """Add to ``out`` the controls that the session of ``step`` ran, judged on its claims
    ``report``: with ``scope`` "test", every test-scope control of the claims ``chosen`` (a
    ``--controls`` session); with "process", the one process-scope control named (its own
    session). ``counts`` are those of every control ``out`` then holds, ``steps`` each step's
    own."""
    from support.harness.claim_modules import discover
    from support.rules import registry as reg
    registry = reg.load_registry()
    data = json.loads(Path(report).read_text(encoding="utf-8"))
    found = discover()
    if scope == "process":
        picked, how = [found[chosen[0]]], "process"
    else:
        picked = [c for c in controls.for_claims(chosen) if c.scope == "test"]
        how = "test-scope"
    mine = [controls.evaluate(c, data, float(wall) / max(1, len(picked)), how, registry)
            for c in picked]
    path = Path(out)
    earlier = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    results = earlier.get("controls", []) + mine
    claims = list(dict.fromkeys(earlier.get("claims", []) +
                                [cid for c in picked for cid in c.claims]))
    _write_json(path, {"schema": 1, "claims": claims, "counts": controls.count(results),
                       "steps": {**earlier.get("steps", {}), step: controls.count(mine)},
                       "controls": results})


def _ran(report: dict) -> dict:
    """A step's verdict counts, of the claims it ran."""
    counts: dict[str, int] = {}
    for c in report.get("claims", []):
        if c["verdict"] not in ("not-run", "pending", "not-testable"):
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    return counts


# --------------------------------------------------------------------------- the run
def arguments(command: str, parser) -> None:
    parser.add_argument("--out", required=True, help="folder for the report, benchmarks and logs")
    parser.add_argument("--concrete-data", default=None,
                        help="the concrete data (.csv or .xls, or a folder holding one)")
    parser.add_argument("--no-bench", action="store_true",
                        help="run the GPU claims and their controls only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"wall-clock budget for all steps (default {BUDGET_S:.0f} s: a "
                             "fifteen-minute window less the machine's start-up)")


def run(command: str, args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "gpu_run.log"
    logs.write_text("")
    with tempfile.TemporaryDirectory(prefix="gpu_run_") as scratch:
        return run_in(Path(scratch), out, logs, args)


def run_in(scratch: Path, out: Path, logs: Path, args) -> int:
    start = time.monotonic()
    budget = float(args.budget_s)

    def left() -> float:
        return budget - (time.monotonic() - start)

    gpu = _preflight(out)
    if gpu is None:
        return 2
    # the controls steps add to it: an earlier run's would be counted as this one's
    (out / "controls.json").unlink(missing_ok=True)
    data = _find_data(args.concrete_data)
    steps = plan(args.no_bench)
    summary: dict = {
        "ok": False, "complete": False, "budget_s": budget, "out": str(out),
        "concrete_data": data, "device": gpu,
        "plan": [{"step": s.name, "what": s.what, "most_s": round(s.share * budget, 1)}
                 for s in steps],
        "steps": [], "files": [str(logs), str(out / "summary.json")]}
    if data is None:
        print("NOTE: concrete data not found; claims training on it will be skipped",
              flush=True)
    _write_json(out / "summary.json", summary)
    reports: list[dict] = []
    stopped: dict[str, str] = {}     # claims steps stopped or skipped, and how
    try:
        for step in steps:
            # its share, but never less than a step needs to start at all, of what is left
            limit = min(max(step.share * budget, MIN_STEP_S), left())
            if limit < MIN_STEP_S:
                why = f"no time left in the {budget:.0f} s budget ({max(left(), 0):.0f} s)"
                summary["steps"].append({"step": step.name, "rc": STOPPED, "skipped": why})
                if step.merged:
                    stopped[step.name] = f"was skipped: {why}"
                    if reports:
                        _write_claims(reports, out, stopped)
                _write_json(out / "summary.json", summary)
                continue
            report_dir = scratch / step.name
            bench_json = out / f"{label(gpu.get('name') or 'gpu')}_{step.device}.json" \
                if step.bench else None
            st = run_step(step.name, command(step, data, limit, report_dir, bench_json),
                          limit, logs, child_env())
            st["what"] = step.what
            if st.get("stopped") and step.merged:
                stopped[step.name] = f"was {st['stopped']}"
            rep = report_dir / "claims.json"
            if rep.exists():
                data_rep = json.loads(rep.read_text(encoding="utf-8"))
                st["verdicts"] = _ran(data_rep)
                if step.judged:
                    path = _write_controls(step, rep, st.get("wall_s", 0.0), out)
                    counts = json.loads(path.read_text())["steps"][step.name] if path else None
                    st["controls"] = counts
                    if path and str(path) not in summary["files"]:
                        summary["files"].append(str(path))
                    # a red control is a failing test, which is what it should be: the step
                    # passes when every control did what it declares, as the controls run does
                    if st["rc"] != STOPPED:
                        st["pytest_rc"] = st["rc"]
                        st["rc"] = 0 if counts is not None and controls.as_declared(counts) else 1
                elif step.bench:
                    st["benchmarked_claims"] = sorted(
                        c["id"] for c in data_rep.get("claims", [])
                        if any(v.get("verdict") == "benchmark" for v in c.get("variants", [])))
                else:
                    reports.append(data_rep)
                st["report"] = "kept"
            else:
                st["report"] = "none: the step ended before pytest wrote it"
            if step.merged and reports:
                for p in _write_claims(reports, out, stopped):
                    if str(p) not in summary["files"]:
                        summary["files"].append(str(p))
            if bench_json is not None:
                st["benchmark_json"] = str(bench_json) if bench_json.exists() else None
                if bench_json.exists() and str(bench_json) not in summary["files"]:
                    summary["files"].append(str(bench_json))
            summary["steps"].append(st)
            _write_json(out / "summary.json", summary)
    except KeyboardInterrupt:
        summary["steps"].append({"step": "interrupted", "rc": 130,
                                 "stopped": "interrupted from the keyboard"})
        return _finish(summary, out, start, complete=False)
    return _finish(summary, out, start, complete=True)


def _finish(summary: dict, out: Path, start: float, complete: bool) -> int:
    rcs = [s["rc"] for s in summary["steps"]]
    summary["complete"] = complete
    summary["ok"] = complete and all(rc == 0 for rc in rcs)
    summary["wall_s"] = round(time.monotonic() - start, 1)
    _write_json(out / "summary.json", summary)
    print(f"\ngpu-run: {'OK' if summary['ok'] else 'FAILED'} in {summary['wall_s']} s; "
          f"report in {out}", flush=True)
    if not summary["ok"]:
        _loud("gpu-run FAILED: " + ", ".join(f"{s['step']} rc={s['rc']}"
                                             for s in summary["steps"] if s["rc"]))
    return next((rc for rc in rcs if rc), 0)
