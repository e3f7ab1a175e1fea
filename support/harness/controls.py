"""Negative controls: every claim shows that its test fails when its sentence is false.

A *control* is a perturbation of what a claim's sentence is about (the library call, the
data it reads, the environment it runs in) under which the sentence would be false or its
stated figure would move. It is written beside the claim's test and never touches the test's
assertions, the recorder, the tolerance table or the expectations::

    from support.harness.controls import control

    @control("TAPE-07", what="backward overwrites .grad instead of adding to it")
    def backward_overwrites(mp):
        real = torch.Tensor.backward
        def overwrite(self, *args, **kwargs):
            ...                          # zero every leaf's .grad, then the real backward
        mp.setattr(torch.Tensor, "backward", overwrite)

The function receives a ``pytest.MonkeyPatch``; whatever it patches is undone when the test
ends. A **positive control** (``expect="holds"``) is the other way round: a perturbation under
which a sentence the suite finds false (a known fails or drift) becomes true, which must turn
the claim's verdict to holds, so that a "fails" is shown to be a finding of the test and not a
test that cannot pass. A **level control** (``expect="inconclusive"``) sits at the sentence's
own threshold: it makes the two sides of a comparison equal (inference_mode and no_grad doing
the same work, for "slightly faster"), where an honest test can no longer say "holds": the
claim must come out inconclusive, or red; holding under it shows a test that decides on noise. ``scope="test"`` (the default) applies it around each test of the claim (its
function-scoped fixtures included); ``scope="process"`` applies it once, before any test of
a fresh session, in processes of their own with a fresh result cache: for claims whose
figures come from shared results (the concrete experiments, a session fixture), worker
processes or ranks. ``moves=("figure", ...)`` names the figures whose drift counts as the
control turning the claim red, also where another comparison of the claim is left undecided
(the report names a moved figure either way); without it, only a failure does. On a positive
control ``moves`` names the figures it makes true (the known failure's): it is green when each
of them is decided within its bound and tolerance and no variant fails, whatever a figure it
does not aim at says of its stated magnitude (undecided or drifting, listed in its evidence).
JIT-18's control makes fusion what the un-jitted loop lacks; the loop's eager/jit then reads
this machine's op-by-op magnitude against the notes' 2.8, which is no part of what it makes
true. Without ``moves`` the whole verdict must hold.

``python -m support controls`` runs every claim's tests under each of its controls and
reports per control and claim what the verdict became (:func:`outcome`):

* **red**: the claim fails, or drifts on a figure the control names: the test sees it;
* **survived**: the claim still holds (or is partial, or inconclusive): the test cannot see
  what its sentence is about, a defect of the test to fix, never an entry to silence;
* **green** (a positive control): the claim holds under it, as declared (or, where it names
  its figures, each of them holds and nothing fails);
* **stayed red** (a positive control): it still fails or drifts: the test cannot tell the
  sentence made true from the sentence as printed;
* **broken**: the test errored: a crash proves nothing;
* **undecided**: a timing claim came out inconclusive under the control: its trials were
  too disturbed by other work to decide either way (a busy machine), which shows neither
  that the test sees the control nor that it cannot; listed, not counted, never red, and
  on a quiet machine the same control decides;
* **level** (a level control): the claim came out inconclusive (or red) with its two sides
  made equal, as declared; holding under it is **survived**;
* **not run**: the claim's tests did not run here (no GPU), listed, not counted; a
  process-scope control whose every test needs a device absent here (:func:`absent_here`)
  gets no session of its own, only that entry.

The run writes ``controls.json`` (default ``reports/controls/``) and folds its outcomes into
this machine's ledger (:func:`remember`); a claims report written beside it (``reports/``)
marks each claim *controlled* (the last run of every control of it behaved as declared: red,
green for a positive control, level for a level control), *not run this time* (none of its
controls ran: each shown by its last outcome and the run that produced it) or not, and lists
each control's outcome, with the reason the registry gives (``control_reason``) where no
control is possible.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

SCOPES = ("test", "process")
# what a control declares its claim becomes: red (a negative control), holds (a positive
# one), inconclusive (a level control: the comparison's two sides made equal)
EXPECTS = ("red", "holds", "inconclusive")
OUTCOMES = ("red", "green", "level", "survived", "stayed red", "broken", "undecided",
            "not run")
# the outcomes that are what the control declared
AS_DECLARED = ("red", "green", "level")


@dataclass(frozen=True)
class Control:
    name: str
    claims: tuple[str, ...]
    what: str
    apply: Callable = field(repr=False, compare=False)
    scope: str = "test"
    moves: tuple[str, ...] = ()
    module: str = ""
    expect: str = "red"


# every control of the suite, by name (the names are unique across the suite)
CONTROLS: dict[str, Control] = {}


def control(*claims: str, what: str, scope: str = "test", moves: tuple[str, ...] = (),
            name: str | None = None, expect: str = "red"):
    """Register the decorated function as a control of ``claims`` (see the module doc):
    ``expect="red"`` (a negative control), ``"holds"`` (a positive one) or ``"inconclusive"``
    (a level control)."""
    if not claims:
        raise ValueError("a control names the claim(s) it turns red")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
    if expect not in EXPECTS:
        raise ValueError(f"expect must be one of {EXPECTS}, not {expect!r}")
    if not what or not what.strip():
        raise ValueError("a control says in words what it perturbs (what=...)")

    def register(fn):
        key = name or fn.__name__.strip("_").replace("_", "-")
        c = Control(key, tuple(claims), what.strip(), fn, scope, tuple(moves), fn.__module__,
                    expect)
        old = CONTROLS.get(key)
        if old is not None and (old.module, old.claims) != (c.module, c.claims):
            raise ValueError(f"two controls are named {key!r} ({old.module}, {c.module})")
        CONTROLS[key] = c
        return fn

    return register


def for_claims(ids) -> list[Control]:
    """The controls that target any of ``ids``, in registration order."""
    wanted = set(ids)
    return [c for c in CONTROLS.values() if wanted & set(c.claims)]


# --------------------------------------------------------------------------- the verdict rule
def outcome(control: Control, claim: str, variants: list[dict], timing: bool = False
            ) -> tuple[str, str]:
    """What a control made of one claim, from the claim's variants under it (as a claims
    report lists them: verdict, reason, figures with their outcomes): ``(outcome,
    evidence)``, outcome one of :data:`OUTCOMES`. ``timing``: the claim is a timing claim
    (kinds d and e), whose inconclusive means a machine too busy to decide."""
    ran = [v for v in variants if v.get("role", "test") != "benchmark"
           and v.get("verdict") in ("error", "fails", "drift", "inconclusive", "holds")]
    if not ran:
        why = "; ".join(sorted({v.get("reason", "") for v in variants if v.get("reason")}))
        return "not run", why or "its tests did not run"
    errors = [v for v in ran if v["verdict"] == "error"]
    if errors:
        return "broken", _first(errors)
    if control.expect == "holds":
        if control.moves:
            return _positive_on(control.moves, ran, timing)
        return _positive(ran, timing)
    if control.expect == "inconclusive":
        return _level(ran)
    failed = [v for v in ran if v["verdict"] == "fails"]
    if failed:
        return "red", _first(failed)
    drifted = [v for v in ran if v["verdict"] == "drift"]
    # a named figure outside its tolerance is seen even where another comparison of the
    # claim is undecided (the report says it moved): the undecided one cannot hide it
    named = [v for v in ran if v["verdict"] in ("drift", "inconclusive")
             and set(_drifting(v)) & set(control.moves)]
    if named:
        return "red", _first(named)
    # a drift of figures it does not name beside an undecided comparison: the comparison
    # the control aims at is what is left undecided
    undecided = [v for v in ran if v["verdict"] == "inconclusive"
                 or v["verdict"] == "drift" and _open(v)]
    drifted = [v for v in drifted if not _open(v)]
    if drifted:
        return "survived", ("drifts, but on figures the control does not name: "
                            + _first(drifted))
    if timing and undecided and len(undecided) == len(ran):
        return "undecided", ("inconclusive under the control (other work disturbed the "
                             "trials): " + _first(undecided))
    return "survived", "; ".join(f"{v.get('variant') or 'test'}: {v['verdict']}"
                                 for v in ran)


def _positive(ran: list[dict], timing: bool) -> tuple[str, str]:
    """A positive control's outcome: green when every variant that ran holds."""
    off = [v for v in ran if v["verdict"] in ("fails", "drift")]
    if off:
        return "stayed red", _first(off)
    undecided = [v for v in ran if v["verdict"] == "inconclusive"]
    if undecided:
        return ("undecided" if timing else "stayed red"), ("inconclusive under the control: "
                                                           + _first(undecided))
    return "green", "; ".join(f"{v.get('variant') or 'test'}: holds" for v in ran)


