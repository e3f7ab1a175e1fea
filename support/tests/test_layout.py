"""The house of support/: a few wings, imports that run one way, no circles.

Read from the sources (``ast``), lazy imports inside functions included, so the rules hold for
every path the code can take, not only for what one run imported:

* every module lives in a wing (or is ``paths``, ``cli``, ``__main__``), and every command of
  ``python -m support`` has its module in the commands wing, which ``cli`` imports by name
  (drawn as an import);
* a wing imports only the wings below it (:data:`WINGS`, bottom first) and never one above;
* no circle of imports between modules, across wings or inside one;
* no wing below the harness imports pytest;
* no module is over :data:`MOST_LINES` lines, and only the data plugin reads
  ``CONCRETE_DATA``;
* the modules that reach into claims/ where no import statement shows it (importing its test
  modules by path, starting pytest sessions over it) are the ones :data:`REACHES_INTO_CLAIMS`
  names, each in a wing where that is expected;
* the pytest plugins import no ``lab`` module and no framework at module top, directly or
  through what they import at module top (pytest's start-up and ``python -m support show``
  load no torch), which a fresh interpreter then confirms.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys

import pytest

from support.paths import ROOT, SUPPORT

# bottom first: a wing may import the wings before it in this list, never one after it
WINGS = ("machine", "rules", "lab", "reports", "notes", "harness", "commands")
BASE = ("support", "support.paths")          # below every wing
TOP = ("support.cli", "support.__main__")      # above every wing
PLUGINS = ("support.harness.plugin", "support.harness.concrete_data",
           "support.harness.device_options", "support.harness.timing_lock",
           "support.harness.schedule", "support.harness.control_options")
FRAMEWORKS = ("torch", "jax", "jaxlib", "optax", "sklearn", "keras", "flax", "matplotlib")
# the modules that reach into claims/ without an import statement the graph could draw, and
# how: only the harness (the pytest wiring) and the commands (the runners) may
REACHES_INTO_CLAIMS = {
    "support.harness.claim_modules": "imports every claim test module by its path, which "
                                     "registers its controls, and reads its tests' marks",
    "support.commands.control_runner": "starts pytest sessions of claims/ under the controls",
    "support.commands.suite_runs": "starts the README's test command, and sessions of some "
                                   "claims beside busy processes",
    "support.commands.gpu_steps": "builds the GPU run's pytest commands over claims/",
}
REACHING_WINGS = ("harness", "commands")
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


def _commands() -> dict[str, str]:
    """``python -m support``'s commands and the module of each, read from support/cli.py."""
    tree = ast.parse((SUPPORT / "cli.py").read_text(encoding="utf-8"))
    table = next(n.value for n in tree.body if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "COMMANDS")
    return {k.value: v.elts[0].value for k, v in zip(table.keys, table.values)}


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
    if name == "support.cli":      # imports each command's module by name: drawn as an import
        out |= set(_commands().values())
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


def test_every_command_has_its_module_in_the_commands_wing():
    """One module per command: its arguments, its printing and calls into the wings below."""
    commands = _commands()
    assert commands, "no COMMANDS table in support/cli.py"
    misplaced = {c: m for c, m in commands.items()
                 if m not in MODULES or _wing(m) != "commands"}
    assert not misplaced, f"commands whose module is not in support/commands/: {misplaced}"
    shared = {m for m in commands.values() if list(commands.values()).count(m) > 1}
    assert not shared, f"modules that hold more than one command: {shared}"


# one job per module: past this many lines a module holds two (split it along a job, not a
# line count)
MOST_LINES = 450


def _too_long(modules: dict, most: int = MOST_LINES) -> dict[str, int]:
    sizes = {m: len(path.read_text(encoding="utf-8").splitlines()) for m, path in modules.items()}
    return {m: n for m, n in sizes.items() if n > most}


def test_no_module_is_over_the_line_limit():
    long = _too_long(MODULES)
    assert not long, f"modules over {MOST_LINES} lines (split each along a job): {long}"


def test_the_line_limit_sees_a_long_module(tmp_path):
    # negative control of the test above
    (tmp_path / "long.py").write_text("x = 1\n" * (MOST_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MOST_LINES)
    got = _too_long({"long": tmp_path / "long.py", "short": tmp_path / "short.py"})
    assert got == {"long": MOST_LINES + 1}


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


# the one module that reads the concrete data's variable (the pytest plugin that declares
# --concrete-data and hands the table to the fixtures and the report)
DATA_VARIABLE, DATA_HOME = "CONCRETE_DATA", "support.harness.concrete_data"


def _reads_variable(path, variable: str) -> bool:
    """Whether a module reads the environment variable ``variable`` (``os.environ.get(...)``,
    ``os.environ[...]``, ``os.getenv(...)``), by name, with no other module's help."""
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Call) and _callee(n) in ("get", "getenv") and n.args \
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == variable:
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) \
                and n.slice.value == variable:
            return True
    return False


