"""``python -m support durations [RUN]``: keep a run's test durations as the shipped order the
tests start in under ``-n`` (support/harness/schedule.py; every run writes its own)."""
from __future__ import annotations

import json
from pathlib import Path

from support.harness.schedule import DURATIONS, FILE


def arguments(parser) -> None:
    parser.add_argument("run", nargs="?", default="reports",
                        help="a run's report folder (holding durations.json; default: reports)")


def run(args) -> int:
    src = Path(args.run) / FILE
    if not src.is_file():
        print(f"error: {src} does not exist; run the suite first (every run writes it)")
        return 1
    data = json.loads(src.read_text())
    DURATIONS.write_text(json.dumps(data, indent=1) + "\n")
    total = sum(data["durations"].values())
    print(f"{DURATIONS.name}: {len(data['durations'])} tests, {total:.0f} s in all, from {src}")
    return 0