def _positive_on(names: tuple[str, ...], ran: list[dict], timing: bool) -> tuple[str, str]:
    """A positive control that names the figures it makes true: green when each of them is
    recorded and decided within wherever it is, and no variant fails; the figures it does not
    name are listed, not judged (a failure among them still counts)."""
    failed = [v for v in ran if v["verdict"] == "fails"]
    if failed:
        return "stayed red", _first(failed)
    got: dict[str, set[str]] = {n: set() for n in names}
    others: list[str] = []
    for v in ran:
        for n, m in (v.get("figures") or {}).items():
            if not isinstance(m, dict) or "outcome" not in m:
                continue
            if n in got:
                got[n].add(m["outcome"])
            elif m["outcome"] != "within":
                others.append(f"{n} {m['outcome']}")
    missing = [n for n, o in got.items() if not o]
    if missing:
        return "stayed red", f"no variant recorded {', '.join(missing)}"
    off = [n for n, o in got.items() if o & {"broken", "outside"}]
    if off:
        return "stayed red", f"{', '.join(off)} still off under the control"
    open_ = [n for n, o in got.items() if "undecided" in o]
    if open_:
        return (("undecided" if timing else "stayed red"),
                f"inconclusive under the control: {', '.join(open_)}")
    besides = f" (not aimed at: {'; '.join(others)})" if others else ""
    return "green", f"{', '.join(names)}: holds{besides}"


