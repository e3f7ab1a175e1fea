"""A child process in a process group of its own, with a deadline: each step of the GPU run.

:func:`run_step` starts the child with SIGINT at its default (a command started in the
background by a shell has it ignored, and every child would inherit that), copies its output
to a log and the console as it comes, and at its deadline stops the whole group: SIGINT first
(pytest still writes what it decided), SIGKILL a grace later; whatever the child leaves
running when it ends is killed too.
"""
from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from support.paths import ROOT

# between a step's SIGINT (pytest writes what it decided) and its SIGKILL: pytest sees the
# SIGINT only once the call it is in returns to Python (a CPU epoch of the widest sweep model,
# a cuDNN benchmark), then writes its report and the interpreter shuts torch and JAX down
GRACE_S = 20.0
# the exit code of a step stopped at its deadline or skipped for lack of time (timeout(1)'s)
STOPPED = 124


def loud(msg: str) -> None:
    bar = "!" * 78
    print(f"\n{bar}\n{msg}\n{bar}\n", file=sys.stderr, flush=True)


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
        loud(f"{name} {stopped}")
    return st
