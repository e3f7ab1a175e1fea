"""``python -m support new-claim SECTION --id ... --source ... --paraphrase ...``: a new claim's
entry and its test stub, each in its section's file, in the order of the sentences.

The section is named by its file (``08_pytorch_records_a_tape``, ``lecture/08``,
``sheet/01_key_ideas_07``) or by its heading or part (``"PyTorch records a tape"``,
``Modes``). The entry goes into the section's TOML file before the first claim whose
sentence comes later in the notes; the stub (a test that skips, saying it is a stub, and a
negative control to fill in) goes into the section's test module before that claim's tests.
The contributor's guide (claims/README.md) says what to write in them.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from support.paths import CLAIMS
from support.rules import registry as reg


class ScaffoldError(ValueError):
    pass


def first_line(source: str, document: str) -> int:
    """The first line of ``document`` a catalogue reference names ("L:43-47; S:5" -> 43 in
    the lecture); one that names none sorts last."""
    m = re.search(reg.PREFIX[document] + r":(\d+)", source)
    return int(m.group(1)) if m else 10 ** 9


def find_section(name: str, claims: Path = CLAIMS) -> Path:
    """The section file that ``name`` names: its heading or part, or its file's name or the
    start of it (``08``, ``lecture/08``, ``01_key_ideas_07``)."""
    files = reg.registry_files(claims)
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


def _slug(text: str, words: int = 9) -> str:
    ws = re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))
    return "_".join(ws[:words]) or "claim"


def entry_text(cid: str, source: str, paraphrase: str, kind: str, tier: str) -> str:
    return (f'[[claim]]\nid = "{cid}"\nsource = "{source}"\n'
            f'paraphrase = "{paraphrase}"\nkind = "{kind}"\ntier = "{tier}"\n'
            '# figures = [{ name = "...", stated = ..., tol = "printed" }]  (claims/README.md)\n')


def stub_text(cid: str, paraphrase: str) -> str:
    fn = _slug(paraphrase)
    tag = cid.lower().replace("-", "_")
    return (f'@pytest.mark.claim("{cid}")\n'
            f"def test_{fn}(claim):\n"
            f'    """{paraphrase}"""\n'
            "    # measure what the sentence says through the library itself; claim.check(NAME,\n"
            "    # value) for each figure of the entry, claim.record(...) for what the verdict\n"
            "    # rests on (claims/README.md)\n"
            f'    pytest.skip("{cid} is a stub (python -m support new-claim): "\n'
            '                "its measurement is not written yet")\n\n\n'
            f'@control("{cid}", what="a perturbation of the library under which the "\n'
            '                        "sentence is false (to write)")\n'
            f"def {tag}_sentence_made_false(mp):\n"
            '    """Patch the library with mp.setattr so that the sentence no longer holds."""\n')


def _insert_entry(toml: Path, cid: str, text: str, document: str, source: str) -> list[str]:
    """Write the entry into ``toml`` in sentence order; the IDs it now comes before."""
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
                          "from support.harness.controls import control\n", encoding="utf-8")
    text = module.read_text(encoding="utf-8")
    lines = text.split("\n")
    tree = ast.parse(text)
    need = [imp for imp, present in (
        ("import pytest", re.search(r"(?m)^import pytest$", text)),
        ("from support.harness.controls import control",
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


def new_claim(section: str, cid: str, source: str, paraphrase: str, kind: str = "a",
              tier: str = "fast", claims: Path = CLAIMS) -> tuple[Path, Path]:
    """Write the entry and the stub; return (the section's TOML file, its test module)."""
    registry = reg.load_registry(claims)
    if not reg.ID_RE.match(cid):
        raise ScaffoldError(f"{cid!r} is not an ID of the form PREFIX-NN")
    if cid in registry:
        raise ScaffoldError(f"{cid} exists already, in {registry[cid].file}")
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
    later = _insert_entry(toml, cid, entry_text(cid, source, paraphrase, kind, tier),
                          document, source)
    module = toml.with_name(f"test_{toml.stem}.py")
    where = f'"{head["section"]}"' + (f', "{head["part"]}"' if head.get("part") else "")
    title = "Lecture" if document == "lecture" else "Summary sheet"
    _insert_stub(module, stub_text(cid, paraphrase), later, f"{title}, {where} ({head['lines']}).")
    reg.load_registry(claims)        # the files still load: the entry is well formed
    return toml, module


def arguments(command: str, parser) -> None:
    parser.add_argument("section", help="the section: its file (08_pytorch_records_a_tape, "
                        "lecture/08, sheet/01_key_ideas_07) or its heading or part")
    parser.add_argument("--id", required=True, help="the catalogue ID, PREFIX-NN")
    parser.add_argument("--source", required=True, help="its line in the notes: L:123 or S:12")
    parser.add_argument("--paraphrase", required=True, help="the claim in one line")
    parser.add_argument("--kind", default="a", help="a exact API (default) ... h not testable "
                        "(claims/README.md)")
    parser.add_argument("--tier", default="fast", help="fast (default), slow, gpu or bench")


def run(command: str, args) -> int:
    try:
        toml, module = new_claim(args.section, args.id, args.source, args.paraphrase,
                                 args.kind, args.tier)
    except (ScaffoldError, reg.RegistryError) as exc:
        print(f"new-claim: {exc}")
        return 2
    print(f"{args.id}: entry in {toml.relative_to(CLAIMS.parent)}, test stub and control "
          f"stub in {module.relative_to(CLAIMS.parent)}; python -m pytest --claim {args.id}")
    return 0