def _level(ran: list[dict]) -> tuple[str, str]:
    """A level control's outcome. With the two sides equal, the comparison cannot hold:
    inconclusive is what an honest interval says of them, red (a bound that asks for more than
    equality, decided) is as good. As for a negative control, one variant suffices: the
    control may reach one half of a sentence whose other half, tested apart, still holds."""
    off = [v for v in ran if v["verdict"] in ("fails", "inconclusive")
           or v["verdict"] == "drift" and _open(v)]
    if off:
        return "level", "; ".join(f"{v.get('variant') or 'test'}: {v['verdict']}" for v in off)
    return "survived", ("its comparison still decided with its two sides made equal: "
                        + "; ".join(f"{v.get('variant') or 'test'}: {v['verdict']}" for v in ran))


def landings(control: Control, variants: list[dict], result: str) -> list[dict]:
    """Where the figures that decided ``result`` landed against their lines
    (:func:`support.rules.tolerances.landing`): for red and level, the figures the control
    pushed off (broken; outside or undecided where it names them or is a level control);
    for green, the figures it made hold (those it names, else every judged one). A control
    that lands a figure ``near`` its line resolves the sentence's own scale; one whose every
    landing is far shows only that the test is wired to its subject."""
    from support.rules.tolerances import landing
    if result not in AS_DECLARED:
        return []
    out = []
    for v in variants:
        for name, m in (v.get("figures") or {}).items():
            if not isinstance(m, dict) or "outcome" not in m:
                continue
            named = not control.moves or name in control.moves
            if result == "green":
                chosen = named and m["outcome"] == "within"
            elif result == "level":
                chosen = m["outcome"] != "within"
            else:
                chosen = m["outcome"] == "broken" or named and control.moves and \
                    m["outcome"] in ("outside", "undecided")
            where = landing(m) if chosen else None
            if where is not None:
                out.append({"variant": v.get("variant") or "", "figure": name,
                            "value": m["value"], **({"interval": m["interval"]}
                                                    if m.get("interval") else {}),
                            "outcome": m["outcome"], **where})
    return out


