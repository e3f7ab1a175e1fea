"""The checks one new or changed claim must pass, in seconds: what ``python -m support
check-claim ID`` runs (support/commands/check_claim.py), read from the sources without
importing torch or JAX:

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
  says why none can): :func:`support.rules.control_summary.negative_gaps` and
  :func:`~support.rules.control_summary.positive_gaps`, which the harness's lints apply to
  every claim.

A check that cannot run here (the fingerprint without the notes) says so with the reason.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from support.notes import locate, pin
from support.paths import ROOT
from support.rules import entries as reg
from support.rules import scaffold, sources
from support.rules.control_summary import known_red, negative_gaps, positive_gaps
from support.rules.expectations import load_expectations

CHECKS = ("entry", "order", "placement", "fingerprint", "control")


@dataclass(frozen=True)
class Finding:
    check: str          # one of CHECKS
    status: str         # "ok", "FAIL" or "skip" (cannot run here: the reason says why)
    text: str


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
    bad += scaffold.sections_out_of_order([p for p in reg.section_files(root / "claims")
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
    """{id: findings} for the claims ``ids`` of the checkout at ``root`` (EntryError where
    the section files do not load; KeyError naming an ID they lack)."""
    registry = reg.load_entries(root / "claims")
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


def notes_docs(paths, registry) -> tuple[dict | None, str]:
    """The notes ``paths`` name (else the copies beside the checkout), read for the claims of
    ``registry``; or (None, why they cannot be read)."""
    try:
        return locate.read_all(registry, pin.notes_given(paths)), ""
    except (ValueError, OSError) as exc:
        return None, str(exc)
