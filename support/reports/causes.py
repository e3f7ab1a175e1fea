"""Why a claim changed between two runs: a release, the suite, the machine, or unexplained.

``diff`` finds what changed (support/reports/diff.py); this module says, for each change, what
differs between the two runs that explains it, from the evidence the two reports carry and
the suite at their two commits (support/reports/revisions.py). In this order:

1. **the suite**: the rule a figure was judged by differs between the reports (its entry's
   stated value, tolerance or bounds, or the tolerance table), the entry's fields that
   decide this kind of change differ (its kind, the variants it requires, where it applies),
   the test records other figures, the same variants and outcomes give another verdict (the
   verdict rules), or its known failures changed between the two commits. Which one is
   said. A change in the test's code alone is weighed after a release (4.): a test the
   suite rewrote over many commits usually measures what it measured, and both are said.
2. **the machine**: a fact of the machine differs (the CPU, its vector level, NumPy's argsort
   dispatch, the BLAS kernels, the cores, the accelerators: support/machine/fingerprint.py,
   ``MACHINE``) and the claim is known to follow it: its entry says so (``machine = [...]``,
   AD-13's rounding-level figures follow the CPU's kernels), its variant is named by that
   fact (STORY-17's ``numpy_argsort_AVX2``), or it is a timing or device claim (kinds d and
   e).
3. **a release**: a package under test differs in version (torch, JAX, optax, NumPy,
   scikit-learn, ...; the tools that run the tests, ``TOOLS``, are not under test), or
   the Python, and the entry and the rules of the figures involved did not change.
4. **the suite** again, when only its test changed.
5. **unexplained**: nothing recorded explains it (a timing that moved with the machine's
   load, a machine fact the claim is not known to follow, a commit that cannot be read).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from support.machine import fingerprint
from support.reports import revisions, runs

CAUSES = ("release", "suite", "machine", "unexplained")
# packages that run the tests rather than being tested: their versions explain no verdict
TOOLS = ("pytest", "pytest-benchmark", "pytest-xdist", "pytest-timeout", "pytest-random-order",
         "hypothesis")
# the changes of a claim's verdict (diff.COUNTED)
VERDICT_ROWS = ("verdict changed", "became partial", "no longer partial")
# the fields of an entry that decide each kind of change, besides its figures' rules: the
# kind (how a verdict is read), the variants it requires (partial), where it applies
# (kind and requires are in every report; where it applies, and whether the claim exists,
# are read from the commits)
REPORTED = ("kind", "requires")
ENTRY_DECIDES = {
    "verdict changed": ("kind", "new", "gone"),
    "became partial": ("requires",), "no longer partial": ("requires",),
    "became not-applicable": ("applies",), "no longer not-applicable": ("applies",),
}


@dataclass(frozen=True)
class Cause:
    kind: str          # one of CAUSES
    why: str           # one line: what differs

    def text(self) -> str:
        return f"{self.kind}: {self.why}"


# --------------------------------------------------------------------------- the two runs
def _public(v: str) -> str:
    try:
        return Version(v).public
    except InvalidVersion:
        return v


def releases(old: runs.Run, new: runs.Run) -> list[str]:
    """The packages under test (and the Python) whose versions differ, "jax 0.4.38 ->
    0.10.2"; another build of the same release is said as such."""
    vo, vn = old.env.get("versions") or {}, new.env.get("versions") or {}
    out = []
    if old.env.get("python") and new.env.get("python") and \
            old.env["python"] != new.env["python"]:
        out.append(f"Python {old.env['python']} -> {new.env['python']}")
    for k in dict.fromkeys([*vo, *vn]):
        a, b = vo.get(k), vn.get(k)
        if k in TOOLS or a == b or not (a and b):
            continue
        build = " (another build of the same release)" if _public(a) == _public(b) else ""
        out.append(f"{k} {a} -> {b}{build}")
    return out


def tools(old: runs.Run, new: runs.Run) -> list[str]:
    vo, vn = old.env.get("versions") or {}, new.env.get("versions") or {}
    return [f"{k} {vo[k]} -> {vn[k]}" for k in TOOLS
            if vo.get(k) and vn.get(k) and vo[k] != vn[k]]


def machine(old: runs.Run, new: runs.Run) -> dict[str, tuple[str, str]]:
    """{fact: (OLD's, NEW's)} for the machine facts that differ (both recorded)."""
    fo, fn = fingerprint.machine_facts(old.env), fingerprint.machine_facts(new.env)
    return {k: (fo[k], fn[k]) for k in fo if fo[k] and fn[k] and fo[k] != fn[k]}


