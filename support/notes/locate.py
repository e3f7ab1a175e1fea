"""Where each claim's sentence is in the notes, found by a fingerprint, never by a copy.

The suite holds no text of the notes. Each registry entry keeps the catalogue's line reference
(``source = "L:43-47"``) and a ``fingerprint`` of its sentence: 24 hex digits, the first 8 a
hash of the sentence's normalised words (the identity), the last 16 a 64-bit simhash of them
(how alike two sentences are, so an edited sentence can be told from a deleted one).

Reading a notes file (plain text or its Markdown source) gives its *sentences*:

* the words are compared, not the characters: Unicode compatibility forms (10⁻¹² = 10-12),
  Markdown links, HTML tags and entities, emphasis and code marks, list bullets, heading and
  table marks are dropped, case is ignored, and underscores split words;
* line wrapping is undone: the lines of a paragraph, list item or table cell are one text,
  split into sentences at . ! or ? followed by a capital or a digit;
* positions are *logical lines*: a file wrapped at a fixed width counts each paragraph's
  continuation lines as part of its first line, so a re-wrapped copy has the line numbers of
  the unwrapped one (one paragraph per line, like the plain-text notes).

A claim's sentence is the one, among the sentences touching the lines its ``source`` names in
its own document, whose words best match its paraphrase and stated figure (``choose``). The
locator then reports, per claim and file: ``found`` (its sentence touches its recorded lines),
``moved`` (the same words elsewhere; the nearest occurrence), ``changed`` (no such sentence,
but one with mostly the same words: it was edited), ``missing`` (nothing like it is left), or
``unpinned`` (the registry holds no fingerprint for it).

    python -m support locate --notes ../shared/notes/lecture-11-notes.txt ...
    python -m support pin --notes ... [--claim ID] [--write]    # (re)compute the fingerprints
"""
from __future__ import annotations

import bisect
import hashlib
import html
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from support.paths import ROOT
from support.rules.entries import PREFIX

FINGERPRINT_RE = re.compile(r"^[0-9a-f]{24}$")
SIMILAR_BITS = 14          # simhash distance up to which a sentence counts as an edit
STATUSES = ("found", "moved", "changed", "missing", "unpinned")

# ----------------------------------------------------------------------------- words
_LINK = re.compile(r"!?\[([^\]]*)\]\((?:[^()\s]|\([^()]*\))*\)")
_TAG = re.compile(r"</?[A-Za-z][^>]*>|\[\^[^\]]+\]")   # tags, footnote references
_FOOTNOTE = re.compile(r"(?<=[^\W\d_¹²³⁴⁵⁶⁷⁸⁹⁰]|[.,;:)])[¹²³⁴⁵⁶⁷⁸⁹⁰]+")  # after a word: a mark
_ROLE = re.compile(r"\{[\w:-]+\}(?=`)")
_WORD = re.compile(r"[^\W_]+")
_CAPTION = ("fig", "figure", "table")


def words(text: str) -> list[str]:
    """The normalised words of ``text`` (what a fingerprint is made of)."""
    t = unicodedata.normalize("NFKC", _FOOTNOTE.sub("", html.unescape(text)))
    t = _TAG.sub(" ", _ROLE.sub(" ", _LINK.sub(r" \1 ", t)))
    ws = _WORD.findall(t.lower())
    if len(ws) > 2 and ws[0] in _CAPTION and ws[1].isdigit():
        ws = ws[2:]                       # "Fig. 65 ..." is the renderer's, not the author's
    return ws


