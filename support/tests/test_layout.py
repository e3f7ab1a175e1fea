"""The house of support/: a few wings, imports that run one way, no circles.

Read from the sources (``ast``), lazy imports inside functions included, so the rules hold for
every path the code can take, not only for what one run imported:

* every module lives in a wing (or is ``paths``, ``cli``, ``__main__``);
* a wing imports only the wings below it (:data:`WINGS`, bottom first) and never one above;
* no circle of imports between modules, across wings or inside one;
* the pytest plugins import no ``lab`` module and no framework at module top, directly or
  through what they import at module top (pytest's start-up and ``python -m support show``
  load no torch), which a fresh interpreter then confirms.
"""
from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys

import pytest

from support.paths import ROOT, SUPPORT

# bottom first: a wing may import the wings before it in this list, never one after it
WINGS = ("machine", "rules", "lab", "reports", "notes", "harness")
BASE = ("support", "support.paths")          # below every wing
TOP = ("support.cli", "support.__main__")      # above every wing
PLUGINS = ("support.harness.plugin", "support.harness.device_options",
           "support.harness.timing_lock", "support.harness.schedule",
           "support.harness.control_options")
FRAMEWORKS = ("torch", "jax", "jaxlib", "optax", "sklearn", "keras", "flax", "matplotlib")
# the wings that know nothing of pytest: the machine, the rules, the lab, the reports and the
# notes are read and run outside a test session too (the commands, a report read back)
PYTEST_FREE = ("machine", "rules", "lab", "reports", "notes")
PYTEST = ("pytest", "_pytest", "pytest_benchmark", "xdist")


def _modules() -> dict[str, object]:
    out = {}
    for path in sorted(SUPPORT.rglob("*.py")):
        rel = path.relative_to(SUPPORT)
        if rel.parts[0] == "tests":
            continue
        parts = ["support", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, top_only: bool = False) -> set[str]:
    """The suite's modules (and outside packages, by top name) that ``name`` imports."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_only else list(ast.walk(tree))
    if top_only:   # module top: what runs on import, under if/try blocks too
        nodes = [n for stmt in tree.body for n in ast.walk(stmt)
                 if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level else node.module or "")
            if base.split(".")[0] != "support":
                out.add(base.split(".")[0])
                continue
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            out |= subs or {base}
        elif isinstance(node, ast.Import):
            for a in node.names:
                out.add(a.name if a.name.split(".")[0] == "support" else a.name.split(".")[0])
    out.discard(name)
    return out


def _wing(name: str) -> str:
    parts = name.split(".")
    if name in BASE:
        return "base"
    if name in TOP:
        return "top"
    return parts[1] if len(parts) > 2 and parts[1] in WINGS else "?"


def _rank(wing: str) -> int:
    return {"base": -1, "top": len(WINGS)}.get(wing, WINGS.index(wing) if wing in WINGS else 99)


def _suite_imports(name: str, top_only: bool = False) -> set[str]:
    # a package's own __init__ is imported on the way to its modules: not an arrow
    return {m for m in _imports(name, top_only) if m in MODULES and m not in BASE
            and not (m.count(".") == 1 and _wing(name) == m.split(".")[1])}


def test_every_module_lives_in_a_wing():
    homeless = [m for m in MODULES if _wing(m) == "?" and m.count(".") > 1
                or m.count(".") == 1 and m not in BASE + TOP and m.split(".")[1] not in WINGS]
    assert not homeless, f"modules outside the wings {WINGS}: {homeless}"


def test_each_wing_says_what_it_holds_and_re_exports_nothing():
    for wing in WINGS:
        tree = ast.parse((SUPPORT / wing / "__init__.py").read_text())
        doc = ast.get_docstring(tree) or ""
        assert len(doc.split()) >= 20, f"support/{wing}/__init__.py: a paragraph on the wing"
        code = [n for n in tree.body if not (isinstance(n, ast.Expr)
                                             and isinstance(n.value, ast.Constant))]
        assert not code, f"support/{wing}/__init__.py holds code; it re-exports nothing"


def test_imports_run_down_the_wings_never_up():
    up = []
    for name in MODULES:
        for dep in _suite_imports(name):
            if _rank(_wing(dep)) > _rank(_wing(name)):
                up.append(f"{name} ({_wing(name)}) imports {dep} ({_wing(dep)})")
    assert not up, "imports that run back up:\n  " + "\n  ".join(sorted(up))


def test_the_floors_below_the_harness_import_no_pytest():
    """pytest, its plugins and the recorder are the harness's: a module of a lower wing that
    imported them (a device's pytest mark, a timing figure checked on the ``claim`` fixture)
    would tie the floor to the test session above it."""
    found = sorted(f"{m} imports {dep}" for m in MODULES if _wing(m) in PYTEST_FREE
                   for dep in _imports(m) if dep in PYTEST)
    assert not found, "pytest below the harness:\n  " + "\n  ".join(found)


def test_the_pytest_check_sees_an_import_of_pytest(tmp_path, monkeypatch):
    # negative control of the test above: a machine module that marks a test
    fake = tmp_path / "marks.py"
    fake.write_text("def needs(*devs):\n    import pytest\n    return pytest.mark.needs(*devs)\n")
    monkeypatch.setitem(MODULES, "support.machine.marks", fake)
    assert "pytest" in _imports("support.machine.marks")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), as a sorted list."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_circle_of_imports():
    graph = {m: _suite_imports(m) for m in MODULES}
    assert not _cycles(graph), f"import circles: {_cycles(graph)}"


def test_the_circle_finder_sees_a_circle():
    # negative control of the test above
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _top_closure(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in MODULES:
            todo += sorted(_imports(m, top_only=True))
    return seen


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_plugin_imports_no_lab_module_and_no_framework_at_module_top(plugin):
    closure = _top_closure(plugin)
    bad = sorted(m for m in closure if m.startswith("support.lab") or m in FRAMEWORKS)
    assert not bad, f"{plugin} imports at module top (directly or through others): {bad}"


def test_pytest_start_up_and_show_load_no_framework():
    code = ("import sys, importlib\n"
            f"for m in {PLUGINS + ('support.reports.report', 'support.cli')!r}:\n"
            "    importlib.import_module(m)\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def floors() -> int:
    """The longest chain of imports between the suite's modules (a measure of height)."""
    graph = {m: _suite_imports(m) for m in MODULES}
    depth: dict[str, int] = {}

    def d(m):
        if m not in depth:
            depth[m] = 0
            depth[m] = 1 + max((d(x) for x in graph[m]), default=0)
        return depth[m]

    return max(d(m) for m in graph)


def arrows() -> dict[tuple[str, str], int]:
    """(from wing, to wing) -> how many module imports cross that way."""
    out: dict[tuple[str, str], int] = {}
    for m in MODULES:
        for dep in _suite_imports(m):
            a, b = _wing(m), _wing(dep)
            if a != b:
                out[(a, b)] = out.get((a, b), 0) + 1
    return out


if __name__ == "__main__":       # python -m support.tests.test_layout: the tree's figures
    print(f"{len(MODULES)} modules, {floors()} floors")
    for (a, b), n in sorted(arrows().items(), key=lambda kv: (_rank(kv[0][0]), kv[0][1])):
        print(f"  {a} -> {b}: {n}")