class Context:
    """What differs between two runs, computed once for all their changes."""

    def __init__(self, old: runs.Run, new: runs.Run):
        self.old, self.new = old, new
        self.releases = releases(old, new)
        self.tools = tools(old, new)
        self.machine = machine(old, new)
        fo, fn = fingerprint.machine_facts(old.env), fingerprint.machine_facts(new.env)
        self.unrecorded = {k: "OLD" if not fo[k] else "NEW" for k in fo
                           if bool(fo[k]) != bool(fn[k])}
        self.revisions = (revisions.at(old.env.get("suite_commit")),
                          revisions.at(new.env.get("suite_commit")))
        self._changes: dict[str, revisions.Changes] = {}
        self.entries = todays_entries()
        self.declared = {cid: list(e.machine) for cid, e in self.entries.items() if e.machine}
        # a commit git does not have cannot be compared; one that ran with uncommitted
        # changes (not this checkout's own) is compared as committed, and said so
        self.unreadable = "; ".join(f"{which}: {r.problem}" for which, r in
                                    zip(("OLD", "NEW"), self.revisions) if r.problem)
        dirty = [which for which, r in zip(("OLD", "NEW"), self.revisions)
                 if r.dirty and not r.worktree and not r.problem]
        self.caveat = (f" ({' and '.join(dirty)} ran with uncommitted changes: compared as "
                       "committed)") if dirty else ""

    def suite(self, cid: str) -> revisions.Changes:
        if cid not in self._changes:
            co, cn = self.old.claims.get(cid) or {}, self.new.claims.get(cid) or {}
            self._changes[cid] = revisions.changes(*self.revisions, cid, co.get("tests", []),
                                                   cn.get("tests", []))
        return self._changes[cid]


def todays_entries(directory=None) -> dict:
    """{claim id: its entry} from this checkout's claims, read once per comparison: the
    machine facts an entry says its figures follow and what it knows moves it between
    releases (``version_note``) apply to runs written before either was recorded. Empty
    where the entries cannot be read (a diff outside a checkout)."""
    from support.rules.entries import ENTRIES_DIR, EntryError, load_entries
    try:
        return load_entries(directory or ENTRIES_DIR)
    except (EntryError, OSError):
        return {}


# --------------------------------------------------------------------------- one change
def _rule(m: dict | None):
    """What judged a figure, comparable across report schemas: the stated value, the
    tolerance (without its words) and the bounds; None where the figure is not judged."""
    if not isinstance(m, dict) or not ("stated" in m or "bound" in m or "tolerance" in m):
        return None
    tol = m.get("tolerance")
    tol = {k: v for k, v in tol.items() if k not in ("text", "why")} if isinstance(tol, dict) \
        else tol
    bounds = m.get("bound") or []
    return json.dumps([str(m.get("stated")), m.get("reference", False), tol,
                       [bounds] if isinstance(bounds, str) else bounds], sort_keys=True)


def _rule_text(m: dict) -> str:
    return m.get("rule") or (f"stated {m.get('stated')} "
                             f"({(m.get('tolerance') or {}).get('text', '?')})")


def _involved(row: dict, co: dict, cn: dict) -> list[str]:
    """The figures a change is about: its own, or, for a verdict, those whose outcome
    differs between the runs (else those that miss their rule in either)."""
    if row.get("figure"):
        return [row["figure"]]
    fo, fn = runs._figures(co), runs._figures(cn)
    names = sorted(set(fo) | set(fn))
    moved = [n for n in names if runs._outcome(fo.get(n) or {}) != runs._outcome(fn.get(n) or {})]
    return moved or [n for n in names if runs._outcome(fo.get(n) or {}) not in (None, "within")
                     or runs._outcome(fn.get(n) or {}) not in (None, "within")]


def _variants(claim: dict) -> dict[str, dict]:
    return {v.get("variant") or "": v for v in claim.get("variants", [])}


def _named_by_machine(co: dict, cn: dict, differ: dict) -> str:
    """"numpy argsort (int64) AVX2 -> AVX512_SKX" where the claim's variants differ between
    the runs and name the machine fact that differs (each run's in its own variants)."""
    vo, vn = set(_variants(co)) - set(_variants(cn)), set(_variants(cn)) - set(_variants(co))
    for fact, (a, b) in differ.items():
        if vo and vn and all(a in v for v in vo) and all(b in v for v in vn):
            return f"its variants are named by the machine's {fact}: {a} -> {b}"
    return ""


def _verdict_rules(co: dict, cn: dict) -> str:
    """The same variants measured the same outcomes, yet the verdict differs: the rules that
    turn outcomes into verdicts changed (support/rules/verdicts.py)."""
    vo, vn = _variants(co), _variants(cn)
    if not vo or set(vo) != set(vn):
        return ""
    def outcomes(v):
        return {n: runs._outcome(m) for n, m in (v.get("figures") or {}).items()}
    if all(vo[k].get("verdict") == vn[k].get("verdict") for k in vo):
        return "the same variants' verdicts make another claim verdict (support/rules/verdicts.py)"
    if all(outcomes(vo[k]) == outcomes(vn[k]) and bool(vo[k].get("reason")) ==
           bool(vn[k].get("reason")) and outcomes(vo[k]) for k in vo):
        return "the same figures' outcomes make another verdict (support/rules/verdicts.py)"
    return ""


