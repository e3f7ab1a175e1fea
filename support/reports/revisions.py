"""The suite as a run had it: a claim's entry, its tests' code and its known failures, read
at the commit the run's fingerprint records (``suite_commit``), so that ``diff`` can tell a
claim the suite changed from one a release moved.

What is compared is what decides a verdict, read in the form it had at each commit, not the
files' text: the layout of ``claims/`` has changed (one registry file per prefix, then one
section file beside its tests) without changing a claim.

* **the entry**: the fields a verdict follows from (``JUDGED``: kind, tier, status, where it
  applies, the variants it requires, its figures with their stated values, tolerances and
  bounds), from whichever TOML file under ``claims/`` holds it; its prose (paraphrase,
  meaning, the figures' ``why``) is not compared;
* **the test**: each test function the run's report names (``path::function``), as Python's
  syntax tree without its docstring and its name, with the module-level functions and
  constants of its file that it names (its helpers and fixtures, one level down);
* **the known failures**: its ``[[expect]]`` entries in ``claims/expectations.toml`` without
  their prose (reason, erratum).

A commit is read from git (``git show``); a run made in this checkout's own commit with
uncommitted changes (``+dirty``) is read from the working tree, the nearest thing to what it
ran. A commit git does not have (a shallow clone: CI's checkout wants ``fetch-depth: 0``) is
unreadable, and said so.
"""
from __future__ import annotations

import ast
import functools
import subprocess
from dataclasses import dataclass, field
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

from support.paths import ROOT

# the fields of an entry a verdict follows from
JUDGED = ("kind", "tier", "status", "applies", "requires", "figures", "module")
# what an entry that leaves a field out means by it (support/rules/entries.py)
DEFAULTS = {"status": "testable", "applies": {}, "requires": [], "figures": [], "module": {}}
# prose of a figure, of an expectation
PROSE = ("why", "reason", "erratum")
EXPECTATIONS = "claims/expectations.toml"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@functools.lru_cache(maxsize=4)
def _head() -> str:
    out = _git("rev-parse", "HEAD")
    return out.stdout.strip() if out.returncode == 0 else ""


class Revision:
    """The suite at one run's commit."""

    def __init__(self, recorded: str | None):
        self.recorded = recorded or ""
        self.commit = self.recorded.removesuffix("+dirty")
        self.dirty = self.recorded.endswith("+dirty")
        self.problem = ""
        self.worktree = False
        if not self.commit:
            self.problem = "the report records no suite commit"
        elif self.dirty and self.commit == _head():
            self.worktree = True
        elif _git("cat-file", "-e", f"{self.commit}^{{commit}}").returncode != 0:
            self.problem = (f"commit {self.commit[:10]} is not in this checkout's history "
                            "(a shallow clone? git fetch --unshallow)")

    @property
    def readable(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        """"1a2b3c4d5e", "1a2b3c4d5e (uncommitted changes, read from the working tree)"."""
        text = self.commit[:10] or "?"
        if self.worktree:
            return text + " with uncommitted changes (read from the working tree)"
        if self.dirty:
            return text + " with uncommitted changes (not seen: read as committed)"
        return text

    # ----------------------------------------------------------------------- files
    @functools.cached_property
    def _paths(self) -> list[str]:
        if self.worktree:
            return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "claims").rglob("*")
                          if p.is_file())
        out = _git("ls-tree", "-r", "--name-only", self.commit, "--", "claims")
        return out.stdout.split() if out.returncode == 0 else []

    @functools.lru_cache(maxsize=256)
    def read(self, path: str) -> str | None:
        """The text of ``path`` (relative to the checkout) at this commit, None if absent."""
        if self.worktree:
            p = ROOT / path
            return p.read_text(encoding="utf-8") if p.is_file() else None
        out = _git("show", f"{self.commit}:{path}")
        return out.stdout if out.returncode == 0 else None

    # ----------------------------------------------------------------------- entries
    @functools.cached_property
    def entries(self) -> dict[str, dict]:
        """{claim id: its judged fields} of every entry under claims/."""
        out: dict[str, dict] = {}
        for path in self._paths:
            if not path.endswith(".toml") or path == EXPECTATIONS or "/history/" in path:
                continue
            try:
                data = tomllib.loads(self.read(path) or "")
            except tomllib.TOMLDecodeError:
                continue
            for claim in data.get("claim", []):
                if isinstance(claim, dict) and claim.get("id"):
                    judged = dict(DEFAULTS, **{k: claim[k] for k in JUDGED if k in claim})
                    out[claim["id"]] = _without_prose(judged)
        return out

    @functools.cached_property
    def expectations(self) -> dict[str, list[dict]]:
        """{claim id: its [[expect]] entries without their prose}."""
        try:
            data = tomllib.loads(self.read(EXPECTATIONS) or "")
        except tomllib.TOMLDecodeError:
            return {}
        out: dict[str, list[dict]] = {}
        for e in data.get("expect", []):
            out.setdefault(e.get("id", ""), []).append(_without_prose(e))
        return out

    # ----------------------------------------------------------------------- tests
    def test_code(self, nodeids) -> dict[str, str]:
        """{test function: its code, as compared} for the report's test node ids (their
        parameters and the file they are in do not matter; a function not found is "")."""
        out: dict[str, str] = {}
        for nodeid in nodeids:
            path, _, rest = nodeid.partition("::")
            name = rest.split("[")[0].split("::")[-1]
            if name and name not in out:
                out[name] = self._function(path, name)
        return out

    def _function(self, path: str, name: str) -> str:
        tree = self._tree(path)
        if tree is None:
            return ""
        top = {n.name: n for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        top.update({t.id: n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Name)})
        fn = top.get(name)
        if fn is None:
            return ""
        named = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        named |= {a.arg for a in fn.args.args} if hasattr(fn, "args") else set()
        parts = [_code(fn)] + [_code(top[h]) for h in sorted(named) if h in top and h != name]
        return "\n".join(parts)

    @functools.lru_cache(maxsize=64)
    def _tree(self, path: str) -> ast.Module | None:
        text = self.read(path)
        try:
            return ast.parse(text) if text is not None else None
        except SyntaxError:
            return None


