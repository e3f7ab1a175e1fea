"""What the claim tests' source says, read without running them (so the lints and the
report see every test, whatever a run collected): which claims each test marks, and which
registry figures it checks."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from support.paths import ROOT


def static_claim_markers(root: Path = ROOT) -> dict[str, list[str]]:
    """ID -> ['claims/...py::function'] for every ``@pytest.mark.claim(...)`` under claims/,
    found by reading the source (so it sees tests whatever a run collected)."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        owners = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                for dec in node.decorator_list:
                    for sub in ast.walk(dec):
                        owners[id(sub)] = node.name
        for node in ast.walk(tree):
            f = getattr(node, "func", None)
            if isinstance(node, ast.Call) and isinstance(f, ast.Attribute) and f.attr == "claim" \
                    and isinstance(f.value, ast.Attribute) and f.value.attr == "mark":
                where = f"{path.relative_to(root)}::{owners.get(id(node), '<module>')}"
                for arg in node.args:
                    key = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                        else "<non-literal claim id>"
                    found.setdefault(key, []).append(where)
    return found


# calls through which a test compares a registry figure: claim.check(name, ...),
# claim.figure(name), timed.check_ratio(claim, name, ...), timed.settle(claim, name, ...),
# properties.check_rounding(claim, name, ...)
_FIGURE_CALLS = {"check": 0, "figure": 0, "decided": 0, "check_ratio": 1, "settle": 1,
                 "check_rounding": 1}
# calls through which a test records a measurement (checked or not)
_RECORD_CALLS = {"record": 0, "check": 0, "check_ratio": 1, "settle": 1, "record_estimate": 1,
                 "check_rounding": 1}


def _name_pattern(node) -> str | None:
    """A figure name as a regular expression: a literal, or an f-string whose fields match
    anything; None when the name is computed otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+"
                       for v in node.values)
    return None


def static_figure_checks(root: Path = ROOT, calls: dict | None = None
                         ) -> dict[str, list[tuple[str, str]]]:
    """Claim ID -> [(name pattern, 'file::function')] of every figure name a test of that
    claim compares, found by reading the source. Names used in a module's helper functions
    (no claim marker) count for every claim of the module. A computed name is reported as
    the pattern "<computed>"."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helpers, module_ids = [], set()
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            ids = [a.value for d in fn.decorator_list for sub in ast.walk(d)
                   if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == "claim"
                   for a in sub.args if isinstance(a, ast.Constant)]
            module_ids.update(ids)
            names = []
            for call in ast.walk(fn):
                f = getattr(call, "func", None)
                called = getattr(f, "attr", None) or getattr(f, "id", None)
                pos = (calls or _FIGURE_CALLS).get(called) if isinstance(call, ast.Call) else None
                if pos is None or len(call.args) <= pos:
                    continue
                names.append(_name_pattern(call.args[pos]) or "<computed>")
            where = f"{path.relative_to(root)}::{fn.name}"
            if ids:
                for cid in ids:
                    found.setdefault(cid, []).extend((n, where) for n in names)
            else:
                helpers.extend((n, where) for n in names)
        for cid in module_ids:
            found.setdefault(cid, []).extend(helpers)
    return found


def static_recorded_names(root: Path = ROOT) -> dict[str, list[tuple[str, str]]]:
    """Claim ID -> [(name pattern, where)] of every measurement a test of it records."""
    return static_figure_checks(root, _RECORD_CALLS)


@dataclass(frozen=True)
class StaticControl:
    """A ``@control(...)`` of a claim module, as its source declares it."""
    name: str
    claims: tuple[str, ...]
    expect: str
    what: str
    where: str                 # 'claims/...py::function'
    empty: bool                # its body perturbs nothing yet (new-claim's stub)


def _does_nothing(fn) -> bool:
    """A body of a docstring, ``pass`` or ``...`` only."""
    return all(isinstance(s, ast.Pass)
               or isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) for s in fn.body)


def static_controls(root: Path = ROOT) -> list[StaticControl]:
    """Every negative, positive and level control under claims/, found by reading the source
    (support/rules/controls.py registers them when a module is imported; this sees them
    without importing torch or JAX)."""
    found = []
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "id", getattr(
                        dec.func, "attr", "")) == "control"):
                    continue
                kw = {k.arg: k.value.value for k in dec.keywords
                      if isinstance(k.value, ast.Constant)}
                found.append(StaticControl(
                    kw.get("name") or fn.name.strip("_").replace("_", "-"),
                    tuple(a.value for a in dec.args if isinstance(a, ast.Constant)),
                    kw.get("expect", "red"), str(kw.get("what", "")),
                    f"{path.relative_to(root)}::{fn.name}", _does_nothing(fn)))
    return found


def figure_gaps(registry: dict, checks: dict, ids=None) -> tuple[list[str], list[str]]:
    """What the tests and the entries of ``ids`` (every claim by default) disagree on, from
    :func:`static_figure_checks`: (the figures an entry holds that no test of it checks, the
    names a test checks that its entry lacks). A name used in a module's helper counts for
    every claim of the module, so it is wrong only if no claim there has it; a name computed
    at run time cannot be read, and is reported."""
    ids = list(registry) if ids is None else ids
    unchecked, unknown = [], []
    for cid in ids:
        pats = [p for p, _ in checks.get(cid, []) if p != "<computed>"]
        unchecked += [f"{cid}: {name!r}" for name in registry[cid].figures
                      if not any(re.fullmatch(p, name) for p in pats)]
        for pat, where in checks.get(cid, []):
            if pat == "<computed>":
                unknown.append(f"{where}: a figure name computed at run time (use a literal "
                               "or an f-string)")
            elif not any(re.fullmatch(pat, n) for n in registry[cid].figures) and not any(
                    re.fullmatch(pat, n) for other, uses in checks.items()
                    if other != cid and other in registry and (pat, where) in uses
                    for n in registry[other].figures):
                unknown.append(f"{where}: {cid} has no figure matching {pat!r}")
    return unchecked, unknown