def _timing(co: dict, cn: dict) -> bool:
    """A timing or device claim: its figures follow the machine and its load."""
    return any(c.get("kind") in ("d", "e") for c in (co, cn))


def attribute(row: dict, ctx: Context) -> Cause:
    """The cause of one change (a row of ``diff.compare``)."""
    cid = row["id"]
    co, cn = ctx.old.claims.get(cid) or {}, ctx.new.claims.get(cid) or {}
    fo, fn = runs._figures(co), runs._figures(cn)
    involved = _involved(row, co, cn)
    # 1. the judgement changed, as the two reports show it
    for name in involved:
        ro, rn = _rule(fo.get(name)), _rule(fn.get(name))
        if ro and rn and ro != rn:
            return Cause("suite", f"the rule of {name!r} changed: {_rule_text(fo[name])} -> "
                         f"{_rule_text(fn[name])}")
    suite = ctx.suite(cid)
    # the fields of its entry that decide this kind of change, as the reports recorded them
    # (its kind, the variants it requires), or from the commits (where it applies)
    whole = [f for f in ENTRY_DECIDES.get(row["what"], ())
             if ((co.get(f) or None) != (cn.get(f) or None) if f in REPORTED
                 else f in suite.entry)]
    if whole:
        return Cause("suite", f"its entry changed ({', '.join(whole)})" +
                     ("" if set(whole) <= set(REPORTED) else ctx.caveat))
    named = _named_by_machine(co, cn, ctx.machine)
    only = [n for n in involved if (n in fo) != (n in fn)]
    if only and not named:
        return Cause("suite", "the test records other figures than before: "
                     + ", ".join(f"{n!r} ({'OLD' if n in fo else 'NEW'} only)" for n in only[:3]))
    rules = _verdict_rules(co, cn) if row["what"] in VERDICT_ROWS and \
        co.get("verdict") != cn.get("verdict") else ""
    if rules:
        return Cause("suite", rules)
    if suite.expectations and row["what"] == "expectation changed":
        return Cause("suite", "its known failures (claims/expectations.toml) changed between "
                     "the commits" + ctx.caveat)
    # 2. the machine
    if named:
        return Cause("machine", named)
    declared = cn.get("machine") or co.get("machine") or ctx.declared.get(cid, [])
    follows = {f: ctx.machine[f] for f in declared if f in ctx.machine}
    if follows:
        return Cause("machine", "its figures follow the machine's " + _facts(follows))
    unrecorded = [f for f in declared if f in ctx.unrecorded]
    if unrecorded and "cpu" in ctx.machine:
        return Cause("machine", f"its figures follow the machine's {', '.join(unrecorded)} "
                     f"(not recorded in {ctx.unrecorded[unrecorded[0]]}), and the CPU differs: "
                     + _facts({"cpu": ctx.machine["cpu"]}))
    if ctx.machine and _timing(co, cn):
        return Cause("machine", "a timing or device claim, and the machine differs: "
                     + _facts(ctx.machine))
    # 3. a release
    also = (f"; its test also changed between the commits ({', '.join(suite.tests[:2])})"
            f"{ctx.caveat}" if suite.tests else
            f"; its test cannot be compared ({ctx.unreadable})" if ctx.unreadable else "")
    if ctx.releases:
        # the packages the test's own code imports first; where it names none (it measures
        # through the suite's helpers), every one that differs
        used = revisions.packages(ctx.revisions[1], cn.get("tests", []))
        mine = [r for r in ctx.releases if r.split()[0] in used]
        if not [r for r in mine if not r.startswith("Python ")]:
            mine = ctx.releases
        rest = len(ctx.releases) - len(mine)
        return Cause("release", ", ".join(mine) + (f" (and {rest} other package"
                                                   f"{'s' if rest > 1 else ''})" if rest else "")
                     + also)
    # 4. the suite's test alone
    if suite.tests:
        return Cause("suite", f"its test changed between the commits "
                     f"({', '.join(suite.tests[:3])}){ctx.caveat}")
    # 5. nothing recorded explains it
    why = []
    if _timing(co, cn) or row.get("timing"):
        why.append("a timing or an undecided comparison: it moves with the machine's load")
    if ctx.machine:
        why.append("the machine differs (" + _facts(ctx.machine) + "), which this claim is "
                   "not known to follow (its entry's machine = [...])")
    if ctx.unreadable:
        why.append(f"its test cannot be compared ({ctx.unreadable})")
    if ctx.tools:
        why.append("only the test tools' versions differ (" + ", ".join(ctx.tools) + ")")
    return Cause("unexplained", "; ".join(why) or "the versions, the suite and the machine "
                 "are the same")


def _facts(differ: dict) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in differ.items())


def suite_line(ctx: Context) -> str:
    """The two suite commits, as the environment section shows them."""
    o, n = ctx.revisions
    return f"{o.describe()} -> {n.describe()}"
