"""Where a claim's entry and tests go, and a new claim's entry and test stub written there.

The rules of place, which the lints (support/tests/test_claims_tree.py) and ``python -m support
check-claim`` both apply: a document's section files are numbered in the order of the lines
they cover; a file's entries follow the order of their sentences; a claim's tests live in its
section's test module (or the one module its entry names, with why).

:func:`plan` and :func:`write` put a new claim in its place (``python -m support new-claim``,
in support/commands/new_claim.py, pins it to its sentence between the two). The section is
named by its file (``08_pytorch_records_a_tape``, ``lecture/08``, ``sheet/01_key_ideas_07``) or
by its heading or part (``"PyTorch records a tape"``, ``Modes``). The ID is the one given, or
the next free ID of the prefix most of the section's claims have (``--prefix`` for another); an ID the catalogue
beside the checkout does not list (every ID assigned here) is marked ``suite-added`` in its
``source``, as the registry lint asks. The entry goes into the section's TOML file before the
first claim whose sentence comes later in the notes, with the fingerprint of its sentence
when one is given (support/notes/pin.py computes it); the stub (a test that skips, saying it
is a stub, named after the paraphrase, and a negative control that perturbs nothing yet) goes
into the section's test module before that claim's tests. The contributor's guide
(claims/README.md) says what to write in them.
"""
from __future__ import annotations

import ast
import re
import unicodedata
from collections import Counter
from pathlib import Path

from support.paths import CLAIMS, ROOT
from support.rules import entries as reg

# the catalogue the registry began from, where CI keeps it beside the checkout; the section
# files are the list of claims, and the catalogue is compared with them only where present
CATALOGUE = ROOT.parent / "shared" / "reference" / "claims-catalogue.md"
# the words of a source that mark a sentence the catalogue lacks ("L:313 (suite-added)")
SUITE_ADDED = "suite-added"
# what a stub test says when it skips, and what a stub control's what= says (each written
# on two lines of the stub; check-claim finds a stub left as it was by these words)
_SKIP_LINES = ("is a stub (python -m support new-claim): ", "its measurement is not written yet")
_WHAT_LINES = ("a perturbation of the library under ", "which the sentence is false (to write)")
STUB_SKIP, STUB_WHAT = "".join(_SKIP_LINES), "".join(_WHAT_LINES)


class ScaffoldError(ValueError):
    pass


def first_line(source: str, document: str) -> int:
    """The first line of ``document`` a catalogue reference names ("L:43-47; S:5" -> 43 in
    the lecture); one that names none sorts last."""
    m = re.search(reg.PREFIX[document] + r":(\d+)", source)
    return int(m.group(1)) if m else 10 ** 9


def catalogue_ids(path: Path = CATALOGUE) -> set[str] | None:
    """The IDs the catalogue lists (a row ``| TAPE-07 | ...``), or None where it is absent."""
    if not Path(path).is_file():
        return None
    return set(re.findall(r"^\| ([A-Z]+-\d\d) \|", Path(path).read_text(encoding="utf-8"), re.M))


# ----------------------------------------------------------------------------- place
def sections_out_of_order(files: list[Path]) -> list[str]:
    """Section files whose names, in order, do not follow the lines they cover (per folder)."""
    out = []
    for folder in sorted({p.parent for p in files}):
        mine = sorted((p for p in files if p.parent == folder), key=lambda p: p.stem)
        heads = [reg.tomllib.loads(p.read_text(encoding="utf-8")) for p in mine]
        starts = [first_line(h["lines"], h["document"]) for h in heads]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            out.append(f"{folder.name}: {[p.stem for p in mine]} cover lines "
                       f"starting {starts}")
    return out


def entries_out_of_order(path: Path) -> str | None:
    """Why the entries of the section file ``path`` are not in the order of their sentences,
    or None."""
    data = reg.tomllib.loads(Path(path).read_text(encoding="utf-8"))
    lines = [first_line(c["source"], data["document"]) for c in data["claim"]]
    if lines == sorted(lines):
        return None
    where = Path(path).relative_to(ROOT) if Path(path).is_relative_to(ROOT) else path
    return f"{where}: {[c['id'] for c in data['claim']]} at {lines}"