def _open(variant: dict) -> bool:
    """Whether a bound of the variant's qualitative claim was left undecided (a drift beside
    it is reported as drift: a decided figure is never hidden)."""
    return any(isinstance(m, dict) and m.get("outcome") == "undecided"
               and m.get("decided_by") == "bound"
               for m in (variant.get("figures") or {}).values())


def _drifting(variant: dict) -> list[str]:
    return [n for n, m in (variant.get("figures") or {}).items()
            if isinstance(m, dict) and m.get("outcome") == "outside"]


def _first(records: list[dict]) -> str:
    r = records[0]
    tag = f"{r['variant']}: " if r.get("variant") else ""
    return tag + (r.get("reason") or r.get("verdict", ""))


# --------------------------------------------------------------------------- the runner
def discover() -> dict[str, Control]:
    """Every control of the suite: the claim test modules are imported, which registers
    theirs."""
    import importlib

    from support.paths import CLAIMS, ROOT
    for path in sorted(CLAIMS.rglob("test_*.py")):
        importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return dict(CONTROLS)


def absent_here(c: Control) -> str | None:
    """Why no test of ``c``'s claims can run on this machine, every variant of each needing
    a device that is absent (a CPU-vs-GPU claim without a card), or None: its session would
    start only to skip them. Read from the imported tests' marks (:func:`discover` first)."""
    import sys

    from support.machine import devices

    def marked(fn, name):
        return [m for m in getattr(fn, "pytestmark", []) if m.name == name]

    # a benchmark decides nothing, and a controls session does not select its tier
    tests = [fn for name, mod in list(sys.modules.items())
             if name.startswith("claims.") and name.rsplit(".", 1)[-1].startswith("test_")
             for key, fn in vars(mod).items() if key.startswith("test_") and callable(fn)
             and {a for m in marked(fn, "claim") for a in m.args} & set(c.claims)
             and not marked(fn, "bench")]
    reasons = set()
    for fn in tests:
        for needed in devices.variants(fn):
            ok, why = devices.check(needed)
            if ok:
                return None
            reasons.add(why)
    return "; ".join(sorted(reasons)) if tests else None


# the packages of this checkout: a control perturbs the library, never their code
SUITE_PACKAGES = ("support", "claims", "conftest")
# the one place of this repository a control may change: the concrete table as read (its
# class's values), standing for another data file, which the loader would refuse as edited
# (support/lab/perturb.py, read_as): the data a sentence is about, not code a test runs
DATA_TABLE = "support.lab.data.Concrete"


class _Recording:
    """A stand-in for ``pytest.MonkeyPatch`` that applies nothing and keeps what a control
    asks it to change (:func:`suite_patches`)."""

    _NOTSET = object()

    def __init__(self):
        self.asked: list[tuple[str, object, str]] = []

    def setattr(self, target, name=_NOTSET, value=_NOTSET, raising=True):
        if isinstance(target, str) and value is self._NOTSET:
            target, _, name = target.rpartition(".")
        self.asked.append(("setattr", target, str(name)))

    def delattr(self, target, name=_NOTSET, raising=True):
        if isinstance(target, str) and name is self._NOTSET:
            target, _, name = target.rpartition(".")
        self.asked.append(("delattr", target, str(name)))

    def setitem(self, dic, name, value):
        self.asked.append(("setitem", dic, str(name)))

    def delitem(self, dic, name, raising=True):
        self.asked.append(("delitem", dic, str(name)))

    def setenv(self, name, value, prepend=None):
        pass

    def delenv(self, name, raising=True):
        pass

    def syspath_prepend(self, path):
        pass

    def chdir(self, path):
        pass


