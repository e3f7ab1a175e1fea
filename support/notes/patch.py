"""The patch: the errata's corrections written into the notes' own text, every quoted span of
the located sentences replaced, the line breaks of a wrapped paragraph kept, one unified diff
per file, for ``patch`` or ``git apply`` (``python -m support notes --patch``)."""
from __future__ import annotations

import difflib
import re

from support.notes.errata import Correction


def _rewrapped(matched: str, correction: str) -> str:
    """``correction`` with the line breaks ``matched`` had, at the same word gaps (the
    paragraph's own wrapping kept; a break past the correction's last gap goes there)."""
    gaps = re.findall(r"\s+", matched)
    words = correction.split()
    if not any("\n" in g for g in gaps) or len(words) < 2:
        return correction
    seps = [" "] * (len(words) - 1)
    for i, g in enumerate(gaps):
        if "\n" in g:
            seps[min(i, len(seps) - 1)] = g
    return words[0] + "".join(s + w for s, w in zip(seps, words[1:]))


def corrected_text(text: str, corrs: list[Correction]) -> tuple[str, list[str]]:
    """The file's text with every span of every applicable correction corrected, and what
    could not be."""
    todo = sorted(((c.id, p) for c in corrs for p in c.placed), key=lambda t: t[1].offsets)
    problems, keep, end = [], [], -1
    for cid, p in todo:
        if p.offsets[0] < end:
            problems.append(f"{cid}: its quoted words \"{p.span.quote}\" overlap another "
                            "correction's")
            continue
        keep.append(p)
        end = p.offsets[1]
    for p in reversed(keep):
        a, b = p.offsets
        text = text[:a] + _rewrapped(text[a:b], p.span.correction) + text[b:]
    return text, problems


def unified_diff(old: str, new: str, name: str) -> str:
    """A unified diff of one file (``a/NAME`` -> ``b/NAME``), a missing final newline
    marked as ``patch`` and ``git apply`` expect it."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=3):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def patches(corrs: list[Correction], docs: dict) -> dict[str, tuple[str, list[str]]]:
    """{document: (unified diff of its file, problems)} for the documents with corrections."""
    out = {}
    for doc, notes in docs.items():
        mine = [c for c in corrs if c.document == doc]
        new, problems = corrected_text(notes.text, mine)
        name = notes.path.name if notes.path else f"{doc}.txt"
        out[doc] = (unified_diff(notes.text, new, name), problems)
    return out
