"""A quiet end of a run: the frameworks' shutdown messages, dropped.

triton (which torch's CUDA build brings, and which ``torch._dynamo`` loads for the
``torch.compile`` claims, on a machine without a GPU too) reports, when a process exits, every
object of its nanobind bindings still alive as "leaked": some sixty lines per process, on every
run, after the last test. They say nothing about the claims: the bindings go with the process.
So a process of the run that loaded triton hands what it writes to stderr, from its exit on
(:func:`arm`), through a filter (a small child process, :func:`_child`) that drops those reports,
nanobind's own lines from "nanobind: leaked" to its link to the refleaks page, and passes
every other line through as it comes. A run without triton (torch's CPU build) is not
touched.
"""
from __future__ import annotations

import atexit
import inspect
import os
import subprocess
import sys
import textwrap

LOUD = ("triton",)       # the packages whose bindings report leaks at exit
_armed: list = []        # quiet() is registered to run at exit
_quiet: list = []        # the filter is installed


def _child() -> None:
    """The filter: stdin to stdout line by line, without nanobind's leak reports (the lines
    its shutdown hook prints, nb_internals.cpp: the counts, one line per object, "... skipped
    remainder" past ten, the advice, and the link, which ends without a newline)."""
    import re
    import sys
    link = b"See https://nanobind.readthedocs.io/en/latest/refleaks.html"
    report = re.compile(rb"nanobind: leaked \d+ [\w ]+!| - leaked [^\n]*| - \.\.\. skipped "
                        rb"remainder|nanobind: this is likely caused by a reference counting "
                        rb"issue in the binding code\.")
    out = sys.stdout.buffer
    for line in iter(sys.stdin.buffer.readline, b""):
        rest = line.replace(link, b"")
        if rest != line and not rest.strip() or report.fullmatch(rest.rstrip(b"\n")):
            continue
        out.write(rest if rest.strip() else line)
        out.flush()


CHILD = textwrap.dedent(inspect.getsource(_child)) + "\n_child()\n"


def drop(text: bytes) -> bytes:
    """``text`` as the filter passes it on."""
    return subprocess.run([sys.executable, "-c", CHILD], input=text, capture_output=True,
                          timeout=60, check=True).stdout


def arm() -> None:
    """Have this process quiet its end (:func:`quiet`) at exit, once: after pytest has
    given back the stderr it captured (its capture restores the file descriptor as it stops,
    so a filter set up before would be undone), before the interpreter's finalisation, where
    nanobind reports."""
    if not _armed:
        _armed.append(True)
        atexit.register(quiet)


def quiet() -> bool:
    """From here to its exit, this process's stderr goes through the filter, where a loud
    package is loaded (POSIX; once per process). Returns whether it does."""
    if _quiet or os.name != "posix" or not any(m in sys.modules for m in LOUD):
        return bool(_quiet)
    sys.stderr.flush()
    read, write = os.pipe()
    where = os.dup(2)
    try:
        # spawned, not a Popen: nothing of it is left to finalise in this process; in a
        # session of its own, so that a Ctrl-C meant for the run leaves it to finish
        os.posix_spawn(sys.executable, [sys.executable, "-c", CHILD], os.environ,
                       file_actions=[(os.POSIX_SPAWN_DUP2, read, 0),
                                     (os.POSIX_SPAWN_DUP2, where, 1),
                                     (os.POSIX_SPAWN_CLOSE, write)], setsid=True)
    finally:
        os.close(read)
        os.close(where)
    # fd 2 is now the pipe's only writer here: the filter ends when this process does
    os.dup2(write, 2)
    os.close(write)
    _quiet.append(True)
    return True
