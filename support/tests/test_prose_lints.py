"""Prose says what, never what was measured: a lint of the claims' prose, with its negative
control.

A figure a run measured changes with each release and each machine, so a text that copies one
is wrong somewhere the day it is written; where a control landed lives in controls.json and
the controls summary, a claim's figures in its report, an erratum's in its ``show``. The prose
read here: each control's ``what=`` and docstring, each claim test's docstring and the literal
text of its ``claim.note(...)`` calls (read as syntax trees), each entry's ``meaning`` and each
expectation's ``reason`` and erratum ``finding`` (read as TOML). It needs nothing outside the
checkout.
"""
from __future__ import annotations

import ast
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from support.paths import ROOT

# a measured figure: a decimal (3.7), scientific notation (4.9e-4), a percentage (16 %) or a
# multiplier (x2.4, 2.1x; x64, x32 and x86 are names). A plain integer is a count, a width, a
# seed or an epoch; a token of two or more dots (1.26.4, 7.3.1) is a version or a section,
# never a measurement
_TOKEN = re.compile(r"(?<![\w.§])(?P<num>\d+(?:\.\d+)*(?:[eE][-+]?\d+)?)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FIGURE = re.compile(
    r"(?<![\w.§])(?:"
    r"(?P<sci>\d+(?:\.\d+)?[eE][-+]?\d+)"
    r"|x(?!(?:32|64|86)(?!\d))(?P<xpre>\d+(?:\.\d+)?)"
    r"|(?P<pct>\d+(?:\.\d+)?)\s?%"
    r"|(?P<xpost>\d+(?:\.\d+)?)[x×](?![\w\d])"
    r"|(?P<dec>\d+\.\d+)"
    r")(?![\w]|\.\d)")
# a version beside its package (torch 2.0, Python 3.12, CUDA 12.4, numpy >= 1.25, and the
# versions listed after it: "torch 2.5 and 2.6")
_PACKAGES = (r"(?:py)?torch|jax|jaxlib|optax|numpy|pandas|python|cuda|cudnn|rocm|scikit-learn"
             r"|sklearn|scipy|flax|keras|onnx|onnxruntime|xlrd|triton|pytest|hypothesis|xla"
             r"|mkl|openblas|macos|ubuntu|nccl")
_VERSION = re.compile(
    rf"\b(?:{_PACKAGES})\s*(?:==|>=|<=|~=|<|>|=)?\s*v?\d+(?:\.\d+)*"
    rf"(?:\s*(?:,|and|or|to|-|/)\s*v?\d+(?:\.\d+)+)*", re.I)
# a section of a protocol (§7.3, §§7.3-7.4)
_SECTION = re.compile(r"§+\s*\d+(?:\.\d+)*(?:\s*[-–]\s*\d+(?:\.\d+)*)?")
# code quoted in prose (`torch.tensor(1.0)`, a jaxpr's `sub 1.0 i`) is the code's, not a reading
_CODE = re.compile(r"`[^`]+`")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    kind: str           # what=, control docstring, test docstring, claim.note, meaning, ...
    claims: tuple
    number: str
    context: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line} ({self.kind}, {', '.join(self.claims) or '-'}): "
                f"{self.number!r} in {self.context!r}")


def _value(text: str) -> float:
    return float(text.rstrip("x×").lstrip("x"))


def _numbers(text: str) -> set:
    """Every number a text writes, as floats (1,024 and 1e-15 included), and as it is
    written."""
    out = set()
    for m in _TOKEN.finditer(_THOUSANDS.sub("", str(text))):
        num = m.group("num")
        if num.count(".") <= 1:
            out |= {abs(float(num)), num}
    return out


def _literals(node) -> set:
    """The numeric literals a piece of code writes (a perturbation's own size, a test's
    setup), as numbers and as written."""
    return {form for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
            for form in (abs(float(n.value)), repr(n.value))}


def _entry_numbers(entry: dict) -> set:
    """The numbers a claim's own entry holds: its paraphrase, the notes' words (``notes_words``),
    each figure's stated value, bounds and tolerance."""
    out = _numbers(entry.get("paraphrase", "")) | _numbers(entry.get("notes_words", ""))
    for f in entry.get("figures", []):
        for key in ("stated", "bound", "tol"):
            raw = f.get(key)
            for part in raw.values() if isinstance(raw, dict) else \
                    raw if isinstance(raw, list) else [raw]:
                if isinstance(part, bool) or part is None:
                    continue
                out |= {abs(float(part)), repr(part)} if isinstance(part, (int, float)) \
                    else _numbers(part)
    return out


