"""support.harness.shutdown: the leak reports triton's nanobind bindings print when a process
exits are dropped, every other line of stderr passes, and a process without triton is left
alone."""
from __future__ import annotations

import subprocess
import sys

from support.harness import shutdown
from support.paths import ROOT

# as a worker of a run with torch's CUDA build writes it (nb_internals.cpp), the link without
# its newline, so the next report follows on the same line
LEAKS = ('nanobind: leaked 4 instances!\n'
         ' - leaked instance 0x7f3b9439dda8 of type "triton._C.libtriton.ir.attribute"\n'
         'nanobind: leaked 64 types!\n'
         ' - leaked type "triton._C.libtriton.ir.location"\n'
         ' - ... skipped remainder\n'
         'nanobind: leaked 514 functions!\n'
         ' - leaked function "create_print"\n'
         'nanobind: this is likely caused by a reference counting issue in the binding code.\n'
         'See https://nanobind.readthedocs.io/en/latest/refleaks.html')


def test_the_filter_drops_the_leak_reports_and_nothing_else():
    text = "before\n" + LEAKS + LEAKS + "\nafter: a real error\n - leaked? no, a list item\n"
    assert shutdown.drop(text.encode()).decode() == \
        "before\nafter: a real error\n - leaked? no, a list item\n"


def _exit_with_leaks(loud: bool) -> subprocess.CompletedProcess:
    code = ("import atexit, os, sys, types\n"
            + ("sys.modules['triton'] = types.ModuleType('triton')\n" if loud else "")
            # what nanobind writes from the interpreter's finalisation, after every exit
            # handler (they run last registered first: this one after the filter's)
            + f"atexit.register(lambda: os.write(2, {LEAKS.encode()!r}))\n"
            "from support.harness import shutdown\n"
            "shutdown.arm()\n"
            "sys.stderr.write('a warning of the run\\n')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_a_process_that_loaded_triton_ends_quietly():
    out = _exit_with_leaks(loud=True)
    assert out.returncode == 0
    assert "a warning of the run" in out.stderr and "nanobind" not in out.stderr, out.stderr


def test_a_process_without_triton_is_not_touched():
    out = _exit_with_leaks(loud=False)
    assert out.returncode == 0 and "nanobind: leaked 4 instances!" in out.stderr
