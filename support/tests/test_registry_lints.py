"""Lints of the claim registry, the markers and the expectations file (fast, ordinary tests).

The markers are found statically (AST), so the lints see every claim test whatever subset
of the suite this run collected.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.spec import registry as reg
from support.spec import sources
from support.spec.expectations import load_expectations, uncorrected

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT.parent / "shared" / "reference" / "claims-catalogue.md"


@pytest.fixture(scope="module")
def registry():
    return reg.load_registry()


@pytest.fixture(scope="module")
def markers():
    return sources.static_claim_markers()


def test_registry_has_one_entry_per_catalogue_id(registry):
    if CATALOGUE.exists():
        ids = set(re.findall(r"^\| ([A-Z]+-\d\d) \|", CATALOGUE.read_text(), re.M))
        assert len(ids) == 313
        missing = ids - set(registry)
        assert not missing, f"catalogue IDs missing from the registry: {sorted(missing)}"
        extra = {i for i in set(registry) - ids if "suite-added" not in registry[i].source}
        assert not extra, f"registry IDs not in the catalogue (mark them suite-added): {sorted(extra)}"
    else:
        assert len(registry) >= 313


def test_ids_are_well_formed_and_filed_by_prefix(registry):
    for cid, c in registry.items():
        assert reg.ID_RE.match(cid)
        assert c.kind in reg.KINDS and c.tier in reg.TIERS and c.document in reg.DOCUMENTS


def test_every_marker_names_a_registry_id(registry, markers):
    unknown = {cid: where for cid, where in markers.items() if cid not in registry}
    assert not unknown, f"markers naming IDs absent from the registry: {unknown}"


def test_every_testable_claim_has_a_test_or_is_pending(registry, markers):
    gaps = [cid for cid, c in registry.items()
            if c.status == "testable" and cid not in markers]
    assert not gaps, f"testable claims with no test and no status 'pending': {gaps}"


def test_no_claim_is_both_tested_and_pending(registry, markers):
    stale = [cid for cid, c in registry.items() if c.status == "pending" and cid in markers]
    assert not stale, f"claims marked pending that have tests (remove the status): {stale}"


def test_not_testable_claims_have_no_tests_and_a_reason(registry, markers):
    for cid, c in registry.items():
        if c.status == "not-testable":
            assert c.reason and cid not in markers, cid
            # a whole sentence, never one cut off mid-way
            assert len(c.reason.split()) >= 6 and c.reason.rstrip().endswith((".", ")", '"')), \
                f"{cid}: not a full-sentence reason: {c.reason!r}"


def test_expectations_name_registry_claims_and_give_reasons(registry):
    exps = load_expectations(registry=registry)
    for e in exps:
        assert e.id in registry and e.reason


@pytest.mark.parametrize("field,value,message", [
    ("kind", '"z"', "unknown kind"),
    ("tier", '"nightly"', "unknown tier"),
    ("id", '"tape-7"', "malformed id"),
    ("applies", '{ devices = ["cuda"] }', "unknown applies field"),
    ("requires", '["tpu"]', "unknown requirement"),
    ("applies", '{ versions = { torch = "~~2" } }', "bad version specifier"),
    ("colour", '"red"', "unknown field"),
    # a reference (not printed in the notes) never decides, so a drift tolerance is refused
    ("figures", '[{ name = "t", stated = 5, tol = { at_most = true }, why = "w", reference = true }]',
     "a reference figure .* takes no tol"),
    ("figures", '[{ name = "t", bound = "< 60", reference = true }]', "needs the reference value"),
])
def test_a_bad_registry_entry_is_refused(tmp_path, field, value, message):
    entry = {"id": '"AB-01"', "document": '"lecture"', "section": '"S"', "source": '"L:1"',
             "paraphrase": '"p"', "stated": '""', "kind": '"a"', "tier": '"fast"'}
    entry[field] = value
    (tmp_path / "AB.toml").write_text("[[claim]]\n" + "\n".join(f"{k} = {v}" for k, v in entry.items()))
    with pytest.raises(reg.RegistryError, match=message):
        reg.load_registry(tmp_path)


def test_a_duplicate_id_is_refused(tmp_path):
    one = ('[[claim]]\nid = "AB-01"\ndocument = "lecture"\nsection = "S"\nsource = "L:1"\n'
           'paraphrase = "p"\nstated = ""\nkind = "a"\ntier = "fast"\n')
    (tmp_path / "AB.toml").write_text(one + "\n" + one)
    with pytest.raises(reg.RegistryError, match="duplicate id"):
        reg.load_registry(tmp_path)


# --------------------------------------------------------------------------- stated figures
@pytest.fixture(scope="module")
def figure_checks():
    return sources.static_figure_checks()


def test_every_figure_the_registry_states_is_checked_by_a_test(registry, figure_checks):
    unchecked = []
    for cid, c in registry.items():
        pats = [p for p, _ in figure_checks.get(cid, []) if p != "<computed>"]
        for name in c.figures:
            if not any(re.fullmatch(p, name) for p in pats):
                unchecked.append(f"{cid}: {name!r}")
    assert not unchecked, "registry figures no test checks (claim.check):\n  " + "\n  ".join(unchecked)


def test_no_test_checks_a_figure_the_registry_lacks(registry, figure_checks):
    unknown = []
    for cid, uses in figure_checks.items():
        if cid not in registry:
            continue
        for pat, where in uses:
            if pat == "<computed>":
                unknown.append(f"{where}: a figure name computed at run time (use a literal "
                               "or an f-string)")
            elif not any(re.fullmatch(pat, n) for n in registry[cid].figures) and \
                    not _checked_for_another_claim(pat, where, registry, figure_checks, cid):
                unknown.append(f"{where}: {cid} has no figure matching {pat!r}")
    assert not unknown, "\n  ".join(["tests checking figures the registry lacks:"] + unknown)


def _checked_for_another_claim(pat, where, registry, figure_checks, cid):
    """A module helper's name counts for every claim of its module: fine if one has it."""
    return any(re.fullmatch(pat, n) for other, uses in figure_checks.items()
               if other != cid and other in registry and (pat, where) in uses
               for n in registry[other].figures)