def test_only_the_data_plugin_reads_the_data_variable():
    """One home for the concrete data's path: the plugin reads CONCRETE_DATA (by its name,
    held in one constant), every other module asks it."""
    readers = sorted(m for m, path in MODULES.items()
                     if DATA_VARIABLE in path.read_text(encoding="utf-8")
                     and _reads_variable(path, DATA_VARIABLE))
    assert readers == [], f"modules that read {DATA_VARIABLE} themselves: {readers}"
    home = MODULES[DATA_HOME].read_text(encoding="utf-8")
    assert f'VARIABLE = "{DATA_VARIABLE}"' in home and "os.environ.get(VARIABLE)" in home


def test_the_variable_check_sees_a_module_that_reads_it(tmp_path):
    # negative control of the test above: the three ways a module reads a variable
    for code in ('import os\nP = os.environ.get("CONCRETE_DATA")\n',
                 'import os\nP = os.environ["CONCRETE_DATA"]\n',
                 'import os\nP = os.getenv("CONCRETE_DATA") or None\n'):
        (tmp_path / "m.py").write_text(code)
        assert _reads_variable(tmp_path / "m.py", DATA_VARIABLE), code
    (tmp_path / "m.py").write_text('HELP = "--concrete-data or CONCRETE_DATA"\n')
    assert not _reads_variable(tmp_path / "m.py", DATA_VARIABLE)


# a string that names claims' modules (``claims.``, ``claims.lecture.test_08...``), not one of
# the report's files (claims.json, claims.md) nor the workflow (claims.yml)
CLAIMS_MODULE = re.compile(r"claims\.(?!(json|md|yml|toml)$)([A-Za-z_]\w*(\.|$))*$")


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _reaches(path) -> list[str]:
    """How a module reaches into claims/ where no import statement shows it: it imports modules
    by a computed name, names ``claims.`` modules, or starts ``python -m pytest``."""
    how = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Call) and _callee(n) in ("import_module", "__import__"):
            arg = n.args[0] if n.args else None
            if not isinstance(arg, ast.Constant) or str(arg.value).split(".")[0] == "claims":
                how.add("imports modules by a computed name")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) \
                and CLAIMS_MODULE.match(n.value):
            how.add("names claims.* modules")
        elif isinstance(n, (ast.List, ast.Tuple)):
            words = [e.value for e in n.elts if isinstance(e, ast.Constant)]
            if "-m" in words and "pytest" in words:
                how.add("starts pytest")
    return sorted(how)


def test_every_reach_into_claims_is_named():
    """support/ imports nothing of claims/ that an import statement shows; where it reaches in
    otherwise (the controls registered by importing the test modules, the runners' pytest
    sessions), the module is named in REACHES_INTO_CLAIMS, in a wing where that is expected,
    and a named module still does it (``support.cli`` imports the commands by name: drawn)."""
    found = {m: how for m, path in MODULES.items() if m != "support.cli"
             and (how := _reaches(path))}
    unnamed = {m: how for m, how in found.items() if m not in REACHES_INTO_CLAIMS}
    assert not unnamed, f"reaches into claims/ not named in REACHES_INTO_CLAIMS: {unnamed}"
    stale = sorted(set(REACHES_INTO_CLAIMS) - set(found))
    assert not stale, f"named in REACHES_INTO_CLAIMS but reaching nothing: {stale}"
    wrong = sorted(m for m in REACHES_INTO_CLAIMS if _wing(m) not in REACHING_WINGS)
    assert not wrong, f"reaches into claims/ outside {REACHING_WINGS}: {wrong}"


def test_the_reach_finder_sees_a_reach(tmp_path):
    # negative control of the test above: a module that imports a claim module by its path,
    # and one that starts a pytest session
    a = tmp_path / "a.py"
    a.write_text("import importlib\ndef f(p):\n    return importlib.import_module(p)\n")
    b = tmp_path / "b.py"
    b.write_text("import sys\nCMD = [sys.executable, '-m', 'pytest', 'claims']\n")
    c = tmp_path / "c.py"
    c.write_text("import importlib\namp = importlib.import_module('torch.amp')\n")
    assert _reaches(a) == ["imports modules by a computed name"]
    assert _reaches(b) == ["starts pytest"]
    assert _reaches(c) == []
    d = tmp_path / "d.py"
    d.write_text("MINE = [m for m in ('claims.lecture.test_08', 'claims.json') if m]\n")
    assert _reaches(d) == ["names claims.* modules"]
    e = tmp_path / "e.py"
    e.write_text("FILES = ('claims.json', 'claims.md')\n")
    assert _reaches(e) == []


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


SHOW = ("support.reports.report", "support.commands.show", "support.cli")


def test_pytest_start_up_and_show_load_no_framework():
    code = ("import sys, importlib\n"
            f"for m in {PLUGINS + SHOW!r}:\n"
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
