"""``python -m support show PATH [--summary]``: the verdicts of a saved claims report, as the
terminal summary printed them (support/reports/report.py)."""
from __future__ import annotations

import json
from pathlib import Path

from support.reports import kept as kept_runs
from support.reports.report import (clip, kept_lines, known_tag, not_holding, reason_text,
                                    selection_lines, summary_line, timing_lines)


def arguments(parser) -> None:
    parser.add_argument("path", type=Path, help="a claims.json (or its folder)")
    parser.add_argument("--summary", action="store_true", help="only the verdict counts")


def run(args) -> int:
    path = args.path / "claims.json" if args.path.is_dir() else args.path
    data = json.loads(path.read_text())
    print(summary_line(data))
    evidence = kept_runs.evidence(data)
    for line in selection_lines(data, evidence)[:1 if args.summary else None]:
        print(line)
    if args.summary:
        return 0
    for e in not_holding(data):
        print(f"{e['id']:<9} {e['verdict']:<12}{known_tag(e)} {clip(reason_text(e), 300)}")
    for line in kept_lines(data, evidence):
        print(line)
    for line in timing_lines(data):
        print(line)
    return 0
