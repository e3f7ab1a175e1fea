"""``python -m support diff OLD NEW [--md PATH] [--html PATH] [--count-timing] [--fail-on ...]``:
what changed between two runs, each change with its cause (support/reports/diff.py). Exit
status 1 when a claim changed (with ``--fail-on release``: changed by a release), 0 when none
did, 2 when an input is unreadable."""
from __future__ import annotations

from pathlib import Path

from support.reports.diff import (DiffError, compare, failing, html_page, load_pair, markdown,
                                  text)


def arguments(parser) -> None:
    parser.add_argument("old", help="claims.json, its folder, or 'last' / 'last:LABEL' (claims/history)")
    parser.add_argument("new", help="claims.json, its folder, or 'last' / 'last:LABEL'")
    parser.add_argument("--md", type=Path, help="also write the differences as Markdown")
    parser.add_argument("--html", type=Path, help="also write them as one self-contained HTML page")
    parser.add_argument("--count-timing", action="store_true",
                        help="count changes of timing claims too (they move with the load)")
    parser.add_argument("--fail-on", choices=("any", "release"), default="any",
                        help="what makes the exit status 1: any counted change (default), or "
                             "only changes caused by a release (the release watch)")


def run(args) -> int:
    try:
        old, new, chosen = load_pair(args.old, args.new)
    except DiffError as exc:
        print(f"diff: {exc}")
        return 2
    res = compare(old, new, count_timing=args.count_timing)
    res["chosen"] = chosen
    print(text(res), end="")
    for path, render in ((args.md, markdown), (args.html, html_page)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(res))
            print(f"written: {path}")
    fail = failing(res, args.fail_on)
    if args.fail_on != "any":
        print(f"exit status: {len({r['id'] for r in fail})} claim(s) changed by a "
              f"{args.fail_on} (--fail-on {args.fail_on})")
    return 1 if fail else 0