def _h64(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")


def fingerprint(ws: list[str]) -> str:
    """8 hex digits of identity + 16 of simhash over the words ``ws``."""
    exact = hashlib.sha1(" ".join(ws).encode()).hexdigest()[:8]
    acc = [0] * 64
    for w in ws:
        h = _h64(w)
        for b in range(64):
            acc[b] += 1 if (h >> b) & 1 else -1
    sim = sum(1 << b for b in range(64) if acc[b] > 0)
    return f"{exact}{sim:016x}"


def distance(a: str, b: str) -> int:
    """How many of the 64 simhash bits of two fingerprints differ."""
    return bin(int(a[8:], 16) ^ int(b[8:], 16)).count("1")


# ----------------------------------------------------------------------------- sentences
@dataclass(frozen=True)
class Sentence:
    start: int                 # character offsets in the file's text
    end: int
    line: int                  # the physical line it starts on
    first: int                 # logical lines it spans
    last: int
    fp: str

    @property
    def exact(self) -> str:
        return self.fp[:8]


_STRONG_BULLET = re.compile(r"^\s*[•◦▪‣]\s+")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_TABLE = re.compile(r"^\s*\|")
_MATH = re.compile(r"^\s*(?:\\\[|\$\$)")          # display math starts a block
_HEADING = re.compile(r"^\s*#{1,6}\s+")
_QUOTE = re.compile(r"^\s*>\s?")
_OPTION = re.compile(r"^\s*:[\w-]+:\s*")
_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})\s*(?:\{[\w:-]+\})?\s*")
_RULE = re.compile(r"^\s*\$\$\s*$|^\s*\|?[\s:|-]*-{3,}[\s:|-]*$")
_STOP = re.compile(r"[.!?][)\]\"'”’*_`]*(\s+)(?=[*_`\"“‘(\[$\\]*[A-Z0-9])")
_CLAUSE_END = re.compile(r"[.:;!?][)\]\"'”’*_`]*\s*$")
_CODE = re.compile(r"\S {2,}\S")        # aligned comments: a code line, never wrapped prose
_ABBREV = re.compile(r"(?:\b(?:e\.g|i\.e|[Ff]ig|[Ee]qs?|vs|cf|al|approx|[Rr]ef|[Ss]ec|[Nn]o))\.$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _marker(line: str, prev: str, ctx: tuple | None) -> tuple[str, int]:
    """(kind, length of the mark) for a line that starts a block, else ("", 0). A mark that
    a wrapped line may start with by chance ("- y", "# comment", "1. ", "| x") counts only
    after a blank line or inside a block of its kind: a table row after a row, an option
    after a directive, a list item after a line that ends a clause or at the indentation of
    the item before.
    ``ctx`` is (kind, indentation) of the block the previous line belongs to."""
    if not line.strip():
        return "blank", 0
    if _RULE.match(line):
        return "rule", len(line)
    for kind, rx in (("fence", _FENCE), ("bullet", _STRONG_BULLET), ("math", _MATH)):
        m = rx.match(line)
        if m:
            return kind, (0 if kind == "math" else m.end())
    kind_before, indent_before = ctx or ("", 0)
    for kind, rx in (("heading", _HEADING), ("option", _OPTION), ("bullet", _BULLET),
                     ("quote", _QUOTE), ("table", _TABLE)):
        m = rx.match(line)
        if not m:
            continue
        if not prev.strip() or kind_before == kind in ("table", "quote") \
                or (kind == "table" and kind_before == "rule") \
                or (kind == "option" and kind_before in ("fence", "option")) \
                or (kind == "bullet" and _CLAUSE_END.search(prev)) \
                or (kind == kind_before == "bullet" and _indent(line) <= indent_before):
            return kind, (0 if kind == "table" else m.end())
    return "", 0


def _wrap_width(lines: list[str]) -> int | None:
    """The width a file is wrapped at, or None for one paragraph per line."""
    lens = sorted(len(s.rstrip()) for s in lines if s.strip())
    if len(lens) < 10:
        return None
    w = lens[int(0.9 * (len(lens) - 1))]
    near = sum(1 for n in lens if 0.75 * w <= n <= w)
    return w if 20 <= w <= 200 and near >= 0.3 * len(lens) else None


def _continues(prev: str, line: str, width: int) -> bool:
    """Whether ``line`` is the continuation of a paragraph wrapped at ``width``: the next
    word would not have fitted on ``prev``, and neither line is code (aligned comments, an
    indentation that grows by more than a list item's)."""
    if _CODE.search(prev + "\n" + line) or _indent(line) > _indent(prev) + 2 \
            or len(prev.rstrip()) > 1.1 * width + 2:
        return False
    return len(prev.rstrip()) + 1 + len(line.split()[0]) > width


def _segments(text: str) -> tuple[list[tuple[int, int, int]], list[int]]:
    """The file's text units [(start, end, first physical line)] and, per physical line, its
    logical line. A unit is a paragraph, list item, heading, table cell or option value with
    its wrapping undone; the caller splits units into sentences."""
    lines = text.split("\n")
    units, spans, cur = [], [], None
    pos, prev, ctx = 0, "", None
    for i, line in enumerate(lines, 1):
        kind, mark = _marker(line, prev, ctx)
        ctx = None if kind == "blank" else ((kind, _indent(line)) if kind else ctx or ("", 0))
        if kind == "" and cur is not None:
            cur[1], spans[-1][1] = pos + len(line.rstrip()), i
        else:
            if cur:
                units.append(tuple(cur))
            cur = None
            if kind == "table":
                units += [(pos + m.start(), pos + m.end(), i)
                          for m in re.finditer(r"[^|]+", line) if m.group(0).strip()]
            elif kind in ("heading", "option", "fence") and line[mark:].strip():
                units.append((pos + mark, pos + len(line.rstrip()), i))
            elif kind in ("", "bullet", "quote", "math"):
                cur = [pos + mark, pos + len(line.rstrip()), i]
                spans.append([i, i])
        prev = line
        pos += len(line) + 1
    if cur:
        units.append(tuple(cur))
    return units, _logical(lines, spans)


def _logical(lines: list[str], spans: list[list[int]]) -> list[int]:
    """Per physical line, its logical line: a unit of several lines counts as one line when
    every line of it but the last was wrapped (the file's wrap width, ``_continues``), else
    each of its lines counts (code, a formula over several lines)."""
    width = _wrap_width(lines)
    joined = set()
    for a, b in spans:
        if width and b > a and all(_continues(lines[k - 1], lines[k], width) for k in range(a, b)):
            joined.update(range(a + 1, b + 1))
    out, n = [], 0
    for i in range(1, len(lines) + 1):
        n += i not in joined
        out.append(n)
    return out


def sentences(text: str) -> list[Sentence]:
    units, logical = _segments(text)
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    out = []

    def line_of(offset: int) -> int:       # physical line, 1-based
        return bisect.bisect_right(starts, offset)

    for start, end, _line in units:
        cuts, chunk = [start], text[start:end]
        for m in _STOP.finditer(chunk):
            if not _ABBREV.search(chunk[:m.start(1)]):
                cuts.append(start + m.end(1))
        cuts.append(end)
        for a, b in zip(cuts, cuts[1:]):
            seg = text[a:b].rstrip()
            ws = words(seg)
            if ws:
                first, last = line_of(a), line_of(a + len(seg) - 1)
                out.append(Sentence(a, a + len(seg), first, logical[first - 1],
                                    logical[last - 1], fingerprint(ws)))
    return out


class Notes:
    """One notes file, read into sentences."""

    def __init__(self, text: str, path: Path | None = None):
        self.text, self.path = text, path
        self.sentences = sentences(text)
        self.by_exact: dict[str, list[int]] = {}
        for i, s in enumerate(self.sentences):
            self.by_exact.setdefault(s.exact, []).append(i)

    @classmethod
    def read(cls, path: Path) -> "Notes":
        return cls(Path(path).read_text(encoding="utf-8"), Path(path))

    def touching(self, lines: set[int]) -> list[int]:
        return [i for i, s in enumerate(self.sentences)
                if any(s.first <= n <= s.last for n in lines)]


# ----------------------------------------------------------------------------- references
def recorded_lines(source: str, document: str) -> list[int]:
    """The lines of ``document`` that a catalogue reference names: "L:43-47; S:5" -> 43..47."""
    out: list[int] = []
    for prefix, spec in re.findall(r"\b([LS]):([\d,\-]+)", source):
        if prefix != PREFIX.get(document):
            continue
        for part in filter(None, spec.split(",")):
            a, _, b = part.partition("-")
            if a.isdigit():
                out += range(int(a), int(b) + 1) if b.isdigit() else [int(a)]
    return out


# ----------------------------------------------------------------------------- locating
@dataclass
class Location:
    id: str
    document: str
    recorded: str              # the catalogue reference, e.g. "L:43-47"
    status: str                # one of STATUSES
    line: int | None = None    # the physical line its sentence (or its edited form) starts on
    file: str = ""
    sentence: int | None = None
    reason: str = ""

    @property
    def found(self) -> bool:
        return self.status in ("found", "moved")

    def as_json(self) -> dict:
        d = asdict(self)
        d.pop("sentence")
        return dict(d, found=self.found)


def _nearest(notes: Notes, idx: list[int], lines: list[int]) -> int:
    def gap(i):
        s = notes.sentences[i]
        return min((abs(s.first - n) for n in lines), default=0)
    return min(idx, key=lambda i: (gap(i), i))


def locate(cid: str, document: str, source: str, fp: str, notes: Notes) -> Location:
    loc = Location(cid, document, source, "missing", file=str(notes.path or ""))
    lines = recorded_lines(source, document)
    if not fp:
        loc.status, loc.reason = "unpinned", "the registry holds no fingerprint for it"
        return loc
    hits = notes.by_exact.get(fp[:8], [])
    if hits:
        here = [i for i in hits if i in set(notes.touching(set(lines)))]
        loc.status = "found" if here else "moved"
        loc.sentence = here[0] if here else _nearest(notes, hits, lines)
    else:
        close = [i for i, s in enumerate(notes.sentences) if distance(s.fp, fp) <= SIMILAR_BITS]
        # edited in place: a like sentence on its recorded lines beats a likelier one elsewhere
        close = [i for i in close if i in set(notes.touching(set(lines)))] or close
        if close:
            best = min(distance(notes.sentences[i].fp, fp) for i in close)
            loc.status = "changed"
            loc.sentence = _nearest(notes, [i for i in close if
                                            distance(notes.sentences[i].fp, fp) == best], lines)
            loc.reason = "its sentence was edited: a sentence with mostly the same words is here"
        else:
            loc.reason = "no sentence with these words, or with most of them, is left"
    if loc.sentence is not None:
        loc.line = notes.sentences[loc.sentence].line
    return loc


def document_of(notes: Notes, registry: dict) -> str | None:
    """Which document a file holds: the one whose pinned sentences it contains most of."""
    hits = {d: 0 for d in PREFIX}
    for c in registry.values():
        fp = getattr(c, "fingerprint", "")
        if fp and fp[:8] in notes.by_exact:
            hits[c.document] += 1
    best = max(hits, key=hits.get)
    return best if hits[best] else None


def default_paths(root: Path | None = None) -> list[Path]:
    """The CI copies of both documents beside the checkout (``../shared/notes``), if there."""
    folder = (root or ROOT) / ".." / "shared" / "notes"
    paths = [folder / "lecture-11-notes.txt", folder / "frameworks-summary.txt"]
    return paths if all(p.exists() for p in paths) else []


def read_all(registry: dict, paths) -> dict[str, Notes]:
    """{document: Notes} for the files given; "lecture=PATH" names the document."""
    docs: dict[str, Notes] = {}
    for p in paths:
        name, _, rest = str(p).partition("=")
        named = name if rest and name in PREFIX else None
        notes = Notes.read(Path(rest if named else p))
        doc = named or document_of(notes, registry)
        if doc is None:
            raise ValueError(f"{p}: none of the registry's sentences are in this file; "
                             "name its document as lecture=PATH or sheet=PATH")
        docs[doc] = notes
    return docs


def locate_docs(registry: dict, docs: dict[str, Notes]) -> list[Location]:
    """Every claim of the documents read (``read_all``), located (the registry's order)."""
    return [locate(c.id, c.document, c.source, getattr(c, "fingerprint", ""), docs[c.document])
            for c in registry.values() if c.document in docs]


def locate_all(registry: dict, paths) -> list[Location]:
    """Every claim of the documents in the files ``paths``, located in its file."""
    return locate_docs(registry, read_all(registry, paths))


def changed_claims(registry: dict, paths, include_moved: bool = False) -> list[Location]:
    """The claims whose sentence changed or vanished (and moved, if asked): the tests to
    revisit after editing the notes."""
    bad = ("changed", "missing", "unpinned") + (("moved",) if include_moved else ())
    return [loc for loc in locate_all(registry, paths) if loc.status in bad]
