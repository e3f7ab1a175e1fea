"""Lints of the claim registry, the markers and the expectations file (fast, ordinary tests).

The markers are found statically (AST), so the lints see every claim test whatever subset
of the suite this run collected.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from support.rules import entries as reg
from support.rules import sources
from support.rules.expectations import load_expectations, uncorrected
from support.rules.scaffold import CATALOGUE, SUITE_ADDED, catalogue_ids

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry():
    return reg.load_entries()


@pytest.fixture(scope="module")
def markers():
    return sources.static_claim_markers()


def test_registry_has_one_entry_per_catalogue_id(registry):
    """The section files are the list of claims; the catalogue they began from is compared
    with them where it is beside the checkout (CI keeps it there): every ID it lists has an
    entry, and an entry it does not list is marked suite-added (new-claim marks the IDs it
    assigns)."""
    ids = catalogue_ids()
    if ids is None:
        pytest.skip(f"needs the catalogue, which is not beside the checkout ({CATALOGUE}): "
                    "nothing to compare the section files with")
    assert len(ids) == 313
    missing = ids - set(registry)
    assert not missing, f"catalogue IDs no claim entry has: {sorted(missing)}"
    extra = {i for i in set(registry) - ids if SUITE_ADDED not in registry[i].source}
    assert not extra, f"registry IDs not in the catalogue (mark them suite-added): {sorted(extra)}"


def test_ids_are_well_formed_and_filed_by_section(registry):
    for cid, c in registry.items():
        assert reg.ID_RE.match(cid)
        assert c.kind in reg.KINDS and c.tier in reg.TIERS and c.document in reg.DOCUMENTS
        assert c.file.startswith(f"claims/{c.document}/"), (cid, c.file)


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


HEADER = 'document = "lecture"\nsection = "S"\nlines = "L:1-2"\n\n'


def _section(tmp_path, text: str, name: str = "01_s.toml", doc: str = "lecture"):
    (tmp_path / doc).mkdir(parents=True, exist_ok=True)
    (tmp_path / doc / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("field,value,message", [
    ("kind", '"z"', "unknown kind"),
    ("tier", '"nightly"', "unknown tier"),
    ("id", '"tape-7"', "malformed id"),
    ("applies", '{ devices = ["cuda"] }', "unknown applies field"),
    ("requires", '["tpu"]', "unknown requirement"),
    ("machine", '["the weather"]', "unknown machine fact 'the weather'"),
    ("applies", '{ versions = { torch = "~~2" } }', "bad version specifier"),
    ("colour", '"red"', "unknown field"),
    # a reference (not printed in the notes) never decides, so a drift tolerance is refused
    ("figures", '[{ name = "t", stated = 5, tol = { at_most = true }, why = "w", reference = true }]',
     "a reference figure .* takes no tol"),
    ("figures", '[{ name = "t", bound = "< 60", reference = true }]', "needs the reference value"),
    # fails_outside says a printed figure is the sentence itself: a reference is not printed
    ("figures", '[{ name = "t", stated = 3, reference = true, fails_outside = true }]',
     "fails_outside = true needs a stated figure"),
    ("figures", '[{ name = "t", bound = "> 1", fails_outside = true }]',
     "fails_outside = true needs a stated figure"),
])
def test_a_bad_registry_entry_is_refused(tmp_path, field, value, message):
    entry = {"id": '"AB-01"', "source": '"L:1"', "paraphrase": '"p"', "kind": '"a"',
             "tier": '"fast"'}
    entry[field] = value
    _section(tmp_path, HEADER + "[[claim]]\n" + "\n".join(f"{k} = {v}" for k, v in entry.items()))
    with pytest.raises(reg.EntryError, match=message):
        reg.load_entries(tmp_path)


_ONE = '[[claim]]\nid = "AB-01"\nsource = "L:1"\nparaphrase = "p"\nkind = "a"\ntier = "fast"\n'


def test_a_duplicate_id_is_refused(tmp_path):
    _section(tmp_path, HEADER + _ONE)
    _section(tmp_path, HEADER + _ONE, "02_t.toml")
    with pytest.raises(reg.EntryError, match="duplicate id"):
        reg.load_entries(tmp_path)


@pytest.mark.parametrize("text,message", [
    # the header is written once, never per claim
    (HEADER + _ONE.replace('kind = "a"', 'kind = "a"\nsection = "S"'), "the file's header holds"),
    ('section = "S"\nlines = "L:1"\n' + _ONE, "the header needs document"),
    (HEADER.replace('"lecture"', '"sheet"') + _ONE, "lies under lecture/"),
    (HEADER + 'claim = []\n', "no \\[\\[claim\\]\\] entries"),
    # the words the notes print, beside figures that hold them: two copies of one fact
    (HEADER + _ONE + 'notes_words = "7"\nfigures = [{ name = "n", stated = 7, tol = "exact" }]\n',
     "each figure holds what the notes print"),
    (HEADER + _ONE + 'module = { path = "claims/lecture/test_x.py" }\n', "and why"),
    (HEADER + _ONE + 'module = { path = "claims/nowhere.py", why = "w" }\n', "does not exist"),
    (HEADER + _ONE + 'meaning = "holds when r is {bound:r}"\n', "has no figure 'r'"),
    (HEADER + _ONE + 'meaning = "{bound:n}"\nfigures = [{ name = "n", stated = 7 }]\n',
     "the figure has no bound"),
])
def test_a_bad_section_file_is_refused(tmp_path, text, message):
    _section(tmp_path, text)
    with pytest.raises(reg.EntryError, match=message):
        reg.load_entries(tmp_path)


def test_a_meaning_reads_its_thresholds_from_the_figures(tmp_path):
    _section(tmp_path, HEADER + _ONE + 'meaning = "holds when r is {bound:r}, drift outside '
             '{band:r} of {stated:r}; +- {reach:mpa:mean of 5}"\nfigures = [{ name = "r", '
             'stated = 2.0, tol = "timing:ratio", bound = ["> 1", "< 6"] }]\n')
    c = reg.load_entries(tmp_path)["AB-01"]
    assert c.reading == "holds when r is > 1 and < 6, drift outside [1, 4] of 2.0; +- +- 0.11"


# --------------------------------------------------------------------------- stated figures
@pytest.fixture(scope="module")
def figure_checks():
    return sources.static_figure_checks()


def test_every_figure_the_registry_states_is_checked_by_a_test(registry, figure_checks):
    unchecked, _ = sources.figure_gaps(registry, figure_checks)
    assert not unchecked, "registry figures no test checks (claim.check):\n  " + "\n  ".join(
        unchecked)


def test_no_test_checks_a_figure_the_registry_lacks(registry, figure_checks):
    _, unknown = sources.figure_gaps(registry, figure_checks)
    assert not unknown, "\n  ".join(["tests checking figures the registry lacks:"] + unknown)


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
        assert e.measurements and all(m in registry[e.id].figures for m in e.measurements), \
            e.label()


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


_FAILS = ('[[expect]]\nid = "TAPE-07"\nverdict = "fails"\nmeasurement = "ratio"\nreason = "r"\n')


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
    with pytest.raises(reg.EntryError, match=message):
        load_expectations(tmp_path / "e.toml", registry)


def test_a_correction_is_shared_by_the_entries_of_one_claim_and_only_for_fails_or_drift(
        registry, tmp_path):
    (tmp_path / "e.toml").write_text(_FAILS + _FAILS.replace('"fails"', '"drift"'))
    missing = uncorrected(load_expectations(tmp_path / "e.toml", registry))
    assert len(missing) == 2 and "suggests the correction of its sentence" in missing[0]
    ok = 'erratum = { quote = "a", correction = "b", finding = "f" }\n'
    (tmp_path / "e.toml").write_text(_FAILS + ok + _FAILS.replace('"fails"', '"drift"'))
    assert uncorrected(load_expectations(tmp_path / "e.toml", registry)) == []
    (tmp_path / "e.toml").write_text(_FAILS.replace('"fails"', '"error"') + ok)
    with pytest.raises(reg.EntryError, match="verdict must be one of fails, drift"):
        load_expectations(tmp_path / "e.toml", registry)


@pytest.mark.parametrize("entry,message", [
    # a regular expression over an assertion's wording breaks when the wording changes
    ('match = "x"\n', "never the wording of a message"),
    ('', "name the failure"),
])
def test_a_known_failure_names_its_figure(registry, tmp_path, entry, message):
    (tmp_path / "e.toml").write_text(_FAILS.replace('measurement = "ratio"\n', entry))
    with pytest.raises(reg.EntryError, match=message):
        load_expectations(tmp_path / "e.toml", registry)


def test_the_readme_verdict_table_is_the_vocabulary():
    """The README defines each verdict in the words of support/rules/verdicts.py, in its order."""
    from support.rules import verdicts
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
    """Negative controls (support/rules/controls.py): importing every claim module
    registers them (two of one name refuse to load); each names claims of the registry and
    a perturbation in words, and a claim the registry excuses from controls says why."""
    from support.harness.claim_modules import discover
    from support.rules import controls
    found = discover()
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
    to turn red here). The rule is support/rules/control_summary.py's, which check-claim applies
    to one claim from the sources; here the controls are the ones importing the modules
    registers."""
    from support.harness.claim_modules import discover
    from support.rules import controls
    from support.rules.control_summary import negative_gaps
    found = list(discover().values())
    exps = load_expectations(registry=registry)
    missing = [f"{cid}: {gap}" for cid, c in registry.items()
               for gap in negative_gaps(c, found, exps)]
    assert not missing, f"{len(missing)} claims lack a control:\n  " + "\n  ".join(missing)


