"""The suite's one command line: ``python -m support COMMAND ...`` (installed as
``lecture11-claims COMMAND ...``).

Every command has a module of its own in ``support/commands/`` (the top wing), which provides
``arguments(parser)`` (the command's options) and ``run(args) -> int`` (its printing and exit
status; the work is the wings' below). A new command is one line of :data:`COMMANDS` and
that module. A module is imported only when its command runs, so ``show`` does not load
matplotlib or the frameworks.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

# command -> (module, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "show": ("support.commands.show", "print the verdicts of a saved claims.json"),
    "matrix": ("support.commands.matrix", "put many runs side by side: matrix.md, matrix.html, figures"),
    "diff": ("support.commands.diff", "what changed between two runs (exit 1 when a claim changed)"),
    "keep": ("support.commands.keep", "copy a run into claims/history/"),
    "notes": ("support.commands.notes", "the notes annotated with a run's verdicts, and the errata"),
    "locate": ("support.commands.locate", "where each claim's sentence is in a copy of the notes"),
    "pin": ("support.commands.pin", "fingerprint each claim's sentence into its entry"),
    "figures": ("support.commands.figures", "redraw the notes' figures from runs' measured values"),
    "fetch-data": ("support.commands.fetch_data", "download the UCI concrete data into the cache, verified"),
    "check-data": ("support.commands.check_data", "verify a concrete data file (or the cache)"),
    "gpu-run": ("support.commands.gpu_run", "on a GPU machine: the GPU tier and the benchmarks, one folder"),
    "durations": ("support.commands.durations", "keep a run's test durations: the order tests start in under -n"),
    "stability": ("support.commands.stability", "run the test command N times, report what moved"),
    "load-sensitivity": ("support.commands.load_sensitivity", "measure what load does to each timing figure, for busy machines"),
    "controls": ("support.commands.controls", "run every claim's test under its negative controls"),
    "new-claim": ("support.commands.new_claim", "a new claim's entry, pinned to its sentence, and test stub, in its section's files"),
    "check-claim": ("support.commands.check_claim", "the checks a new or changed claim must pass: entry, order, placement, fingerprint, control"),
}
PROG = "python -m support"


def _overview() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for its options)",
             "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_overview())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"{PROG}: unknown command {command!r}\n\n{_overview()}", file=sys.stderr)
        return 2
    module_name, text = COMMANDS[command]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:            # an optional extra the command needs
        print(f"{PROG} {command}: {exc}", file=sys.stderr)
        return 2
    missing = [m for m in getattr(module, "NEEDS", ()) if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{PROG} {command} needs {', '.join(missing)}: pip install -e '.[figures]'",
              file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"{PROG} {command}", description=text)
    module.arguments(parser)
    if getattr(module, "PASSES_UNKNOWN", False):      # e.g. stability hands them to pytest
        args, unknown = parser.parse_known_args(rest)
        args.unknown = unknown
    else:
        args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:          # the reader went away (| head): not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