# import names that are not their distribution's name; an import of jax uses jaxlib too
DISTRIBUTIONS = {"sklearn": ("scikit-learn",), "jax": ("jax", "jaxlib"), "PIL": ("pillow",)}


def packages(rev: Revision, nodeids) -> set[str]:
    """The distributions the tests name in their code (and their helpers', one level down,
    as :meth:`Revision.test_code` reads them): ``jnp.sum`` in a module that imports
    ``jax.numpy as jnp`` names jax and jaxlib. Python is always in it."""
    out = {"Python"}
    for nodeid in nodeids:
        path, _, rest = nodeid.partition("::")
        tree = rev._tree(path)
        name = rest.split("[")[0].split("::")[-1]
        if tree is None or not name:
            continue
        alias = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                alias.update({(a.asname or a.name).split(".")[0]: a.name.split(".")[0]
                              for a in n.names})
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                alias.update({a.asname or a.name: n.module.split(".")[0] for a in n.names})
        used = {x.id for x in ast.walk(ast.parse(_source(tree, name)))
                if isinstance(x, ast.Name)}
        for u in used:
            top = alias.get(u)
            if top and top != "support":
                out.update(DISTRIBUTIONS.get(top, (top,)))
    return out


def _source(tree: ast.Module, name: str) -> str:
    """The source of a test function and the module-level definitions it names."""
    top = {n.name: n for n in tree.body
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    fn = top.get(name)
    if fn is None:
        return ""
    named = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    return "\n".join(ast.unparse(top[h]) for h in [name, *sorted(named)] if h in top)


def _without_prose(value):
    if isinstance(value, dict):
        return {k: _without_prose(v) for k, v in value.items() if k not in PROSE}
    if isinstance(value, list):
        return [_without_prose(v) for v in value]
    return value


def _code(node: ast.AST) -> str:
    """A definition as compared: its syntax tree without docstrings, comments, layout or its
    own name (a test renamed to read like its claim is the same test)."""
    node = ast.parse(ast.unparse(node)).body[0]
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and \
                isinstance(body[0].value.value, str):
            n.body = body[1:] or [ast.Pass()]
    if hasattr(node, "name"):
        node.name = "_"
    return ast.dump(node, annotate_fields=False)


@functools.lru_cache(maxsize=8)
def at(recorded: str | None) -> Revision:
    """The suite at a recorded commit (read once per process)."""
    return Revision(recorded)


@dataclass
class Changes:
    """What the suite changed of one claim between two commits."""

    entry: list[str] = field(default_factory=list)       # the judged fields that differ
    tests: list[str] = field(default_factory=list)       # the test functions that differ
    expectations: bool = False                           # its [[expect]] entries differ
    unreadable: str = ""                                 # why a commit cannot be read

    def __bool__(self) -> bool:
        return bool(self.entry or self.tests or self.expectations)


def changes(old: Revision, new: Revision, cid: str, old_tests, new_tests) -> Changes:
    """What of a claim the suite changed between the commits of two runs, whose reports name
    its tests ``old_tests`` and ``new_tests``."""
    problem = "; ".join(f"{which}: {r.problem}" for which, r in (("OLD", old), ("NEW", new))
                        if r.problem)
    if problem:
        return Changes(unreadable=problem)
    out = Changes()
    if old.commit == new.commit and old.worktree == new.worktree and not old.worktree:
        return out
    eo, en = old.entries.get(cid), new.entries.get(cid)
    if eo != en:
        out.entry = (sorted(k for k in JUDGED if (eo or {}).get(k) != (en or {}).get(k))
                     if eo and en else ["new" if en else "gone"])
    to, tn = old.test_code(old_tests), new.test_code(new_tests)
    if sorted(to.values()) != sorted(tn.values()):
        same = set(to.values()) & set(tn.values())
        out.tests = sorted(n for n in set(to) | set(tn) if (to.get(n) or tn.get(n)) not in same)
    out.expectations = old.expectations.get(cid, []) != new.expectations.get(cid, [])
    return out