# the controls that still change this repository's own code, each with the issue that
# replaces it; the lint below fails on any other, and on an entry that no longer does
PATCHES_THE_SUITE: dict[str, str] = {}


def test_no_control_patches_the_suites_own_code():
    """A control changes the library (torch, JAX, optax, scikit-learn), the data or the
    environment, never this repository's code (claims/README.md): every control is run
    against a recording stand-in of its MonkeyPatch, and none may set or delete a module,
    function or class of support/ or claims/ (support.rules.controls.suite_patches), but
    those PATCHES_THE_SUITE lists with the issue that removes them."""
    from support.harness.claim_modules import discover
    from support.rules import controls
    patching = {name: p for name, c in discover().items()
                if (p := controls.suite_patches(c))}
    unknown = {name: p for name, p in patching.items() if name not in PATCHES_THE_SUITE}
    assert not unknown, "controls that patch this repository's code: " + "; ".join(
        f"{name}: {', '.join(p)}" for name, p in unknown.items())
    stale = sorted(set(PATCHES_THE_SUITE) - set(patching))
    assert not stale, f"no longer patch the suite (drop them from PATCHES_THE_SUITE): {stale}"


def test_the_suite_patch_lint_sees_a_patch_of_the_suite():
    """The lint's negative control: each way a control can reach this repository's code is
    seen (a module, by object or by its dotted name, a function's defaults, a class, a
    mapping a module holds); a patch of the library, the data table or the environment is
    not."""
    import sys

    import torch

    from support.harness.claim_modules import discover
    from support.rules import controls
    from support.lab import experiments, nested, stories
    from support.lab.perturb import read_scaled, with_defaults

    def patches(apply):
        return controls.suite_patches(controls.Control("c", ("XX-01",), "w", apply))
    assert patches(lambda mp: mp.setattr(experiments, "_jobs", dict)) == [
        "mp.setattr(support.lab.experiments, '_jobs')"]
    assert patches(lambda mp: mp.setattr("support.lab.experiments._jobs", dict))
    assert patches(lambda mp: mp.setattr(sys.modules[__name__], "PATCHES_THE_SUITE", {}))
    assert patches(lambda mp: with_defaults(mp, nested.nested_model, seed=1))
    assert patches(lambda mp: mp.setattr(nested.NestedNet, "forward", lambda self, x: x))
    assert patches(lambda mp: mp.setitem(stories.STORIES, "raw", {}))
    assert patches(lambda mp: mp.setattr(torch, "tanh", torch.sin)) == []
    assert patches(lambda mp: with_defaults(mp, torch.optim.Adam.__init__, lr=0.1)) == []
    assert patches(lambda mp: read_scaled(mp, "age_days", 1 / 7)) == []
    assert patches(lambda mp: mp.setenv("OMP_NUM_THREADS", "1")) == []


