"""``python -m support pin [--notes PATH ...] [--claim ID ...] [--write]``: fingerprint each
claim's sentence (support/notes/pin.py) and say which differ from what the section files hold;
``--write`` writes them, ``--claim ID`` one claim's alone."""
from __future__ import annotations

from support.commands import locate
from support.notes.locate import locate as where, read_all
from support.notes.pin import idf, pin, sentence_of, write_fingerprints
from support.rules.entries import ENTRIES_DIR, load_entries


def arguments(parser) -> None:
    locate.arguments(parser)
    parser.add_argument("--claim", action="append", metavar="ID", default=None,
                        help="pin this claim only (repeat); every other entry is left as it is")
    parser.add_argument("--write", action="store_true", help="write the fingerprints that "
                        "differ into the section files")


def run(args) -> int:
    registry = load_entries()
    paths = locate.notes_or_none("pin", args)
    if paths is None:
        return 2
    unknown = [cid for cid in args.claim or () if cid not in registry]
    if unknown:
        print(f"pin: no claim {', '.join(unknown)} in the section files")
        return 2
    docs = read_all(registry, paths)
    fps, unpinned = pin(registry, docs, args.claim)
    moved = {cid: fp for cid, fp in fps.items() if fp != registry[cid].fingerprint}
    print(f"{len(fps)} claims pinned to a sentence, {len(unpinned)} not; "
          f"{len(moved)} differ from the fingerprint their entry holds")
    for cid, why in unpinned.items():
        print(f"  {cid:<9} {why}")
    weights = idf(docs)
    for cid, fp in moved.items():
        c = registry[cid]
        _, line, text = sentence_of(c, docs, weights)
        print(f"  {cid:<9} {c.fingerprint or '(none)'} -> {fp}  line {line}: "
              f"{text[:90]}{'...' if len(text) > 90 else ''}")
        if c.fingerprint and where(cid, c.document, c.source, c.fingerprint,
                                    docs[c.document]).status == "found":
            print(f"  {'':<9} (the sentence its entry holds is still on its lines; "
                  "--write would pin it to this one instead)")
    if args.write:
        print(f"{write_fingerprints(ENTRIES_DIR, moved)} fingerprints written in the "
              f"section files under {ENTRIES_DIR}")
    elif moved:
        print("(--write writes them; --claim ID --write writes one claim's alone)")
    return 1 if unpinned and args.claim else 0