def _suite_name(target) -> str | None:
    """The name of the module, class or function of this repository ``target`` is, or whose
    code it belongs to; None for anything else (a library's, a builtin)."""
    import types
    if isinstance(target, str):
        name = target
    elif isinstance(target, types.ModuleType):
        name = target.__name__
    elif isinstance(target, (type, types.FunctionType, types.MethodType)):
        name = f"{target.__module__}.{target.__qualname__}"
    else:
        name = f"{type(target).__module__}.{type(target).__qualname__}"
    return name if name.split(".")[0] in SUITE_PACKAGES else None


def suite_patches(c: Control) -> list[str]:
    """What ``c`` changes of this repository's own code: a module of it, or a function or
    class of one, set or deleted (``mp.setattr(experiments, "_jobs", ...)``, the string form
    ``"support.lab.experiments._jobs"``, ``sys.modules[__name__]``), or an item of a mapping
    one of its modules holds. The concrete table (:data:`DATA_TABLE`) is the data, not code.
    The control is run against a recording stand-in: nothing is applied."""
    import sys
    rec = _Recording()
    c.apply(rec)
    out = []
    for how, target, name in rec.asked:
        if how in ("setitem", "delitem"):
            owners = [m for m, mod in list(sys.modules.items())
                      if m.split(".")[0] in SUITE_PACKAGES
                      and any(v is target for v in list(vars(mod).values()))]
            if owners:
                out.append(f"mp.{how}(a mapping of {owners[0]}, {name!r})")
            continue
        where = _suite_name(target)
        if where and where != DATA_TABLE:
            out.append(f"mp.{how}({where}, {name!r})")
    return out


def _pytest(args: list[str], out, env_extra: dict, log) -> tuple[int, dict, float]:
    """One pytest session of the suite (claims only); returns (exit status, report, seconds)."""
    import json
    import os
    import subprocess
    import sys
    import time

    from support.paths import ROOT
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci", **env_extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "claims", "-q", "-p", "no:randomly",
           f"--claims-report={out}", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log.write(f"$ {' '.join(cmd[1:])}  ({wall:.1f} s, exit {proc.returncode})\n")
    log.write(proc.stdout[-20000:] + proc.stderr[-5000:] + "\n")
    report = {}
    if (out / "claims.json").exists():
        report = json.loads((out / "claims.json").read_text())
    return proc.returncode, report, wall


