"""``python -m support keep RUN --label NAME [--machine NAME] [--note TEXT]``: copy a run into
``claims/history/`` with a NOTE.md (support/reports/keep.py), for the next ``diff last``."""
from __future__ import annotations

from pathlib import Path

from support.reports.diff import DiffError
from support.reports.keep import keep


def arguments(parser) -> None:
    parser.add_argument("run", type=Path, help="a claims.json or its folder, e.g. reports/latest")
    parser.add_argument("--label", required=True, help="what ran, e.g. latest or the tox env")
    parser.add_argument("--machine", help="where it ran (default: from the run's fingerprint)")
    parser.add_argument("--note", help="a line for NOTE.md: the command, the scope, anything odd")


def run(args) -> int:
    try:
        dest = keep(args.run, args.label, args.machine, args.note or "")
    except DiffError as exc:
        print(f"keep: {exc}")
        return 2
    print(f"kept: {dest}")
    return 0