def test_no_test_states_a_figure_itself():
    """Figures live in the registry: no claim.record(..., stated=...) under claims/."""
    import ast
    bad = []
    for path in sorted((ROOT / "claims").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and any(k.arg in ("stated", "tol") for k in node.keywords) \
                    and getattr(node.func, "attr", "") in ("record", "check"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"figures stated in tests, not in the registry: {bad}"


def test_no_catch_all_except_in_claim_tests():
    """A claim test catches the exception type the sentence is about, never everything."""
    import ast
    bad = []
    for path in sorted((ROOT / "claims").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler):
                names = [n for n in ast.walk(node.type)] if node.type is not None else []
                if node.type is None or any(isinstance(n, ast.Name) and n.id in
                                            ("Exception", "BaseException") for n in names):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"catch-all except clauses under claims/: {bad}"


def test_every_accelerator_claim_says_which_variants_it_requires(registry):
    missing = [cid for cid, c in registry.items() if c.kind == "e" and c.status == "testable"
               and not c.requires]
    assert not missing, f"kind e claims without requires = [...]: {missing}"


def test_expectations_name_the_failure_they_expect(registry):
    for e in load_expectations(registry=registry):
        if e.verdict == "drift":
            assert e.measurements and all(m in registry[e.id].figures for m in e.measurements)
        else:
            assert e.match or e.measurements, e.label()


def test_every_known_fails_and_drift_suggests_a_correction(registry):
    """One correction per sentence, written beside its known verdict: every claim with a
    known fails or drift has an erratum, and the figures it shows are the claim's (stated in
    the registry, or recorded by one of its tests)."""
    exps = load_expectations(registry=registry)
    assert not uncorrected(exps), "\n".join(uncorrected(exps))
    recorded = sources.static_recorded_names()
    for e in exps:
        for name in e.erratum.show if e.erratum else ():
            assert name in registry[e.id].figures or any(
                re.fullmatch(p, name) for p, _ in recorded.get(e.id, [])), (e.label(), name)


_FAILS = ('[[expect]]\nid = "TAPE-07"\nverdict = "fails"\nmatch = "x"\nreason = "r"\n')


@pytest.mark.parametrize("erratum,message", [
    ('erratum = { quote = "a", correction = "b" }', "the erratum needs finding"),
    ('erratum = { quote = "a", correction = " a ", finding = "f" }', "repeats its quote"),
    ('erratum = { quote = "a", correction = "b", finding = "f", fix = "c" }',
     "unknown erratum field"),
    ('erratum = { quote = "a", correction = "b", finding = "' + "word " * 80 + '" }',
     "say it in a sentence or two"),
    ('erratum = "a -> b"', "erratum must be a table"),
])
def test_an_expectation_without_a_good_correction_is_refused(registry, tmp_path, erratum,
                                                             message):
    (tmp_path / "e.toml").write_text(_FAILS + erratum + "\n")
    with pytest.raises(reg.RegistryError, match=message):
        load_expectations(tmp_path / "e.toml", registry)


def test_a_correction_is_shared_by_the_entries_of_one_claim_and_only_for_fails_or_drift(
        registry, tmp_path):
    (tmp_path / "e.toml").write_text(_FAILS + _FAILS.replace('"x"', '"y"'))
    missing = uncorrected(load_expectations(tmp_path / "e.toml", registry))
    assert len(missing) == 2 and "suggests the correction of its sentence" in missing[0]
    ok = 'erratum = { quote = "a", correction = "b", finding = "f" }\n'
    (tmp_path / "e.toml").write_text(_FAILS + ok + _FAILS.replace('"x"', '"y"'))
    assert uncorrected(load_expectations(tmp_path / "e.toml", registry)) == []
    (tmp_path / "e.toml").write_text(_FAILS.replace('"fails"', '"error"') + ok)
    with pytest.raises(reg.RegistryError, match="only a known fails or drift suggests"):
        load_expectations(tmp_path / "e.toml", registry)


def test_the_readme_verdict_table_is_the_vocabulary():
    """The README defines each verdict in the words of support/spec/verdicts.py, in its order."""
    from support.spec import verdicts
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| ([a-z-]+) \| (.+) \|$", text, re.M)
    table = [(v, m) for v, m in rows if v in verdicts.VERDICTS]
    assert table == list(verdicts.MEANING.items())


def test_the_one_command_line_lists_and_runs_every_command(capsys):
    """python -m support: every command's module provides arguments() and run()."""
    import importlib
    from support import cli
    assert cli.main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name, (module, _) in cli.COMMANDS.items():
        assert name in listed
        mod = importlib.import_module(module)
        assert callable(mod.arguments) and callable(mod.run), module
    assert cli.main(["no-such-command"]) == 2


def test_the_readme_lists_every_command():
    from support import cli
    text = (ROOT / "README.md").read_text()
    for name, (_, what) in cli.COMMANDS.items():
        assert f"| `{name}` | {what} |" in text, name


def test_every_measurement_a_figure_draws_is_recorded_by_a_test():
    """support/reports/figures.py declares what it draws (DRAWN); a measurement renamed in a test
    would otherwise turn its panel into "not measured" without anyone noticing."""
    import fnmatch
    from support.reports.figure_data import DRAWN
    recorded = sources.static_recorded_names()

    def meet(pattern: str, glob: str) -> bool:
        # a family "step_sizes_*" is recorded by f"step_sizes_{name}_steep" (the pattern
        # "step_sizes_.+_steep"): some name fits both
        example = re.sub(r"\\(.)", r"\1", pattern.replace(".+", "X"))
        return bool(re.fullmatch(pattern, glob.replace("*", "X"))) or \
            fnmatch.fnmatchcase(example, glob)

    missing = [f"{cid}: {glob!r}" for cid, globs in DRAWN.items() for glob in globs
               if not any(meet(p, glob) for p, _ in recorded.get(cid, []) if p != "<computed>")]
    assert not missing, "figures draw measurements no test records:\n  " + "\n  ".join(missing)


def test_every_command_module_imports_without_the_optional_extras():
    """The test extra alone (no matplotlib, keras, onnx): every command's module imports,
    the figures' DRAWN table too, and a command that needs an extra says which."""
    import subprocess
    import sys
    code = """
import sys
for m in ("matplotlib", "keras", "onnx", "onnxruntime", "pandas", "flax", "latex2mathml"):
    sys.modules[m] = None
import importlib
from support import cli
for module, _ in cli.COMMANDS.values():
    importlib.import_module(module)
from support.reports.figure_data import DRAWN
assert cli.main(["figures", "no-such-report.json"]) == 2
from support.notes import tex
assert "latex2mathml is not installed" in tex.missing() and "<math" not in tex.render("\\(x\\)")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
    assert "needs matplotlib" in out.stderr


def test_every_control_names_registry_claims_and_says_what_it_perturbs(registry):
    """Negative controls (support/harness/controls.py): importing every claim module
    registers them (two of one name refuse to load); each names claims of the registry and
    a perturbation in words, and a claim the registry excuses from controls says why."""
    from support.harness import controls
    found = controls.discover()
    assert found, "no negative control found under claims/"
    for c in found.values():
        assert set(c.claims) <= set(registry), f"{c.name}: unknown claims {c.claims}"
        assert len(c.what.split()) >= 4, f"{c.name}: say in words what it perturbs"
        assert c.scope in controls.SCOPES
    for cid, claim in registry.items():
        if claim.control_reason:
            assert len(claim.control_reason.split()) >= 6, cid


def test_every_testable_claim_has_a_control_or_says_why_not(registry):
    """Issue "every claim proves it can fail": a claim the suite tests (kinds a to g) names
    a negative control, or its registry entry says why none is possible (``control_reason``),
    or it is a known fails or drift in every variant with the installed versions (nothing
    to turn red here)."""
    from support.harness import controls
    from support.spec.expectations import load_expectations
    covered = {cid for c in controls.discover().values() for cid in c.claims}
    known = {e.id for e in load_expectations(registry=registry)
             if e.verdict in ("fails", "drift") and not e.variant and e.applies("")}
    missing = sorted(cid for cid, claim in registry.items()
                     if claim.kind in tuple("abcdefg") and cid not in covered | known
                     and not claim.control_reason)
    assert not missing, f"{len(missing)} claims with no control and no control_reason: {missing}"