# --------------------------------------------------------------------------- each fact once
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?"
# a threshold written into prose: a comparison, or a range ("[2, 2.7]", "1-4x", "2 to 5")
_THRESHOLD = re.compile(
    r"(?:<=|>=|<|>|\b(?:above|below|at least|at most|more than|less than|exceeds?|within)\s+)"
    rf"\s*({_NUMBER})x?(?![\w.])"
    rf"|\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]"
    rf"|(?<![\w.-])({_NUMBER})\s*-\s*({_NUMBER})x\b|(?<![\w.])({_NUMBER}) to ({_NUMBER})\b",
    re.I)


def _figure_values(claim) -> set[float]:
    """The numbers a claim's figures decide by: bound values, stated values, band edges."""
    from support.rules import tolerances
    out = set()
    for f in claim.all_figures():
        out |= {float(b.value) for b in f.bounds if b.op != "=="}
        tol = f.tolerance()
        numeric = isinstance(f.stated, (int, float)) and not isinstance(f.stated, bool) \
            or tolerances._numeric_text(f.stated)
        if tol is not None and numeric:
            out |= {tolerances.as_float(f.stated), *map(float, tolerances.band(f.stated, tol))}
    return {v for v in out if math.isfinite(v)}


def restated_thresholds(claim) -> list[str]:
    """Thresholds a claim's meaning writes as numbers that its figures hold: a copy that can
    drift from the figure (write {bound:NAME} and the like)."""
    values = _figure_values(claim)
    out = []
    for m in _THRESHOLD.finditer(reg.PLACEHOLDER.sub("", claim.meaning)):
        nums = [float(g.replace(",", "")) for g in m.groups() if g is not None]
        if any(abs(n - v) <= 1e-6 * max(abs(n), abs(v)) for n in nums for v in values):
            out.append(f"{claim.id} meaning: {m.group(0)!r} restates a figure "
                       "(write {bound:NAME}, {band:NAME} or {stated:NAME})")
    return out