def _variants_under(report: dict, name: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for c in report.get("claims", []):
        for v in c.get("variants") or []:
            if name in (v.get("control") or "").split(","):
                out.setdefault(c["id"], []).append(v)
    return out


def evaluate(c: Control, report: dict, seconds: float, how: str, registry: dict) -> dict:
    """One control's entry of ``controls.json``: its outcome for each of its claims, from the
    claims ``report`` of the session that ran it (``how``: test-scope or process)."""
    under = _variants_under(report, c.name)
    results = {}
    for cid in c.claims:
        timing = cid in registry and registry[cid].kind in ("d", "e")
        res, evidence = outcome(c, cid, under.get(cid, []), timing)
        if not report:
            res, evidence = "broken", f"the {how} session wrote no claims report (see the log)"
        results[cid] = {"outcome": res, "evidence": evidence[:600]}
        landed = landings(c, under.get(cid, []), res)
        if landed:
            results[cid]["landings"] = landed
            results[cid]["near"] = any(x["near"] for x in landed)
    return {"name": c.name, "what": c.what, "scope": c.scope, "module": c.module,
            "claims": list(c.claims), "moves": list(c.moves), "expect": c.expect,
            "seconds": round(seconds, 1), "run": how, "results": results}


def count(results: list[dict]) -> dict[str, int]:
    """How many control x claim results had each outcome."""
    counts: dict[str, int] = {}
    for r in results:
        for res in r["results"].values():
            counts[res["outcome"]] = counts.get(res["outcome"], 0) + 1
    return counts


def as_declared(counts: dict[str, int]) -> bool:
    """No control survived, stayed red or broke (undecided and not run are listed, not
    counted): what fails a controls run."""
    return not (counts.get("survived") or counts.get("stayed red") or counts.get("broken"))


# the claims whose sentences set a threshold of their own: statistical outcomes (c), timings
# (d) and the device comparisons (e); a control of theirs should land near it
SCALED_KINDS = ("c", "d", "e")


def summarise(controls: list[dict], registry: dict, baseline: dict | None,
              known: dict[str, list[str]] | None = None, ledger: dict | None = None,
              left: tuple[str, ...] = ()) -> dict:
    """Per claim: its controls and whether they turned it red (``controlled``), or why not.

    ``known``: claim -> the names of every control written for it (those this run left to a
    later rotation, ``left``, included); ``ledger``: the last outcome of each control and
    claim on this machine (:func:`remember`). A control that did not run this time is judged by its last
    outcome, shown with the run (commit, date) that produced it: ``uncontrolled`` means no
    control exists or the last ones did not do as declared, never that they did not run this
    time (``not run this time``)."""
    verdicts = {c["id"]: c["verdict"] for c in (baseline or {}).get("claims", [])}
    known, ledger = known or {}, ledger or {}
    out = {}
    for cid, claim in sorted(registry.items()):
        if claim.kind == "h" or claim.status != "testable":
            continue
        mine = [c for c in controls if cid in c["results"]]
        ran = {c["name"]: c["results"][cid] for c in mine
               if c["results"][cid]["outcome"] != "not run"}
        why_not = {c["name"]: c["results"][cid].get("evidence", "") for c in mine
                   if c["name"] not in ran}
        names = list(dict.fromkeys([c["name"] for c in mine] + list(known.get(cid, ()))))
        earlier = {}
        for name in names:
            if name in ran:
                continue
            last = (ledger.get(name) or {}).get(cid)
            earlier[name] = ({k: last[k] for k in ("outcome", "commit", "date") if k in last}
                             if last else {"outcome": None})
            earlier[name]["why"] = why_not.get(name) or (
                "left to a later rotation" if name in left else "not selected in this run")
        seen = [r["outcome"] for r in ran.values()]
        latest = seen + [e["outcome"] for e in earlier.values() if e["outcome"]]
        # controlled only when the last run of every control did what it declared
        if "survived" in latest or "stayed red" in latest:
            state = "survived"
        elif "broken" in latest:
            state = "broken"
        elif any(o in AS_DECLARED for o in seen):
            state = "controlled"
        elif "undecided" in seen:
            state = "undecided"
        elif names:
            from support.reports.report import NOT_RUN_THIS_TIME as state
        else:
            state = "uncontrolled"
        entry = {"state": state, "controls": names,
                 "outcomes": {n: r["outcome"] for n, r in ran.items()}}
        if earlier:
            entry["not_run_this_time"] = earlier
        judged = list(ran.values()) + [ledger[n][cid] for n in earlier
                                       if cid in (ledger.get(n) or {})]
        if state not in ("survived", "broken", "undecided", "uncontrolled") \
                and claim.kind[0] in SCALED_KINDS and judged:
            entry["scale"] = scale(judged)
        if claim.control_reason:
            entry["reason"] = claim.control_reason
        if cid in verdicts:
            entry["verdict_without_control"] = verdicts[cid]
        out[cid] = entry
    return out


LEDGER = "controls-ledger.json"


def ledger_file():
    """This machine's ledger of control outcomes (the user cache), read by every controls
    run for the controls it leaves to a later rotation."""
    from support.lab.data import cache_dir
    return cache_dir() / LEDGER


def read_ledger(path=None) -> dict:
    """control name -> claim -> its last outcome that ran (outcome, evidence, near, commit,
    date); an unreadable or absent ledger is an empty one."""
    import json
    path = path or ledger_file()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("controls", {}) if isinstance(data, dict) else {}


def remember(results: list[dict], commit: str, date: str, path=None) -> dict:
    """Fold this run's outcomes into the ledger (a control that did not run keeps its last
    outcome), written whole and atomically; returns the ledger. A cache that cannot be
    written is left as it was."""
    import json
    import os
    path = path or ledger_file()
    data = read_ledger(path)
    for r in results:
        for cid, res in r["results"].items():
            if res["outcome"] == "not run":
                continue
            kept = {"outcome": res["outcome"], "evidence": res["evidence"][:300],
                    "commit": commit, "date": date}
            if "near" in res:
                kept["near"] = res["near"]
            data.setdefault(r["name"], {})[cid] = kept
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{LEDGER}.{os.getpid()}")
        tmp.write_text(json.dumps({"schema": 1, "controls": data}, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
    return data


def known_controls(found: dict[str, Control]) -> dict[str, list[str]]:
    """claim -> the names of every control written for it."""
    out: dict[str, list[str]] = {}
    for c in found.values():
        for cid in c.claims:
            out.setdefault(cid, []).append(c.name)
    return out


def scale(results: list[dict]) -> str:
    """Whether a claim's controls that did as declared resolved its own scale: ``near`` when
    one of them landed a figure near its line (:func:`landings`), ``far`` when each that
    measured a landing landed far, ``unmeasured`` when none did (red through an assertion or
    a yes-or-no figure, whose line has no scale)."""
    near = [r["near"] for r in results if r["outcome"] in AS_DECLARED and "near" in r]
    if any(near):
        return "near"
    return "far" if near else "unmeasured"


def scale_summary(summary: dict) -> dict[str, list[str]]:
    """The claims :func:`summarise` gave a scale (controlled, of :data:`SCALED_KINDS`) by
    :func:`scale`, but those found to fail or drift without a control (where the claims
    report says so): a negative control of a failing claim is red by construction, its
    positive control is the one that tells."""
    out: dict[str, list[str]] = {"near": [], "far": [], "unmeasured": []}
    for cid, e in summary.items():
        if e.get("verdict_without_control") in ("fails", "drift"):
            continue
        if e.get("scale"):
            out[e["scale"]].append(cid)
    return out


def annotate(report: dict, controls_report: dict) -> dict:
    """A claims report with each claim's control state from a controls run."""
    per = controls_report.get("claims", {})
    for c in report.get("claims", []):
        if c["id"] in per:
            c["control"] = {**per[c["id"]], "run": controls_report.get("suite_commit")}
    report["controls"] = {k: controls_report.get(k) for k in
                          ("suite_commit", "date", "wall_s", "counts", "rotation")}
    return report


def arguments(command: str, parser) -> None:
    from pathlib import Path

    from support.paths import REPORTS
    parser.add_argument("--claim", action="append", default=[], metavar="ID",
                        help="only the controls of this claim (repeatable)")
    parser.add_argument("--out", type=Path, default=REPORTS / "controls",
                        help="where controls.json and the sessions' logs go (default "
                             "reports/controls)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the process-scope controls (each a session of its "
                             "own): those that do not fit are left for a later run, starting "
                             "elsewhere in the list each commit (recorded); default: all")
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers, -n (default "
                        "auto: every core up to four, as the test command)")
    parser.add_argument("--report", type=Path, default=REPORTS / "claims.json",
                        help="the claims report to mark controlled/uncontrolled and take the "
                             "verdicts without controls from (default reports/claims.json)")


def run(command: str, args) -> int:
    import datetime as dt
    import json
    import shutil
    import tempfile
    import time

    from support.machine import fingerprint
    from support.machine.environment import git_commit
    from support.rules import registry as reg

    registry = reg.load_registry()
    found = discover()
    bad = [c for c in args.claim if c not in registry]
    if bad:
        print(f"controls: unknown claim(s) {', '.join(bad)}")
        return 2
    chosen = [c for c in found.values()
              if not args.claim or set(args.claim) & set(c.claims)]
    tests = [c for c in chosen if c.scope == "test"]
    procs = [c for c in chosen if c.scope == "process"]
    commit = git_commit() or ""
    # the rotation: process controls from an offset the commit decides, as many as fit
    start = int(commit[:8], 16) % len(procs) if procs and commit[:8].isalnum() else 0
    ordered = procs[start:] + procs[:start]
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    t0 = time.monotonic()
    results: list[dict] = []
    with open(args.out / "sessions.log", "w") as log:
        if tests:
            wanted = sorted({cid for c in tests for cid in c.claims})
            claim_args = [f"--claim={cid}" for cid in wanted]
            _, rep, wall = _pytest(["-n", args.workers, "--controls", *claim_args],
                                   args.out / "test-scope", {}, log)
            for c in tests:
                results.append(evaluate(c, rep, wall / max(1, len(tests)), "test-scope", registry))
            print(f"controls: {len(tests)} test-scope controls in one session, {wall:.0f} s")
        left = []
        for c in ordered:
            absent = absent_here(c)
            if absent:
                # listed as not run, as a session of its own would say, without its start-up
                skipped = {"verdict": "skipped", "reason": absent, "control": c.name}
                results.append(evaluate(c, {"claims": [{"id": cid, "variants": [skipped]}
                                                       for cid in c.claims]},
                                        0.0, "process", registry))
                print(f"controls: {c.name} not run here: {absent}")
                continue
            spent = time.monotonic() - t0
            if args.budget_s is not None and results and spent > args.budget_s:
                left.append(c.name)
                continue
            with tempfile.TemporaryDirectory(prefix="claims-control-cache-") as cache:
                _, rep, wall = _pytest(["-n", args.workers, "--fresh", f"--control={c.name}",
                                        *[f"--claim={cid}" for cid in c.claims]],
                                       args.out / c.name, {"LECTURE11_CACHE": cache}, log)
            results.append(evaluate(c, rep, wall, "process", registry))
            print(f"controls: {c.name} ({', '.join(c.claims)}), its own session, {wall:.0f} s")
    baseline = json.loads(args.report.read_text()) if args.report.is_file() else None
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    # what ran now joins this machine's ledger; what did not is judged by its last outcome
    ledger = remember(results, commit, date)
    summary = summarise(results, registry, baseline, known_controls(found), ledger,
                        tuple(left))
    counts = count(results)
    wall = time.monotonic() - t0
    data = {"schema": 1, "suite_commit": commit, "date": date,
            "environment": fingerprint.label(baseline["environment"]) if baseline else None,
            "wall_s": round(wall, 1), "counts": counts,
            "rotation": {"process_controls": len(procs), "start": start,
                         "ran": [c.name for c in ordered if c.name not in left],
                         "left_for_later": left},
            "controls": results, "claims": summary}
    data["scale"] = scale_summary(summary)
    (args.out / "controls.json").write_text(json.dumps(data, indent=1))
    for r in results:
        for cid, res in r["results"].items():
            if res["outcome"] not in AS_DECLARED:
                print(f"  {res['outcome'].upper():<9} {r['name']} -> {cid}: {res['evidence'][:300]}")
    states: dict[str, int] = {}
    for e in summary.values():
        states[e["state"]] = states.get(e["state"], 0) + 1
    print(f"controls: {sum(counts.values())} control x claim results in {wall:.0f} s: "
          + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
          + "; claims: " + ", ".join(f"{k} {n}" for k, n in sorted(states.items()))
          + (f"; {len(left)} process controls left for a later run" if left else ""))
    sc = data["scale"]
    print(f"controls: claims of kinds {', '.join(SCALED_KINDS)} controlled at their own scale "
          f"(a figure landed within a factor 2 of its line) {len(sc['near'])}"
          + "".join(f"; {k} {len(v)}: {' '.join(v)}" for k, v in sc.items()
                    if k != "near" and v))
    if baseline is not None and not args.claim:
        from support.reports import report
        report.write(annotate(baseline, data), args.report.parent)
    print(f"controls: {args.out / 'controls.json'}")
    return 0 if as_declared(counts) else 1
