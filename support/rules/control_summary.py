"""What a claim's controls add up to: controlled or why not, and at its own scale or not.

:func:`summarise` gives each claim a state from its controls' outcomes
(:func:`support.rules.controls.outcome`): *controlled* (the last run of every control of it
did what it declares: red, green for a positive control, level for a level control),
*survived* or *broken* (one did not), *undecided* (a timing claim too disturbed to decide),
*not run this time* (none of its controls ran here now: each is shown by its last outcome and
the run that produced it) or *uncontrolled* (no control exists, or the last run of one did not
do as declared). The last outcomes come from this machine's **ledger** (:func:`remember`,
:func:`read_ledger`: a JSON file in the user cache, which every controls run folds its
outcomes into). :func:`scale` says whether a claim whose sentence sets a threshold of its own
was controlled at that threshold (a control landed a figure near its line), and
:func:`annotate` marks a claims report with each claim's state. :func:`negative_gaps` and
:func:`positive_gaps` say what a claim lacks of its controls (the lints and ``check-claim``
apply them).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from support.rules import scaffold
from support.rules.controls import AS_DECLARED, Control
from support.rules.entries import version_mismatch

# a claim none of whose controls ran in this run: judged by their last outcomes, never
# uncontrolled for that
NOT_RUN_THIS_TIME = "not run this time"
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
            state = NOT_RUN_THIS_TIME
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


# --------------------------------------------------------------------------- the gaps
def known_red(cid: str, expectations) -> bool:
    """Whether the claim is a known fails or drift in every variant with the installed
    versions: nothing a negative control could turn red."""
    return any(e.id == cid and e.verdict in ("fails", "drift") and not e.variant and e.applies("")
               for e in expectations)


def negative_gaps(claim, controls, expectations) -> list[str]:
    """What the claim lacks of its negative control: one that names it and perturbs something,
    or its entry's ``control_reason``, or a known fails or drift everywhere (nothing to turn
    red). ``controls``: objects with ``name``, ``claims``, ``expect``, ``what`` (and ``empty``
    where read from the source: support.rules.sources.static_controls)."""
    mine = [c for c in controls if claim.id in c.claims]
    out = [f"control {c.name} perturbs nothing yet (new-claim's stub): patch the library "
           "so that the sentence is false" for c in mine if getattr(c, "empty", False)]
    out += [f"control {c.name}: say in words what it perturbs (what=...)" for c in mine
            if c.what == scaffold.STUB_WHAT or len(c.what.split()) < 4]
    if claim.kind in tuple("abcdefg") and not any(c.expect == "red" for c in mine) \
            and not claim.control_reason and not known_red(claim.id, expectations):
        out.append("no negative control names it (@control(ID, what=...) beside its test), and "
                   "its entry gives no control_reason")
    if claim.control_reason and len(claim.control_reason.split()) < 6:
        out.append("control_reason: say why in a sentence")
    return out


def positive_gaps(claim, controls, expectations) -> list[str]:
    """What a claim known to fail or drift with the installed versions lacks: a positive
    control (``expect="holds"``: a perturbation under which its sentence is true), or its
    entry's ``positive_reason`` in a sentence or two."""
    known = any(e.id == claim.id and e.verdict in ("fails", "drift")
                and version_mismatch(e.versions) is None for e in expectations)
    if not known or any(c.expect == "holds" and claim.id in c.claims for c in controls):
        return []
    if not claim.positive_reason:
        return ["a known fails or drift with no positive control (expect=\"holds\") and no "
                "positive_reason"]
    if len(claim.positive_reason.split()) < 12:
        return ["positive_reason: say why in a sentence or two"]
    return []


# --------------------------------------------------------------------------- the ledger
# its file's name, in the user cache beside the durations
LEDGER = "controls-ledger.json"


def read_ledger(path: Path) -> dict:
    """control name -> claim -> its last outcome that ran (outcome, evidence, near, commit,
    date); an unreadable or absent ledger is an empty one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("controls", {}) if isinstance(data, dict) else {}


def remember(results: list[dict], commit: str, date: str, path: Path) -> dict:
    """Fold this run's outcomes into the ledger at ``path`` (a control that did not run keeps
    its last outcome), written whole and atomically; returns the ledger. A cache that cannot
    be written is left as it was."""
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
    one of them landed a figure near its line (:func:`support.rules.controls.landings`), ``far`` when each that
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