def test_a_meaning_writes_no_threshold_its_figures_hold(registry):
    """Where a meaning names a threshold it reads it from the figure (a placeholder), so the
    words and the rule that decides cannot drift apart."""
    bad = [r for c in registry.values() for r in restated_thresholds(c)]
    assert not bad, "\n  ".join(["meanings that restate their figures:"] + bad)


def test_the_threshold_lint_sees_a_restated_bound(tmp_path):
    """Negative control of the lint above: DS-09's old rule "[2.5, 3.5]" beside its band."""
    _section(tmp_path, HEADER + _ONE + 'meaning = "holds when the ratio is in [2.5, 3.5]; '
             'drift above 4"\nfigures = [{ name = "r", stated = 3, tol = "printed", '
             'bound = "< 4" }]\n')
    found = restated_thresholds(reg.load_entries(tmp_path)["AB-01"])
    assert len(found) == 2 and "[2.5, 3.5]" in found[0] and "above 4" in found[1]


# the calls that compare their arguments (a tolerance among them is a rule too)
_COMPARING_CALLS = {"isclose", "allclose", "assert_allclose", "assert_close", "approx", "equal",
                    "array_equal", "assert_array_equal", "assert_equal"}


def _operands(expr, ast) -> set[str]:
    """The values an expression is made of, as source text: each name, attribute or subscript
    chain, the object of a method called on it (``res['hgb']`` of ``res['hgb'].mean()``)."""
    out, inner = set(), set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            inner.add(id(node.func))
            if isinstance(node.func, ast.Attribute):
                out.add(ast.unparse(node.func.value))
                inner.add(id(node.func.value))
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            inner.add(id(node.value))
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and id(node) not in inner:
            out.add(ast.unparse(node))
    return out


