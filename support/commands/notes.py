"""``python -m support notes REPORT [--notes PATH ...] [-o DIR] [--patch] [--no-figures]``: the
notes annotated with a run's verdicts, the errata and the patch (support/notes/pages.py), from
a claims report and the notes it located its sentences in."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from support.notes import errata, locate as notes_mod
from support.notes.pages import build
from support.reports import runs


def arguments(parser) -> None:
    parser.add_argument("report", type=Path,
                        help="a run: its claims.json, or the folder that holds it (a tox env's "
                             "reports/<env>/, a claims/history/<run>/)")
    parser.add_argument("--notes", action="append", metavar="PATH",
                        help="a notes file, plain text or Markdown (repeat; lecture=PATH names "
                             "it); default: the files the run located its sentences in, as its "
                             "report records them, else ../shared/notes beside the checkout")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="where the pages go (default: notes/ beside the report)")
    parser.add_argument("--no-figures", action="store_true",
                        help="skip the redrawn figures (drawn only where matplotlib is installed)")
    parser.add_argument("--patch", action="store_true",
                        help="also write <document>.patch: the suggested corrections as a "
                             "unified diff of each notes file (patch -p1 or git apply beside it)")
    parser.add_argument("--history", type=Path, default=None,
                        help="where kept runs are (default claims/history)")


class NotesError(ValueError):
    """An input the command cannot use, said in one line."""


def read_report(path: Path) -> tuple[dict, Path]:
    """(the report, its file) from a claims.json or the folder that holds it."""
    file = path / "claims.json" if path.is_dir() else path
    if not file.is_file():
        raise NotesError(f"{path}: no such file" if not path.exists() else
                         f"{path}: holds no claims.json (tox writes reports/<env>/claims.json)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NotesError(f"{file}: not readable as JSON ({exc})") from None
    if not isinstance(data, dict) or "claims" not in data:
        raise NotesError(f"{file}: not a claims report")
    return data, file


def notes_paths(report: dict, given: list[str] | None) -> list[str]:
    """The notes to annotate: those given, else those the run read (its report's
    ``notes.paths``, where they still exist), else the copies beside the checkout."""
    if given:
        missing = [p for p in given if not Path(p.partition("=")[2] or p).is_file()]
        if missing:
            raise NotesError(f"--notes: no such file: {', '.join(missing)}")
        return list(given)
    recorded = [p for p in (report.get("notes") or {}).get("paths") or []]
    if recorded and all(Path(p).is_file() for p in recorded):
        return recorded
    found = [str(p) for p in notes_mod.default_paths()]
    if found:
        return found
    raise NotesError("no notes to annotate: the report names none that exist here"
                     + (f" ({', '.join(recorded)})" if recorded else "")
                     + " and there are none in ../shared/notes beside the checkout; name them: "
                       "--notes PATH --notes PATH")


def run(args) -> int:
    try:
        report, file = read_report(args.report)
        paths = notes_paths(report, args.notes)
        out = args.out or file.parent / "notes"
        res = build(report, paths, out, figures=not args.no_figures, patch=args.patch,
                    history=args.history)
    except (NotesError, ValueError, OSError) as exc:
        print(f"notes: {exc}", file=sys.stderr)
        return 2
    print("notes: " + ", ".join(paths))
    sel = runs.selection(report)
    if not sel.full:
        last = sum(k.why == "not run" for k in res["kept"].values())
        print(f"{sel.text()}: the pages and errata name them, with the last verdict of "
              f"{last} of them in a kept full run")
    for doc, counts in res["summary"].items():
        print(f"{doc}: " + ", ".join(f"{k} {n}" for k, n in counts.items() if n))
    for loc in res["locations"].values():
        if loc.status not in ("found",):
            print(f"  {loc.id:<9} {loc.status:<8} {loc.recorded}"
                  + (f" -> line {loc.line}" if loc.line else "") + (f": {loc.reason}" if loc.reason else ""))
    corrs = res["corrections"]
    print(f"errata: {len(errata.entries(corrs))} sentence(s) to correct "
          f"({sum(c.erratum is not None for c in corrs)} of {len(corrs)} with a suggested "
          f"correction); {sum(c.get('verdict') in errata.UNDECIDED for c in report.get('claims', []))} "
          f"claim(s) not decided; {sum(k.why == 'accelerator' for k in res['kept'].values())} "
          "decided by a kept run on an accelerator")
    for corr in corrs:
        if corr.problem:
            print(f"  {corr.id:<9} {corr.problem}")
    for problem in res["patch_problems"]:
        print(f"  {problem}")
    if res["misquoted"]:
        print(f"claims/expectations.toml: {len(res['misquoted'])} quoted span(s) not found in "
              "these notes:")
        for problem in res["misquoted"]:
            print(f"  {problem}")
    print(f"figures: {res['figures']}" if isinstance(res["figures"], str) else
          f"figures: {res['figures']} drawn")
    print("written: " + ", ".join(str(p) for p in [*res["pages"], res["errata"], res["notes"],
                                                   *res["patches"]]))
    return 0
