"""``python -m support gpu-run``: the GPU tier and the benchmarks on a GPU machine, everything
in one folder.

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

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.commands.gpu_reports import ran, write_claims, write_controls, write_json
from support.commands.gpu_steps import PREFLIGHT_S, child_env, command, find_data, label, plan
from support.commands.step_process import STOPPED, loud, run_step
from support.paths import ROOT
from support.rules import controls

# fifteen minutes on a borrowed machine: its start-up takes a few, the copy back one; nine
# are left for the steps
BUDGET_S = 540.0
# a step is not started with less than this left: pytest's start-up and collection alone
# take about fifteen seconds
MIN_STEP_S = 30.0


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
        loud("gpu-run: NO CUDA DEVICE. " + why + ".\nThis command runs the GPU tier and must "
              "run on a machine with a CUDA GPU; nothing was run.")
        write_json(out / "summary.json", {"ok": False, "complete": True,
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


def arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="folder for the report, benchmarks and logs")
    parser.add_argument("--concrete-data", default=None,
                        help="the concrete data (.csv or .xls, or a folder holding one)")
    parser.add_argument("--no-bench", action="store_true",
                        help="run the GPU claims and their controls only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"wall-clock budget for all steps (default {BUDGET_S:.0f} s: a "
                             "fifteen-minute window less the machine's start-up)")


def run(args) -> int:
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
    data = find_data(args.concrete_data)
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
    write_json(out / "summary.json", summary)
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
                        write_claims(reports, out, stopped)
                write_json(out / "summary.json", summary)
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
                st["verdicts"] = ran(data_rep)
                if step.judged:
                    path = write_controls(step, rep, st.get("wall_s", 0.0), out)
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
                for p in write_claims(reports, out, stopped):
                    if str(p) not in summary["files"]:
                        summary["files"].append(str(p))
            if bench_json is not None:
                st["benchmark_json"] = str(bench_json) if bench_json.exists() else None
                if bench_json.exists() and str(bench_json) not in summary["files"]:
                    summary["files"].append(str(bench_json))
            summary["steps"].append(st)
            write_json(out / "summary.json", summary)
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
    write_json(out / "summary.json", summary)
    print(f"\ngpu-run: {'OK' if summary['ok'] else 'FAILED'} in {summary['wall_s']} s; "
          f"report in {out}", flush=True)
    if not summary["ok"]:
        loud("gpu-run FAILED: " + ", ".join(f"{s['step']} rc={s['rc']}"
                                             for s in summary["steps"] if s["rc"]))
    return next((rc for rc in rcs if rc), 0)
