"""Negative controls: every claim shows that its test fails when its sentence is false.

A *control* is a perturbation of what a claim's sentence is about (the library call, the
data it reads, the environment it runs in) under which the sentence would be false or its
stated figure would move. It is written beside the claim's test and never touches the test's
assertions, the recorder, the tolerance table or the expectations::

    from support.rules.controls import control

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

What the outcomes add up to for each claim (controlled or not, at its own scale or not) and
this machine's ledger of the last outcome of each control are
:mod:`support.rules.control_summary`'s; the runner that starts the sessions is
:mod:`support.commands.control_runner`'s, the pytest wiring :mod:`support.harness.control_options`'s.
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


# --------------------------------------------------------------------------- one session judged
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


# --------------------------------------------------------------------------- what a control changes
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
