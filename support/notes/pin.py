"""Pinning each claim to its sentence: which sentence a claim is, and its fingerprint in the
registry (see support/notes/locate.py for what a fingerprint is and how it is found again).

A claim's ``source`` names lines ("L:43-47", "S:20,26; L:495"); the lines of its own document
may hold several sentences. The claim's sentence is the one of those whose words best match
the claim's paraphrase and stated figure (cosine of words weighted by how rare they are in
the notes); ties go to the first. ``python -m support pin`` (support/commands/pin.py) says
which claims' fingerprints differ from what their section files hold; ``--write`` writes them, one line
``fingerprint = "..."`` after each entry's ``source`` line (replacing an earlier one),
touching nothing else; ``--claim ID`` pins that claim alone (a new or re-read sentence),
leaving every other entry as it is, byte for byte. The notes are the files ``--notes``
names, else the copies beside the checkout (``../shared/notes``).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from support.notes.locate import Notes, default_paths, fingerprint, recorded_lines, words

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
    query = set(words(f"{claim.paraphrase} {claim.notes_words}"))

    def score(i: int) -> float:
        s = notes.sentences[i]
        ws = set(words(notes.text[s.start:s.end]))
        norm = math.sqrt(sum(weights.get(w, 1.0) ** 2 for w in ws)) or 1.0
        return sum(weights.get(w, 1.0) ** 2 for w in ws & query) / norm

    return max(cand, key=lambda i: (score(i), -i)), ""


def sentence_of(claim, docs: dict[str, Notes], weights: dict[str, float] | None = None
                ) -> tuple[str, int, str] | str:
    """(fingerprint, physical line, text) of the claim's sentence in ``docs``, or why there
    is none."""
    notes = docs.get(claim.document)
    if notes is None:
        return f"no file was given for the {claim.document}"
    i, why = choose(claim, notes, idf(docs) if weights is None else weights)
    if i is None:
        return why
    s = notes.sentences[i]
    text = notes.text[s.start:s.end]
    return fingerprint(words(text)), s.line, " ".join(text.split())


def pin(registry: dict, docs: dict[str, Notes], only=None) -> tuple[dict[str, str], dict[str, str]]:
    """({id: fingerprint}, {id: why it could not be pinned}) for the documents given: every
    claim of ``registry``, or the IDs ``only`` names."""
    weights = idf(docs)
    pinned, unpinned = {}, {}
    for c in registry.values():
        if only is not None and c.id not in only:
            continue
        got = sentence_of(c, docs, weights)
        if isinstance(got, str):
            unpinned[c.id] = got
        else:
            pinned[c.id] = got[0]
    return pinned, unpinned


def notes_given(paths) -> list:
    """The notes files to read: those named, else the copies beside the checkout; raise
    ValueError saying how to name them where there are none."""
    found = list(paths or default_paths())
    if not found:
        raise ValueError("no notes: name them with --notes PATH (the lecture and the sheet; "
                         "lecture=PATH names a file's document), or put them in ../shared/notes "
                         "beside the checkout")
    return found


def write_fingerprints(directory: Path, fps: dict[str, str]) -> int:
    """Insert (or replace) ``fingerprint = "..."`` after each entry's ``source`` line in the
    registry files under ``directory``; returns how many entries were written."""
    written = 0
    from support.rules.entries import section_files
    for path in section_files(Path(directory)):
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