def misplaced(registry, markers) -> list[str]:
    """Tests that live outside their claim's section module (and the module it names)."""
    out = []
    for cid, where in markers.items():
        if cid not in registry:
            continue
        allowed = registry[cid].test_modules()
        out += [f"{cid}: {w} (its section: {allowed[0]})" for w in where
                if w.split("::")[0] not in allowed]
    return out


def find_section(name: str, claims: Path = CLAIMS) -> Path:
    """The section file that ``name`` names: its heading or part, or its file's name or the
    start of it (``08``, ``lecture/08``, ``01_key_ideas_07``)."""
    files = reg.section_files(claims)
    key = name.strip().strip("/").removesuffix(".toml").lower()
    hits = []
    for path in files:
        rel = str(path.relative_to(claims).with_suffix(""))
        head = reg.tomllib.loads(path.read_text(encoding="utf-8"))
        words = {str(head.get("section", "")).lower(), str(head.get("part", "")).lower()}
        if key in words or any(n == key or n.startswith(key + "_") for n in (path.stem, rel)):
            hits.append(path)
    if len(hits) != 1:
        known = "\n  ".join(str(p.relative_to(claims).with_suffix("")) for p in files)
        what = "names several sections" if hits else "names no section"
        raise ScaffoldError(f"{name!r} {what}; the sections are:\n  {known}\n(a section of "
                            "the notes with no claims yet: write its file's header first, "
                            "document/section/lines, as the others have it)")
    return hits[0]


# ----------------------------------------------------------------------------- the ID
def section_prefix(toml: Path) -> str:
    """The prefix most of the section's claims have; refused where two tie."""
    data = reg.tomllib.loads(Path(toml).read_text(encoding="utf-8"))
    counts = Counter(c["id"].split("-")[0] for c in data.get("claim", []))
    ranked = counts.most_common()
    if not ranked or len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        have = ", ".join(f"{p} ({n})" for p, n in ranked) or "none"
        raise ScaffoldError(f"{Path(toml).name}: no one prefix holds most of its claims "
                            f"({have}); name the new claim's with --prefix")
    return ranked[0][0]


def next_id(prefix: str, taken) -> str:
    """The next free ID of ``prefix``: one past the highest taken (an ID is never reused)."""
    if not re.fullmatch(r"[A-Z]{2,5}", prefix):
        raise ScaffoldError(f"{prefix!r} is not a prefix (two to five capitals: TAPE, JIT)")
    n = 1 + max((int(i.split("-")[1]) for i in taken if i.split("-")[0] == prefix), default=0)
    if n > 99:
        raise ScaffoldError(f"{prefix} has no free ID left (PREFIX-NN); give one with --id")
    return f"{prefix}-{n:02d}"


# ----------------------------------------------------------------------------- the test's name
# marks spelled as the words they stand for, longest first, so that a name keeps what its
# paraphrase says ("+/-" is "plus minus", "/" between words "or", between numbers "over")
_SPELLED = (("±", "plus minus"), ("<=", "at most"), ("≤", "at most"), (">=", "at least"),
            ("≥", "at least"), ("!=", "differs from"), ("≠", "differs from"),
            ("==", "equals"), ("->", "to"), ("→", "to"), ("≈", "about"), ("~", "about"),
            ("%", "percent"), ("+", "plus"), ("=", "equals"), ("<", "below"), (">", "above"),
            ("×", "times"), ("*", "times"), ("^", "to the"), ("&", "and"), ("@", "at"),
            ("#", "number"), ("§", "section"))


