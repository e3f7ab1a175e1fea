"""What the claim tests' source says, read without running them (so the lints and the
report see every test, whatever a run collected): which claims each test marks, and which
registry figures it checks."""
from __future__ import annotations

import ast
import re
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
# claim.figure(name), timing.check_ratio(claim, name, ...), timing.settle(claim, name, ...),
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
