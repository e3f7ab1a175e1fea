"""The tree of claims/ is the notes' table of contents.

One folder per document; one pair of files per section, numbered in the document's order:
``claims/lecture/08_pytorch_records_a_tape.toml`` (the section's claims, in the order of their
sentences) beside ``claims/lecture/test_08_pytorch_records_a_tape.py`` (their tests). The
sheet's "Key ideas" is one such pair per bullet, numbered within it
(``01_key_ideas_07_modes``). A claim's tests live in its section's module, or in the one
module its entry names with the reason (``module``). The rules of place are
support/rules/scaffold.py's, which ``python -m support check-claim`` applies to one claim.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import CLAIMS, ROOT
from support.rules import entries as reg
from support.rules import sources
from support.rules.scaffold import entries_out_of_order, misplaced, sections_out_of_order


@pytest.fixture(scope="module")
def registry():
    return reg.load_entries()


def test_the_section_files_follow_the_documents_order():
    files = reg.section_files()
    assert len(files) >= 32
    assert not sections_out_of_order(files)


def test_the_order_lint_sees_a_section_out_of_place(tmp_path):
    for stem, lines in (("01_a", "L:50-60"), ("02_b", "L:10-20")):
        (tmp_path / f"{stem}.toml").write_text(f'document = "lecture"\nlines = "{lines}"\n')
    assert sections_out_of_order(sorted(tmp_path.glob("*.toml")))


def test_every_section_file_pairs_with_its_test_module_and_nothing_else_lives_there(registry):
    tomls = {p.with_name(f"test_{p.stem}.py") for p in reg.section_files()}
    modules = {p for doc in reg.DOCUMENTS for p in (CLAIMS / doc).rglob("test_*.py")}
    assert not modules - tomls, f"test modules with no section file: {sorted(modules - tomls)}"
    tested = {Path(ROOT / c.test_module) for c in registry.values() if c.status == "testable"}
    assert not tested - modules, f"sections with claims to test and no module: {tested - modules}"
    others = [p for doc in reg.DOCUMENTS for p in (CLAIMS / doc).rglob("*")
              if p.is_file() and p.suffix in (".py", ".toml") and p not in modules
              and p.name != "__init__.py" and not reg.SECTION_FILE.match(p.stem)]
    assert not others, f"files that are not a section's pair: {others}"


def test_each_files_claims_sit_in_the_order_of_their_sentences():
    bad = [b for b in map(entries_out_of_order, reg.section_files()) if b]
    assert not bad, "claims out of the order of their sentences:\n  " + "\n  ".join(bad)


def test_the_entry_order_lint_sees_an_entry_out_of_place(tmp_path):
    (tmp_path / "01_s.toml").write_text('document = "lecture"\n[[claim]]\nid = "AB-01"\n'
                                        'source = "L:9"\n[[claim]]\nid = "AB-02"\n'
                                        'source = "L:4"\n')
    assert "['AB-01', 'AB-02'] at [9, 4]" in entries_out_of_order(tmp_path / "01_s.toml")


def test_every_claim_is_tested_in_its_sections_module(registry):
    markers = sources.static_claim_markers()
    bad = misplaced(registry, markers)
    assert not bad, "\n  ".join(["claim tests outside their section's module:"] + bad)
    # the module an entry names holds a test of it: the exception is still needed
    stale = [cid for cid, c in registry.items() if c.module
             and not any(w.startswith(c.module["path"] + "::") for w in markers.get(cid, []))]
    assert not stale, f"entries naming a module that holds none of their tests: {stale}"


def test_the_placement_lint_sees_a_test_in_another_section(registry):
    markers = {"TAPE-07": ["claims/lecture/test_13_tensors_shapes_and_dtypes.py::test_x"]}
    assert misplaced(registry, markers) and not misplaced(
        registry, {"TAPE-07": [registry["TAPE-07"].test_module + "::test_x"]})