def stub_name(paraphrase: str) -> str:
    """``test_`` and the paraphrase's words, its marks spelled out: "train()/eval() switch
    dropout, +/- 5%" -> ``test_train_or_eval_switch_dropout_plus_minus_5_percent``."""
    t = unicodedata.normalize("NFKC", paraphrase).rstrip(". ")
    t = re.sub(r"(?<=[^\W\d_])[’']s\b", "s", t).replace("'", "").replace("’", "")
    t = t.replace("+/-", " plus minus ")
    t = re.sub(r"(?<=[^\W\d_]|\))\s*/\s*(?=[^\W\d_])", " or ", t)
    t = re.sub(r"\s*/\s*", " over ", t)
    t = re.sub(r"(?:(?<=^)|(?<=[\s(\[]))-(?=\d)", " minus ", t)
    for mark, word in _SPELLED:
        t = t.replace(mark, f" {word} ")
    t = "".join(c for c in unicodedata.normalize("NFKD", t) if not unicodedata.combining(c))
    words = re.findall(r"[^\W_]+", t.lower())
    name = "test_" + ("_".join(words) or "claim")
    if not name.isidentifier():
        raise ScaffoldError(f"no test name can be made of {paraphrase!r}: give one with "
                            "--test-name")
    return name


# ----------------------------------------------------------------------------- writing
def entry_text(cid: str, source: str, paraphrase: str, kind: str, tier: str,
               fingerprint: str = "") -> str:
    fp = f'fingerprint = "{fingerprint}"\n' if fingerprint else ""
    return (f'[[claim]]\nid = "{cid}"\nsource = "{source}"\n{fp}'
            f'paraphrase = "{paraphrase}"\nkind = "{kind}"\ntier = "{tier}"\n'
            '# figures = [{ name = "...", stated = ..., tol = "printed" }]  (claims/README.md)\n')


def stub_text(cid: str, paraphrase: str, name: str) -> str:
    tag = cid.lower().replace("-", "_")
    return (f'@pytest.mark.claim("{cid}")\n'
            f"def {name}(claim):\n"
            f'    """{paraphrase}"""\n'
            "    # measure what the sentence says through the library itself; claim.check(NAME,\n"
            "    # value) for each figure of the entry, claim.record(...) for what the verdict\n"
            "    # rests on (claims/README.md)\n"
            f'    pytest.skip("{cid} {_SKIP_LINES[0]}"\n'
            f'                "{_SKIP_LINES[1]}")\n\n\n'
            f'@control("{cid}", what="{_WHAT_LINES[0]}"\n'
            f'                   "{_WHAT_LINES[1]}")\n'
            f"def {tag}_sentence_made_false(mp):\n"
            '    """Patch the library with mp.setattr so that the sentence no longer holds."""\n')


def _insert_entry(toml: Path, text: str, document: str, source: str) -> list[str]:
    """Write the entry into ``toml`` in sentence order, leaving every other byte as it was;
    the IDs it now comes before."""
    body = toml.read_text(encoding="utf-8")
    head, *blocks = re.split(r"(?m)^(?=\[\[claim\]\]\n)", body)
    line = first_line(source, document)
    ids = [re.search(r'(?m)^id = "([^"]+)"', b).group(1) for b in blocks]
    sources = [re.search(r'(?m)^source = "([^"]*)"', b).group(1) for b in blocks]
    at = next((i for i, s in enumerate(sources) if first_line(s, document) > line), len(blocks))
    blocks.insert(at, text + ("\n" if at < len(blocks) else ""))
    if at == len(blocks) - 1 and blocks[at - 1:at] and not blocks[at - 1].endswith("\n\n"):
        blocks[at - 1] = blocks[at - 1].rstrip("\n") + "\n\n"
    toml.write_text(head + "".join(blocks), encoding="utf-8")
    return ids[at:]


def _insert_stub(module: Path, stub: str, later: list[str], header: str) -> None:
    if not module.exists():
        module.write_text(f'"""{header}"""\nimport pytest\n\n'
                          "from support.rules.controls import control\n", encoding="utf-8")
    text = module.read_text(encoding="utf-8")
    lines = text.split("\n")
    tree = ast.parse(text)
    need = [imp for imp, present in (
        ("import pytest", re.search(r"(?m)^import pytest$", text)),
        ("from support.rules.controls import control",
         re.search(r"(?m)^from support\.harness\.controls import control$", text))) if not present]
    at = None
    for node in tree.body:
        ids = {a.value for d in getattr(node, "decorator_list", []) for s in ast.walk(d)
               if isinstance(s, ast.Call) and (getattr(s.func, "attr", "") == "claim"
                                               or getattr(s.func, "id", "") == "control")
               for a in s.args if isinstance(a, ast.Constant)}
        if ids and ids <= set(later):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            while first > 0 and lines[first - 1].startswith("#"):
                first -= 1
            at = first
            break
    if at is None:
        text = text.rstrip("\n") + "\n\n\n" + stub
    else:
        text = "\n".join(lines[:at]) + "\n" + stub + "\n\n" + "\n".join(lines[at:])
    if need:
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        end = imports[-1].end_lineno if imports else (tree.body[0].end_lineno if tree.body else 0)
        parts = text.split("\n")
        text = "\n".join(parts[:end] + need + parts[end:])
    module.write_text(text, encoding="utf-8")


