"""``python -m support figures REPORT [REPORT ...] [-o DIR]``: the notes' figures redrawn from
the values runs measured (support/reports/figures.py); needs matplotlib."""
from __future__ import annotations

import json
from pathlib import Path

from support.reports.figures import draw_all

# what the command needs beyond the suite (support/cli.py checks it first)
NEEDS = ("matplotlib",)


def arguments(parser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, help="claims.json files (or their folders)")
    parser.add_argument("-o", "--out", type=Path, default=Path("reports/figures"))


def run(args) -> int:
    runs = []
    for p in args.reports:
        p = p / "claims.json" if p.is_dir() else p
        runs.append((p.parent.name, json.loads(p.read_text()), []))
    for f in draw_all(runs, args.out):
        print(f"{f['file']}: {f['title']}" + (f" ({f['note']})" if f["note"] else ""))
    return 0
