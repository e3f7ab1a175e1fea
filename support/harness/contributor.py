"""The contributor's two commands: a new claim written in its place and pinned to its sentence,
and the checks one new or changed claim must pass, in seconds.

    python -m support new-claim SECTION --source L:90 --paraphrase "..." [--id ID | --prefix P]
    python -m support check-claim ID [ID ...]

``new-claim`` plans the entry (support/rules/scaffold.py: the section, the ID given or the next
free one, marked suite-added where the catalogue lacks it), reads the claim's sentence from the
notes (support/notes/pin.py: the files ``--notes`` names, else the copies beside the checkout)
and only then writes the entry, with that sentence's fingerprint, and the test stub; the other
entries stay as they were, byte for byte. Where no notes can be read it writes the entry
unpinned and says how to pin it.

``check-claim`` runs, for the claims named, what the harness's lints check of each claim
(support/tests), read from the sources without importing torch or JAX:

* **entry**: the section files load; a testable claim has a test that is not the stub, a
  pending one none, a not-testable one a reason; every figure of the entry is checked by a
  test and no test checks a figure it lacks; an accelerator claim says what it requires; the
  ID is the catalogue's or marked suite-added (where the catalogue is beside the checkout);
* **order**: its entry sits in the order of the sentences, its section file in the document's;
* **placement**: its tests live in its section's module (or the one its entry names);
* **fingerprint**: its entry holds one, and the notes (where readable) still hold that
  sentence on the lines its source names;
* **control**: a negative control names it and perturbs something (or its entry says why none
  can, or it is a known fails or drift), and a known fails or drift has a positive control (or
  says why none can).

Exit status 0 when every check passes (a check that cannot run here, the fingerprint without
the notes, is said with the reason), 1 when one fails, 2 for a usage error.
"""
from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass
from pathlib import Path

from support.paths import ROOT
from support.rules import registry as reg
from support.rules import scaffold, sources

CHECKS = ("entry", "order", "placement", "fingerprint", "control")


@dataclass(frozen=True)
class Finding:
    check: str          # one of CHECKS
    status: str         # "ok", "FAIL" or "skip" (cannot run here: the reason says why)
    text: str


# ----------------------------------------------------------------------------- controls
def known_red(cid: str, expectations) -> bool:
    """Whether the claim is a known fails or drift in every variant with the installed
    versions: nothing a negative control could turn red."""
    return any(e.id == cid and e.verdict in ("fails", "drift") and not e.variant and e.applies("")
               for e in expectations)


def negative_gaps(claim, controls, expectations) -> list[str]:
    """What the claim lacks of its negative control: one that names it and perturbs something,
    or its entry's ``control_reason``, or a known fails or drift everywhere (nothing to turn
    red). ``controls``: objects with ``name``, ``claims``, ``expect``, ``what`` (and ``empty``
    where read from the source: support.rules.sources.static_controls)."""
    mine = [c for c in controls if claim.id in c.claims]
    out = [f"control {c.name} perturbs nothing yet (new-claim's stub): patch the library "
           "so that the sentence is false" for c in mine if getattr(c, "empty", False)]
    out += [f"control {c.name}: say in words what it perturbs (what=...)" for c in mine
            if c.what == scaffold.STUB_WHAT or len(c.what.split()) < 4]
    if claim.kind in tuple("abcdefg") and not any(c.expect == "red" for c in mine) \
            and not claim.control_reason and not known_red(claim.id, expectations):
        out.append("no negative control names it (@control(ID, what=...) beside its test), and "
                   "its entry gives no control_reason")
    if claim.control_reason and len(claim.control_reason.split()) < 6:
        out.append("control_reason: say why in a sentence")
    return out