def _constant_number(node, ast) -> bool:
    """A number written in the code: a numeric literal, arithmetic, a tuple or a list of them,
    or a value a call builds from them alone."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _constant_number(node.operand, ast)
    if isinstance(node, ast.BinOp):
        return _constant_number(node.left, ast) and _constant_number(node.right, ast)
    if isinstance(node, (ast.Tuple, ast.List)):
        return bool(node.elts) and all(_constant_number(e, ast) for e in node.elts)
    # a value built from numbers alone: torch.tensor([0.0, -4.0]), np.float32(1.7)
    return isinstance(node, ast.Call) and bool(node.args) and not node.keywords \
        and all(_constant_number(a, ast) for a in node.args)


def _numbers_in(node, ast) -> list[str]:
    """The numbers a comparison's operand writes, reached through arithmetic, tuples and lists
    (an index, a slice or a function's argument is no threshold: ``h[-20:]``, ``std(ddof=0)``)."""
    if _constant_number(node, ast):
        return [ast.unparse(node)]
    if isinstance(node, ast.UnaryOp):
        return _numbers_in(node.operand, ast)
    if isinstance(node, ast.BinOp):
        return _numbers_in(node.left, ast) + _numbers_in(node.right, ast)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _numbers_in(e, ast)]
    return []