def _excepted(text: str, value: float, kind: str, allowed: set) -> bool:
    """Whether a figure is a number the prose may write: one its entry or its code holds (a
    percentage also as a fraction, or as the factor 1 +- that fraction). A decimal written
    with more digits than the entry writes it ("5.50" beside a stated 5.5) is a reading, not
    that number."""
    if re.search(r"\.\d*0$", text) and text not in allowed:
        return False
    allowed = {a for a in allowed if isinstance(a, float)}
    # a literal's size in another unit (2.7 ms for 0.0027 s, 0.2 ms for 2e-4 s)
    candidates = {value, value / 1e3, value * 1e3, value / 1e6, value * 1e6}
    if kind == "pct":
        candidates |= {value / 100, 1 + value / 100, abs(1 - value / 100)}
    return any(math.isclose(c, a, rel_tol=1e-9, abs_tol=1e-12)
               for c in candidates for a in allowed)


def measured_in(text: str, allowed: set) -> list[tuple[str, str]]:
    """(figure, context) for each measured figure a text writes that is not excepted."""
    spared = [m.span() for r in (_VERSION, _SECTION, _CODE) for m in r.finditer(text)]
    out = []
    for m in _FIGURE.finditer(text):
        if any(a <= m.start() and m.end() <= b for a, b in spared):
            continue
        kind = m.lastgroup
        if _excepted(m.group(kind).strip("x×"), _value(m.group(kind)), kind, allowed):
            continue
        lo, hi = max(0, m.start() - 40), min(len(text), m.end() + 40)
        context = " ".join(text[lo:hi].split())
        out.append((m.group(0), ("..." if lo else "") + context + ("..." if hi < len(text) else "")))
    return out


def _line_of(lines: list[str], start: int, end: int, number: str) -> int:
    """The 1-based line, between ``start`` and ``end``, that writes ``number`` (the first
    line where a string spread over several lines does not show it whole)."""
    for i in range(start - 1, min(end, len(lines))):
        if number in lines[i]:
            return i + 1
    return start


# ------------------------------------------------------------------------- the Python prose

