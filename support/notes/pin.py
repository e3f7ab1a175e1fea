"""Pinning each claim to its sentence: which sentence a claim is, and its fingerprint in the
registry (see support/notes/locate.py for what a fingerprint is and how it is found again).

A claim's ``source`` names lines ("L:43-47", "S:20,26; L:495"); the lines of its own document
may hold several sentences. The claim's sentence is the one of those whose words best match
the claim's paraphrase and stated figure (cosine of words weighted by how rare they are in
the notes); ties go to the first. ``python -m support pin --notes A --notes B --write``
writes the fingerprints, one line ``fingerprint = "..."`` after each entry's ``source``
line (replacing an earlier one), touching nothing else.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from support.notes.locate import STATUSES, Notes, fingerprint, locate_all, read_all, recorded_lines, words

FP_LINE = re.compile(r'^fingerprint\s*=')


def idf(docs: dict[str, Notes]) -> dict[str, float]:
    df: dict[str, int] = {}
    n = 0
    for notes in docs.values():
        for s in notes.sentences:
            n += 1
            for w in set(words(notes.text[s.start:s.end])):
                df[w] = df.get(w, 0) + 1
    return {w: math.log((1 + n) / (1 + k)) + 1 for w, k in df.items()}


def choose(claim, notes: Notes, weights: dict[str, float]) -> tuple[int | None, str]:
    """(index of the claim's sentence in ``notes``, "") or (None, why none)."""
    lines = recorded_lines(claim.source, claim.document)
    if not lines:
        return None, f"its source {claim.source!r} names no line of the {claim.document}"
    cand = notes.touching(set(lines))
    if not cand:
        return None, (f"no sentence on line(s) {claim.source}: blank, or past the end "
                      f"of the file")
    query = set(words(f"{claim.paraphrase} {claim.stated}"))

    def score(i: int) -> float:
        s = notes.sentences[i]
        ws = set(words(notes.text[s.start:s.end]))
        norm = math.sqrt(sum(weights.get(w, 1.0) ** 2 for w in ws)) or 1.0
        return sum(weights.get(w, 1.0) ** 2 for w in ws & query) / norm

    return max(cand, key=lambda i: (score(i), -i)), ""


def pin(registry: dict, docs: dict[str, Notes]) -> tuple[dict[str, str], dict[str, str]]:
    """({id: fingerprint}, {id: why it could not be pinned}) for the documents given."""
    weights = idf(docs)
    pinned, unpinned = {}, {}
    for c in registry.values():
        notes = docs.get(c.document)
        if notes is None:
            unpinned[c.id] = f"no file was given for the {c.document}"
            continue
        i, why = choose(c, notes, weights)
        if i is None:
            unpinned[c.id] = why
        else:
            s = notes.sentences[i]
            pinned[c.id] = fingerprint(words(notes.text[s.start:s.end]))
    return pinned, unpinned


def write_fingerprints(directory: Path, fps: dict[str, str]) -> int:
    """Insert (or replace) ``fingerprint = "..."`` after each entry's ``source`` line in the
    registry files under ``directory``; returns how many entries were written."""
    written = 0
    from support.rules.registry import registry_files
    for path in registry_files(Path(directory)):
        lines = path.read_text(encoding="utf-8").split("\n")
        out, cid = [], None
        for line in lines:
            if line.strip() == "[[claim]]":
                cid = None
            m = re.match(r'^id\s*=\s*"([^"]+)"', line)
            if m:
                cid = m.group(1)
            if FP_LINE.match(line) and cid in fps:
                continue                      # replaced below, after the source line
            out.append(line)
            if re.match(r"^source\s*=", line) and cid in fps:
                out.append(f'fingerprint = "{fps[cid]}"')
                written += 1
        text = "\n".join(out)
        if text != "\n".join(lines):
            path.write_text(text, encoding="utf-8")
    return written


def arguments(command: str, parser) -> None:
    """``locate``: where each claim's sentence is now; ``pin``: compute the fingerprints."""
    parser.add_argument("--notes", action="append", required=True, metavar="PATH",
                        help="a notes file, plain text or Markdown (repeat; lecture=PATH names it)")
    if command == "pin":
        parser.add_argument("--write", action="store_true", help="write the registry files")


def run(command: str, args) -> int:
    from support.rules.registry import REGISTRY_DIR, load_registry
    registry = load_registry()
    if command == "pin":
        fps, unpinned = pin(registry, read_all(registry, args.notes))
        print(f"{len(fps)} claims pinned to a sentence, {len(unpinned)} not")
        for cid, why in unpinned.items():
            print(f"  {cid:<9} {why}")
        if args.write:
            print(f"{write_fingerprints(REGISTRY_DIR, fps)} fingerprints written in the section "
                  f"files under {REGISTRY_DIR}")
        return 0
    locs = locate_all(registry, args.notes)
    counts = {s: sum(1 for loc in locs if loc.status == s) for s in STATUSES}
    print(", ".join(f"{s} {n}" for s, n in counts.items() if n) + f" ({len(locs)} claims)")
    for loc in locs:
        if loc.status != "found":
            print(f"  {loc.id:<9} {loc.status:<8} {loc.recorded}"
                  + (f" -> line {loc.line}" if loc.line else "") + (f": {loc.reason}" if loc.reason else ""))
    return 0