def _checked_values(fn, ast) -> dict[str, set[str]]:
    """Value (source text) -> the figures a function passes it, or a value derived from it, to
    claim.check for: the operands of each checked expression, then every name assigned (or
    looped over) from an expression that holds one of them, to a fixed point."""
    out: dict[str, set[str]] = {}
    for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
        if getattr(call.func, "attr", "") == "check" and call.args \
                and isinstance(call.args[0], ast.Constant):
            values = call.args[1:2] + [k.value for k in call.keywords if k.arg in (None, "value")]
            for v in values:
                for op in _operands(v, ast):
                    out.setdefault(op, set()).add(call.args[0].value)
    assigns = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            assigns += [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
            assigns.append((node.target, node.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            assigns.append((node.target, node.iter))
    grown = True
    while grown:
        grown = False
        for target, value in assigns:
            figures = {f for op in _operands(value, ast) for known, fs in out.items()
                       if _holds(op, known) for f in fs}
            for name in [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]:
                if figures - out.get(name, set()):
                    out.setdefault(name, set()).update(figures)
                    grown = True
    return out


def _holds(text: str, value: str) -> bool:
    """Whether ``text`` is the value ``value`` or a part of it (``fixed[-20:]`` of ``fixed``)."""
    return text == value or text.startswith(value) and text[len(value)] in ".["


def second_rules(root: Path = ROOT) -> list[str]:
    """Comparisons, in an assert or an if of a claim test (or a helper that checks figures),
    of a value passed to claim.check (or one derived from it) with a number: a rule the
    entry does not hold, so the report cannot show it and a known failure cannot name it.
    It belongs to the figure (a bound, a tolerance, fails_outside) or to a new figure. A
    comparing call (allclose, approx, equal ...) given such a value and a number counts too."""
    import ast
    out = []
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            checked = _checked_values(fn, ast)
            if not checked:
                continue
            tests = [n.test for n in ast.walk(fn) if isinstance(n, (ast.Assert, ast.If))]
            found = []
            for node in [n for t in tests for n in ast.walk(t)]:
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    numbers = [n for side in sides for n in _numbers_in(side, ast)]
                elif isinstance(node, ast.Call) and getattr(
                        node.func, "attr", getattr(node.func, "id", "")) in _COMPARING_CALLS:
                    sides = [*node.args, *(k.value for k in node.keywords)]
                    numbers = [n for side in sides for n in _numbers_in(side, ast)]
                else:
                    continue
                figures = sorted({f for side in sides for op in _operands(side, ast)
                                  for value, fs in checked.items() if _holds(op, value)
                                  for f in fs})
                if numbers and figures and not any(node in ast.walk(f) for f in found):
                    found.append(node)
                    out.append(f"{path.relative_to(root)}:{node.lineno} ({fn.name}): "
                               f"{ast.unparse(node)[:90]!r} compares {', '.join(map(repr, figures))} "
                               f"with {', '.join(numbers)}")
    return out


def test_no_test_holds_a_second_rule():
    """Each fact once: a test passes its measurement to claim.check, which judges it by the
    figure's bound, tolerance or fails_outside in its entry; a comparison of the same value
    (or one derived from it) with a number in the test is a second rule the report cannot
    show and a known failure cannot name."""
    bad = second_rules()
    assert not bad, "\n  ".join([f"{len(bad)} second rules in claim tests (move each into "
                                 "its figure's entry, or a new figure's):"] + bad)


def test_the_second_rule_lint_sees_one(tmp_path):
    """Negative control of the lint above: a bound restated in an assert, a number in an if,
    a value derived from a checked one, and a tolerance passed to a comparing call; the
    contrast on a value the test only records, an index and a function's argument are not."""
    (tmp_path / "claims" / "lecture").mkdir(parents=True)
    (tmp_path / "claims" / "lecture" / "test_01_s.py").write_text(
        'import numpy as np\nimport pytest\n\n\n@pytest.mark.claim("AB-01")\ndef test_r(claim):\n'
        '    r, h = 2.4, np.ones(5)\n    claim.check("r", r)\n    assert r >= 3, "several"\n'
        '    if r * 2 < 1:\n        pass\n    gap = abs(r - 1.0)\n    assert gap <= 0.5 * r\n'
        '    assert np.allclose(r, 2.4, rtol=1e-6)\n'
        '    claim.check("last", h[-1])\n    other = claim.record("other", 7.0)\n'
        '    assert other > 1 and h[-2:].std(ddof=0) == h.mean()\n')
    found = second_rules(tmp_path)
    assert [f.split(": ", 1)[0] for f in found] == [
        "claims/lecture/test_01_s.py:9 (test_r)", "claims/lecture/test_01_s.py:10 (test_r)",
        "claims/lecture/test_01_s.py:13 (test_r)", "claims/lecture/test_01_s.py:14 (test_r)"]
    assert found[0].endswith("compares 'r' with 3") and "with 0.5" in found[2] \
        and "with 2.4, 1e-06" in found[3]


def _device_prefixes() -> set[str]:
    from support.machine.devices import DEVICES
    return {p for d in DEVICES.values() for p in (d.name.split(":")[-1], d.hardware)} - {"cpu"}


def test_a_known_failure_names_every_device_twin_of_its_figures(registry):
    """A figure measured on a device (cuda_NAME beside NAME) moves for the same reason: a
    known drift or fails that names one names both, or the first run on that device goes red
    on a failure the suite already explained (MEM-07 lost its CUDA figure in a merge)."""
    prefixes = _device_prefixes()
    missing = []
    for e in load_expectations(registry=registry):
        figures = registry[e.id].figures
        for name in e.measurements:
            bare = next((name[len(p) + 1:] for p in prefixes if name.startswith(p + "_")), name)
            twins = {bare} | {f"{p}_{bare}" for p in prefixes}
            missing += [f"{e.label()}: names {name!r} but not its twin {t!r}"
                        for t in sorted(twins & set(figures)) if t not in e.measurements]
    assert not missing, "\n  ".join(["known failures missing a device twin:"] + missing)


def test_every_known_fails_or_drift_has_a_positive_control(registry):
    """A "fails" proves something only if the same test could have said "holds": every claim
    known to fail or drift here has a positive control (expect="holds": a perturbation under
    which its sentence is true), or its entry says why none can exist (``positive_reason``).
    Entries keyed to other versions than the installed ones do not apply here."""
    from support.harness.claim_modules import discover
    from support.rules import controls
    from support.rules.control_summary import positive_gaps
    found = list(discover().values())
    exps = load_expectations(registry=registry)
    missing = [f"{cid}: {gap}" for cid, c in registry.items()
               for gap in positive_gaps(c, found, exps)]
    assert not missing, "known fails or drift with no positive control:\n  " + "\n  ".join(missing)
