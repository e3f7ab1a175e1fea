"""``python -m support locate [--notes PATH ...]``: where each claim's sentence is in a copy of
the notes, by its fingerprint (support/notes/locate.py); the claims whose sentence moved,
changed or vanished are listed."""
from __future__ import annotations

from support.notes.locate import STATUSES, locate_all
from support.notes.pin import notes_given
from support.rules.entries import load_entries

NOTES_HELP = ("a notes file, plain text or Markdown (repeat; lecture=PATH names it; default: "
              "../shared/notes beside the checkout)")


def arguments(parser) -> None:
    parser.add_argument("--notes", action="append", metavar="PATH", help=NOTES_HELP)


def notes_or_none(command: str, args) -> list | None:
    """The notes ``--notes`` names (or the default copies), or None once said why not."""
    try:
        return notes_given(args.notes)
    except ValueError as exc:
        print(f"{command}: {exc}")
        return None


def run(args) -> int:
    registry = load_entries()
    paths = notes_or_none("locate", args)
    if paths is None:
        return 2
    locs = locate_all(registry, paths)
    counts = {s: sum(1 for loc in locs if loc.status == s) for s in STATUSES}
    print(", ".join(f"{s} {n}" for s, n in counts.items() if n) + f" ({len(locs)} claims)")
    for loc in locs:
        if loc.status != "found":
            print(f"  {loc.id:<9} {loc.status:<8} {loc.recorded}"
                  + (f" -> line {loc.line}" if loc.line else "") + (f": {loc.reason}" if loc.reason else ""))
    return 0