def positive_gaps(claim, controls, expectations) -> list[str]:
    """What a claim known to fail or drift with the installed versions lacks: a positive
    control (``expect="holds"``: a perturbation under which its sentence is true), or its
    entry's ``positive_reason`` in a sentence or two."""
    from support.rules.registry import version_mismatch
    known = any(e.id == claim.id and e.verdict in ("fails", "drift")
                and version_mismatch(e.versions) is None for e in expectations)
    if not known or any(c.expect == "holds" and claim.id in c.claims for c in controls):
        return []
    if not claim.positive_reason:
        return ["a known fails or drift with no positive control (expect=\"holds\") and no "
                "positive_reason"]
    if len(claim.positive_reason.split()) < 12:
        return ["positive_reason: say why in a sentence or two"]
    return []


# ----------------------------------------------------------------------------- the checks
def _functions(where: list[str], root: Path) -> list[ast.FunctionDef]:
    """The test functions ``'file::name'`` names, read from their modules."""
    out = []
    for path, names in _by_file(where).items():
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
        out += [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in names]
    return out


def _by_file(where: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for w in where:
        path, _, name = w.partition("::")
        out.setdefault(path, set()).add(name)
    return out


def _is_stub(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and scaffold.STUB_SKIP in n.value for n in ast.walk(fn))


def check_entry(claim, registry, markers, checks, expectations, listed, root) -> list[Finding]:
    cid, bad = claim.id, []
    tests = markers.get(cid, [])
    if claim.status == "testable" and not tests:
        bad.append("no test marks it (@pytest.mark.claim), and its entry is not status = "
                   "\"pending\"")
    elif claim.status != "testable" and tests:
        bad.append(f"status = {claim.status!r}, yet tests mark it: {tests}")
    if claim.status == "not-testable" and (len(claim.reason.split()) < 6
                                           or not claim.reason.rstrip().endswith((".", ")", '"'))):
        bad.append("a not-testable claim says why in a full sentence (reason)")
    stubs = [f.name for f in _functions(tests, root) if _is_stub(f)]
    bad += [f"{name} is still new-claim's stub (it skips): write its measurement" for name in stubs]
    unchecked, unknown = sources.figure_gaps(registry, checks, [cid])
    bad += [f"figure {u.split(': ', 1)[1]} of the entry: no test checks it (claim.check)"
            for u in unchecked]
    bad += unknown
    if claim.kind == "e" and claim.status == "testable" and not claim.requires:
        bad.append("an accelerator claim (kind e) says which variants it requires: "
                   "requires = [...]")
    if listed is not None and cid not in listed and scaffold.SUITE_ADDED not in claim.source:
        bad.append(f"the catalogue does not list {cid}: mark its source ({scaffold.SUITE_ADDED})")
    if bad:
        return [Finding("entry", "FAIL", b) for b in bad]
    said = [f"kind {claim.kind}, tier {claim.tier}",
            f"{len(tests)} test(s)" if tests else f"status {claim.status}"]
    said += [f"figures checked: {', '.join(claim.figures)}"] if claim.figures else []
    if listed is not None:
        said.append("the catalogue's ID" if cid in listed else "suite-added")
    out = [Finding("entry", "ok", "; ".join(said))]
    if listed is None:
        out.append(Finding("entry", "skip", "its ID is not compared with the catalogue, which is "
                           f"not beside the checkout ({scaffold.CATALOGUE.name}): the section "
                           "files are the list of claims"))
    return out


def check_order(claim, root) -> list[Finding]:
    path = root / claim.file
    bad = [b for b in [scaffold.entries_out_of_order(path)] if b]
    bad += scaffold.sections_out_of_order([p for p in reg.registry_files(root / "claims")
                                           if p.parent == path.parent])
    if bad:
        return [Finding("order", "FAIL", f"out of order: {b}") for b in bad]
    return [Finding("order", "ok", f"{claim.source} in the order of the sentences of "
                    f"{path.name}, a section file in the {claim.document}'s order")]


def check_placement(claim, registry, markers) -> list[Finding]:
    bad = scaffold.misplaced(registry, {claim.id: markers.get(claim.id, [])})
    if claim.module and not any(w.startswith(claim.module["path"] + "::")
                                for w in markers.get(claim.id, [])):
        bad.append(f"its entry names the module {claim.module['path']}, which holds none of "
                   "its tests")
    if bad:
        return [Finding("placement", "FAIL", b) for b in bad]
    where = sorted(_by_file(markers.get(claim.id, [])))
    return [Finding("placement", "ok", ", ".join(where) if where else "no tests to place")]


def check_fingerprint(claim, docs, why_no_notes: str) -> list[Finding]:
    from support.notes import locate
    if not claim.fingerprint:
        return [Finding("fingerprint", "FAIL", "its entry holds none: python -m support pin "
                        f"--claim {claim.id} --write")]
    if docs is None or claim.document not in docs:
        return [Finding("fingerprint", "skip", f"{claim.fingerprint} not located: "
                        + (why_no_notes or f"no file of the {claim.document} was given"))]
    loc = locate.locate(claim.id, claim.document, claim.source, claim.fingerprint,
                        docs[claim.document])
    where = Path(loc.file).name
    if loc.status == "found":
        return [Finding("fingerprint", "ok", f"its sentence is on line {loc.line} of {where}")]
    fix = {"moved": f"its sentence is now on line {loc.line}: correct its source",
           "changed": f"{loc.reason} (line {loc.line}): re-read the claim, then python -m "
                      f"support pin --claim {claim.id} --write",
           "missing": f"{loc.reason}: the notes dropped the sentence"}[loc.status]
    return [Finding("fingerprint", "FAIL", f"{loc.status} in {where}: {fix}")]


def check_control(claim, controls, expectations) -> list[Finding]:
    gaps = negative_gaps(claim, controls, expectations) + positive_gaps(claim, controls,
                                                                         expectations)
    if gaps:
        return [Finding("control", "FAIL", g) for g in gaps]
    mine = [f"{c.name} ({c.expect})" for c in controls if claim.id in c.claims]
    if mine:
        return [Finding("control", "ok", ", ".join(mine))]
    why = ("known fails or drift here" if known_red(claim.id, expectations)
           else "control_reason" if claim.control_reason else f"status {claim.status}")
    return [Finding("control", "ok", f"none needed: {why}")]


def check_claims(ids, docs=None, why_no_notes: str = "", root: Path = ROOT,
                 catalogue: Path = scaffold.CATALOGUE) -> dict[str, list[Finding]]:
    """{id: findings} for the claims ``ids`` of the checkout at ``root`` (RegistryError where
    the section files do not load; KeyError naming an ID they lack)."""
    from support.rules.expectations import load_expectations
    registry = reg.load_registry(root / "claims")
    missing = [cid for cid in ids if cid not in registry]
    if missing:
        raise KeyError(", ".join(missing))
    markers = sources.static_claim_markers(root)
    checks = sources.static_figure_checks(root)
    controls = sources.static_controls(root)
    expectations = load_expectations(root / "claims" / "expectations.toml", registry)
    listed = scaffold.catalogue_ids(catalogue)
    out = {}
    for cid in ids:
        c = registry[cid]
        out[cid] = (check_entry(c, registry, markers, checks, expectations, listed, root)
                    + check_order(c, root) + check_placement(c, registry, markers)
                    + check_fingerprint(c, docs, why_no_notes)
                    + check_control(c, controls, expectations))
    return out


# ----------------------------------------------------------------------------- the commands
def arguments(command: str, parser) -> None:
    notes = ("a notes file, plain text or Markdown (repeat; lecture=PATH names it); default: "
             "../shared/notes beside the checkout")
    if command == "check-claim":
        parser.add_argument("ids", nargs="+", metavar="ID", help="the claim(s) to check")
        parser.add_argument("--notes", action="append", metavar="PATH", help=notes)
        return
    parser.add_argument("section", help="the section: its file (08_pytorch_records_a_tape, "
                        "lecture/08, sheet/01_key_ideas_07) or its heading or part")
    parser.add_argument("--source", required=True, help="its line in the notes: L:123 or S:12")
    parser.add_argument("--paraphrase", required=True, help="the claim in one line")
    parser.add_argument("--id", default=None, help="an ID the catalogue lists (PREFIX-NN); "
                        "default: the next free ID of the section's prefix, marked suite-added")
    parser.add_argument("--prefix", default=None, help="the prefix of the ID to assign, where "
                        "not the one most of the section's claims have (TAPE, JIT, ...)")
    parser.add_argument("--kind", default="a", help="a exact API (default) ... h not testable "
                        "(claims/README.md)")
    parser.add_argument("--tier", default="fast", help="fast (default), slow, gpu or bench")
    parser.add_argument("--test-name", default=None, help="the test's name (default: test_ and "
                        "the paraphrase's words, its marks spelled out)")
    parser.add_argument("--notes", action="append", metavar="PATH", help=notes)


def _docs(paths, registry) -> tuple[dict | None, str]:
    from support.notes import locate, pin
    try:
        return locate.read_all(registry, pin.notes_given(paths)), ""
    except (ValueError, OSError) as exc:
        return None, str(exc)


def _new_claim(args) -> int:
    from support.notes import pin
    try:
        planned = scaffold.plan(args.section, args.source, args.paraphrase, args.id,
                                args.prefix, args.kind, args.tier)
    except (scaffold.ScaffoldError, reg.RegistryError) as exc:
        print(f"new-claim: {exc}")
        return 2
    cid = planned["id"]
    docs, why = _docs(args.notes, reg.load_registry())
    fp, said = "", f"not pinned: {why}; then python -m support pin --claim {cid} --write"
    if docs is not None:
        claim = reg.Claim(id=cid, document=planned["document"], section="",
                          source=planned["source"], paraphrase=planned["paraphrase"],
                          kind=planned["kind"], tier=planned["tier"])
        got = pin.sentence_of(claim, docs)
        if isinstance(got, str):
            print(f"new-claim: {planned['source']}: {got} (nothing written)")
            return 2
        fp, line, text = got
        said = f"line {line}: {text}\n               fingerprint {fp}"
    try:
        toml, module, name = scaffold.write(planned, fp, args.test_name)
    except (scaffold.ScaffoldError, reg.RegistryError) as exc:
        print(f"new-claim: {exc}")
        return 2
    how = "given" if args.id else f"the next free {cid.split('-')[0]} ID"
    if planned["suite_added"]:
        how += ", marked suite-added: a sentence the catalogue does not list"
    print(f"{cid} ({how})\n"
          f"  entry        {toml.relative_to(ROOT)}\n"
          f"  sentence     {said}\n"
          f"  test stub    {module.relative_to(ROOT)}::{name}, and its control "
          f"{cid.lower().replace('-', '_')}_sentence_made_false\n"
          "next: write the entry's figures, the test's measurement and the control "
          "(claims/README.md), then\n"
          f"  python -m support check-claim {cid}\n"
          f"  python -m pytest --claim {cid}\n"
          f"  python -m support controls --claim {cid}")
    return 0


def _check_claim(args) -> int:
    start = time.perf_counter()
    try:
        registry = reg.load_registry()
    except reg.RegistryError as exc:
        print(f"entry  FAIL  {exc}")
        return 1
    docs, why = _docs(args.notes, registry)
    try:
        found = check_claims(args.ids, docs, why)
    except KeyError as exc:
        print(f"check-claim: no claim {exc.args[0]} in the section files")
        return 2
    failed = 0
    for cid, findings in found.items():
        c = registry[cid]
        print(f"{cid}  {c.file}, {c.source}")
        for f in findings:
            print(f"  {f.check:<12} {f.status:<5} {f.text}")
        bad = sum(f.status == "FAIL" for f in findings)
        failed += bad > 0
        print(f"  -> {'FAILS: ' + str(bad) + ' to fix' if bad else 'passes'}")
    print(f"{len(found) - failed} of {len(found)} claim(s) pass ({', '.join(CHECKS)}) in "
          f"{time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


def run(command: str, args) -> int:
    return _check_claim(args) if command == "check-claim" else _new_claim(args)