def _string(node) -> str | None:
    """A literal's text: a string, or the literal parts of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _decorator_call(fn, name: str):
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and (getattr(dec.func, "id", None) == name
                                          or getattr(dec.func, "attr", None) == name):
            yield dec


def _claim_ids(fn) -> tuple:
    ids = []
    for dec in fn.decorator_list:
        for sub in ast.walk(dec):
            if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == "claim" \
                    and getattr(sub.func.value, "attr", "") == "mark":
                ids += [a.value for a in sub.args if isinstance(a, ast.Constant)]
    return tuple(ids)


def _module_constants(tree) -> dict[str, set]:
    """Name -> the numeric literals of a module-level assignment to it (a control's size
    written once above it: JUST_DEARER = 0.04)."""
    out: dict[str, set] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        out.setdefault(name.id, set()).update(_literals(node.value))
    return out


def _own_numbers(fn, constants: dict, functions: dict) -> set:
    """The literals of a function's code, decorators included, of the module-level
    constants it names, and of the module's functions it calls, theirs too (a control made
    of two others has their sizes)."""
    out, seen, todo = set(), set(), [fn]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        out |= _literals(node).union(*(constants[n] for n in names if n in constants))
        todo += [functions[n] for n in names if n in functions]
    return out


def _docstring(fn):
    first = fn.body[0] if fn.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first.value
    return None


def _python_prose(path: Path, root: Path, entries: dict, setup: dict) -> list[Finding]:
    """The findings in a claim module's prose; ``setup`` gains, per claim, the literals of
    the tests that check it (an lr, a batch, a step count), which its meaning may name."""
    source = path.read_text(encoding="utf-8")
    lines, tree = source.splitlines(), ast.parse(source)
    constants = _module_constants(tree)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    rel = str(path.relative_to(root))
    out = []

    def scan(node, text, kind, claims, allowed):
        allowed = allowed.union(*(entries.get(c, set()) for c in claims))
        for number, context in measured_in(text, allowed):
            out.append(Finding(rel, _line_of(lines, node.lineno, node.end_lineno, number),
                               kind, claims, number, context))

    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef))]:
        controls = list(_decorator_call(fn, "control"))
        tested = _claim_ids(fn)
        if not controls and not tested:
            continue
        own = _own_numbers(fn, constants, functions)
        for cid in tested:
            setup.setdefault(cid, set()).update(own)
        doc = _docstring(fn)
        for dec in controls:
            claims = tuple(a.value for a in dec.args if isinstance(a, ast.Constant))
            for kw in dec.keywords:
                if kw.arg == "what" and _string(kw.value) is not None:
                    scan(kw.value, _string(kw.value), "what=", claims, own)
            if doc is not None:
                scan(doc, doc.value, "control docstring", claims, own)
        if tested:
            if doc is not None and not controls:
                scan(doc, doc.value, "test docstring", tested, own)
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "note" \
                        and getattr(call.func.value, "id", "") == "claim":
                    for arg in call.args:
                        if _string(arg) is not None:
                            scan(arg, _string(arg), "claim.note", tested, own)
    return out


# --------------------------------------------------------------------------- the TOML prose

def _field_lines(lines: list[str], start: int, key: str) -> tuple[int, int]:
    """(first, last) 1-based lines of the field ``key`` in the table that begins at line
    ``start`` (a value that spreads over lines ends where the next field or table begins)."""
    first = next((i for i in range(start - 1, len(lines))
                  if re.match(rf"\s*{re.escape(key)}\s*=", lines[i])
                  or i > start - 1 and lines[i].startswith("[[")), start - 1)
    last = next((i for i in range(first + 1, len(lines))
                 if re.match(r"\s*[\w\"-]+\s*=|\[\[", lines[i])), len(lines))
    return first + 1, last


def _table_starts(lines: list[str], header: str) -> list[int]:
    return [i + 1 for i, line in enumerate(lines) if line.strip() == header]


def _entries(root: Path) -> list[tuple[Path, list[str], dict, int]]:
    """(section file, its lines, the entry, the line its table starts on) for every claim."""
    out = []
    for path in sorted((root / "claims").glob("*/*.toml")):
        text = path.read_text(encoding="utf-8")
        lines, data = text.splitlines(), tomllib.loads(text)
        out += [(path, lines, entry, start) for entry, start in
                zip(data.get("claim", []), _table_starts(lines, "[[claim]]"))]
    return out


def _meanings(root: Path, entries: list, numbers: dict, setup: dict) -> list[Finding]:
    """The findings in each entry's ``meaning``, which may also name its tests' setup."""
    found = []
    for path, lines, entry, start in entries:
        meaning = re.sub(r"\{(bound|stated|band|reach):[^{}]+\}", "", entry.get("meaning", ""))
        first, last = _field_lines(lines, start, "meaning")
        found += [Finding(str(path.relative_to(root)), _line_of(lines, first, last, n),
                          "meaning", (entry["id"],), n, c)
                  for n, c in measured_in(meaning, numbers[entry["id"]]
                                          | setup.get(entry["id"], set()))]
    return found


def _expectations(root: Path, entries: dict) -> list[Finding]:
    path = root / "claims" / "expectations.toml"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines, data = text.splitlines(), tomllib.loads(text)
    out = []
    for e, start in zip(data.get("expect", []), _table_starts(lines, "[[expect]]")):
        allowed = entries.get(e.get("id"), set())
        erratum = e.get("erratum") or {}
        for kind, key, prose in (("expectation reason", "reason", e.get("reason", "")),
                                 ("erratum finding", "erratum", erratum.get("finding", ""))):
            first, last = _field_lines(lines, start, key)
            out += [Finding(str(path.relative_to(root)), _line_of(lines, first, last, n),
                            kind, (e.get("id", "?"),), n, c)
                    for n, c in measured_in(prose, allowed)]
    return out


def measured_in_prose(root: Path = ROOT) -> list[Finding]:
    """Every measured figure the claims' prose writes that is not excepted: a number of the
    claim's own entry (its paraphrase, the notes' words, a figure's stated value, bounds and
    tolerance); in a control's what= and docstring, a literal of the control's code (the
    perturbation's own size); in a test's docstring and notes, and in its claim's meaning, a
    literal of the test's code (its setup); a version beside its package; a protocol's
    section; a dtype's name; code quoted in backticks."""
    entries = _entries(root)
    numbers = {entry["id"]: _entry_numbers(entry) for _, _, entry, _ in entries}
    found, setup = [], {}
    for path in sorted((root / "claims").glob("*/test_*.py")):
        found += _python_prose(path, root, numbers, setup)
    return _meanings(root, entries, numbers, setup) + found + _expectations(root, numbers)


def _summary(found: list[Finding]) -> str:
    kinds = Counter(f.kind for f in found)
    files = Counter(f.path for f in found)
    return ("by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common())
            + "\nby file:\n  " + "\n  ".join(f"{n:4d} {p}" for p, n in sorted(files.items())))


def test_no_prose_holds_a_measured_figure():
    """Prose says what a control does and by how much, what a test measures and why, how a
    sentence is read and why a known failure is one; a figure a run measured lives in the
    run's report, controls.json and an erratum's ``show``, which each run writes afresh."""
    found = measured_in_prose()
    assert not found, "\n  ".join(
        [f"{len(found)} measured figures in the claims' prose (say it in words; the run's "
         f"figures are in its report):", _summary(found)] + [str(f) for f in found])


def test_the_prose_lint_sees_a_measured_figure(tmp_path):
    """Negative control of the lint above: a claim planted with a measured figure in a
    control's what=, an entry's meaning, a test's docstring (the stated 1.8 read as 1.80) and
    an expectation's reason (4 findings); the perturbation's own size, its stated figure, the
    test's setup (in its docstring and in its claim's meaning), a version, a section, a dtype
    and code in backticks are not findings."""
    (tmp_path / "claims" / "lecture").mkdir(parents=True)
    (tmp_path / "claims" / "lecture" / "01_s.toml").write_text(
        'document = "lecture"\nsection = "S"\nlines = "L:1-9"\n\n[[claim]]\nid = "AB-01"\n'
        'source = "L:3"\nparaphrase = "Doubling the batch takes 1.8x the time."\nkind = "d"\n'
        'tier = "fast"\nmeaning = "Read on float16 and torch 2.6 (protocol §7.3) at the test\'s '
        'lr 0.01, each step `x * 1.5`; the run measured 1.93."\nfigures = [{ name = "ratio", stated = 1.8, bound = "> 1.5" }]\n')
    (tmp_path / "claims" / "lecture" / "test_01_s.py").write_text(
        'import pytest\nimport torch\n\nfrom support.rules.controls import control\n\n\n'
        '@pytest.mark.claim("AB-01")\ndef test_doubling_the_batch(claim):\n'
        '    """Times a batch of 64 against 128 at lr 0.01; the ratio read 1.80 here."""\n'
        '    claim.note(f"bfloat16 {torch.__version__}: ratio stated 1.8, bound 1.5")\n'
        '    claim.check("ratio", 0.01 * 64)\n\n\n'
        '@control("AB-01", what="the bigger batch costs 2.5 % more, not 1.8x "\n'
        '                       "(landed at 1.04 on a busy machine)")\n'
        'def dearer(mp):\n    """Costs 2.5 % more (1.025 of the time)."""\n'
        '    mp.setattr(torch, "add", lambda *a: 1.025)\n')
    (tmp_path / "claims" / "expectations.toml").write_text(
        '[[expect]]\nid = "AB-01"\nverdict = "drift"\nmeasurement = "ratio"\n'
        'reason = "Python 3.12 with CUDA 12.4 reads 2.3 instead of 1.8."\n'
        'erratum = { quote = "1.8x", correction = "twice", finding = "About twice (1.8x '
        'stated)." }\n')
    found = measured_in_prose(tmp_path)
    assert [(f.path, f.line, f.kind, f.claims, f.number) for f in found] == [
        ("claims/lecture/01_s.toml", 11, "meaning", ("AB-01",), "1.93"),
        ("claims/lecture/test_01_s.py", 9, "test docstring", ("AB-01",), "1.80"),
        ("claims/lecture/test_01_s.py", 15, "what=", ("AB-01",), "1.04"),
        ("claims/expectations.toml", 5, "expectation reason", ("AB-01",), "2.3"),
    ], "\n".join(map(str, found))
    assert str(found[2]).startswith("claims/lecture/test_01_s.py:15 (what=, AB-01): '1.04' in ")


# a meaning says the reading once: how a figure is computed lives in its test, what is
# recorded beside it in the report
MEANING_MAX_CHARS = 500


def long_meanings(root: Path = ROOT) -> list[str]:
    """``path: ID (n characters)`` for each entry whose ``meaning`` is over the limit."""
    out = []
    for path in sorted((root / "claims").glob("*/*.toml")):
        for entry in tomllib.loads(path.read_text(encoding="utf-8")).get("claim", []):
            n = len(entry.get("meaning", ""))
            if n > MEANING_MAX_CHARS:
                out.append(f"{path.relative_to(root)}: {entry['id']} ({n} characters)")
    return out


def test_every_meaning_is_short():
    bad = long_meanings()
    assert not bad, "\n  ".join([f"meanings over {MEANING_MAX_CHARS} characters (say the "
                                 "reading once; the how belongs to the test):"] + bad)


def test_the_meaning_length_lint_sees_a_long_one(tmp_path):
    """Negative control of the lint above."""
    (tmp_path / "claims" / "lecture").mkdir(parents=True)
    (tmp_path / "claims" / "lecture" / "01_s.toml").write_text(
        '[[claim]]\nid = "AB-01"\nmeaning = "' + "word " * 101 + '"\n\n'
        '[[claim]]\nid = "AB-02"\nmeaning = "' + "word " * 100 + '"\n')
    assert long_meanings(tmp_path) == ["claims/lecture/01_s.toml: AB-01 (505 characters)"]
