"""``python -m support matrix [INPUTS ...] [-o DIR] [--no-figures]``: many runs side by side,
matrix.md, matrix.html and the figures (support/reports/matrix.py)."""
from __future__ import annotations

from pathlib import Path

from support.reports.matrix import build


def arguments(parser) -> None:
    parser.add_argument("inputs", nargs="*", type=Path,
                        help="claims.json files, run folders or benchmark JSON (default: "
                             "claims/history/* and reports/*/claims.json)")
    parser.add_argument("-o", "--out", type=Path, default=Path("reports/matrix"))
    parser.add_argument("--no-figures", action="store_true", help="skip the matplotlib figures")


def run(args) -> int:
    res = build(args.inputs, args.out, figures=not args.no_figures)
    print(f"{len(res['runs'])} runs: " + ", ".join(f"{r.name} ({r.label})" for r in res["runs"]))
    kinds: dict[str, int] = {}
    for d in res["differences"]:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    print("differences: " + (", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"))
    for d in res["differences"][:40]:
        print(f"  {d['id']:<9} {d['kind']:<20} {d['detail'][:150]}")
    for pr in res["problems"]:
        print(f"  note: {pr['path']}: {pr['problem']}")
    print("written: " + ", ".join(str(p) for p in res["paths"]) +
          (f", {len(res['figures'])} figures" if res["figures"] else ""))
    return 0