def plan(section: str, source: str, paraphrase: str, cid: str | None = None,
         prefix: str | None = None, kind: str = "a", tier: str = "fast",
         claims: Path = CLAIMS, catalogue: Path = CATALOGUE) -> dict:
    """Everything :func:`write` needs, checked before anything is written: the section file,
    its document, the ID (given, or the next free one) and the source as it will be written
    (marked suite-added where the catalogue lacks the ID)."""
    registry = reg.load_entries(claims)
    if cid and prefix:
        raise ScaffoldError("give --id or --prefix, not both")
    if kind not in reg.KINDS or tier not in reg.TIERS:
        raise ScaffoldError(f"kind is one of {', '.join(reg.KINDS)}; tier one of "
                            f"{', '.join(reg.TIERS)}")
    toml = find_section(section, claims)
    head = reg.tomllib.loads(toml.read_text(encoding="utf-8"))
    document = head["document"]
    if not re.match(reg.PREFIX[document] + r":\d+", source):
        raise ScaffoldError(f"the source of a {document} claim is its line there "
                            f"({reg.PREFIX[document]}:123), not {source!r}")
    if '"' in paraphrase or "\\" in paraphrase:
        raise ScaffoldError("write the paraphrase without double quotes or backslashes")
    listed = catalogue_ids(catalogue)
    if cid:
        if not reg.ID_RE.match(cid):
            raise ScaffoldError(f"{cid!r} is not an ID of the form PREFIX-NN")
        if cid in registry:
            raise ScaffoldError(f"{cid} exists already, in {registry[cid].file}")
        # an ID given is the catalogue's, unless the catalogue beside the checkout lacks it
        added = listed is not None and cid not in listed
    else:
        # past every ID the registry and the catalogue hold: a sentence neither lists
        cid = next_id(prefix or section_prefix(toml), set(registry) | (listed or set()))
        added = True
    if added and SUITE_ADDED not in source:
        source = f"{source} ({SUITE_ADDED})"
    return {"id": cid, "toml": toml, "head": head, "document": document, "source": source,
            "suite_added": added, "paraphrase": paraphrase, "kind": kind, "tier": tier}


def write(planned: dict, fingerprint: str = "", name: str | None = None) -> tuple[Path, Path, str]:
    """Write the planned entry (with ``fingerprint``, where given) and its stub; return (the
    section's TOML file, its test module, the test's name)."""
    cid, toml, head = planned["id"], planned["toml"], planned["head"]
    module = toml.with_name(f"test_{toml.stem}.py")
    name = name or stub_name(planned["paraphrase"])
    if not name.startswith("test_") or not name.isidentifier():
        raise ScaffoldError(f"{name!r} is not a test's name (test_ and words joined by _)")
    if module.exists() and re.search(rf"(?m)^def {re.escape(name)}\(", module.read_text(
            encoding="utf-8")):
        name = f"{name}_{cid.lower().replace('-', '_')}"     # the paraphrase of another's
    text = entry_text(cid, planned["source"], planned["paraphrase"], planned["kind"],
                      planned["tier"], fingerprint)
    later = _insert_entry(toml, text, planned["document"], planned["source"])
    where = f'"{head["section"]}"' + (f', "{head["part"]}"' if head.get("part") else "")
    title = "Lecture" if planned["document"] == "lecture" else "Summary sheet"
    _insert_stub(module, stub_text(cid, planned["paraphrase"], name), later,
                 f"{title}, {where} ({head['lines']}).")
    reg.load_entries(toml.parent.parent)        # the files still load: the entry is well formed
    return toml, module, name
