"""What a claims report says of each claim's negative controls: the words beside a holding
claim's verdict (controlled, by which controls, or why not; a control that did not run this
time by its last outcome) and the report's section on the last controls run. The outcomes
themselves are support/rules/control_summary.py's."""
from __future__ import annotations

from support.rules.control_summary import NOT_RUN_THIS_TIME

# the verdicts whose "holds" a control must back (a claim that fails or drifts needs none)
CONTROLLED_VERDICTS = ("holds", "partial", "inconclusive")


def control_text(e: dict) -> str:
    """ " · controlled (NAME)" / " · uncontrolled: why" for a claim that holds, from the
    last controls run (support/rules/control_summary.py); a control that did not run in it is
    shown by its last outcome and the run (commit, date) that produced it. "" where that
    does not apply."""
    c = e.get("control")
    if e.get("verdict") not in CONTROLLED_VERDICTS or c is None:
        return ""
    later = earlier_text(c.get("not_run_this_time") or {})
    if c["state"] == "controlled":
        far = ("; every figure its controls moved landed far past its line, none at the "
               "sentence's own scale") if c.get("scale") == "far" else ""
        ran = [n for n in c["controls"] if n in (c.get("outcomes") or {})]
        return f" · controlled ({', '.join(ran)}{far})" + (
            f"; not run this time: {later}" if later else "")
    if c["state"] == NOT_RUN_THIS_TIME:
        return f" · {NOT_RUN_THIS_TIME}: {later}"
    why = c.get("reason") or {"uncontrolled": "no control written",
                              "survived": "a control survived: the test cannot see it",
                              "broken": "its control broke the test",
                              "undecided": "its control's run was too disturbed by other work "
                                           "to decide (a busy machine)"}.get(c["state"], "")
    return f" · uncontrolled: {why}" + (f"; not run this time: {later}" if later else "")


def earlier_text(earlier: dict) -> str:
    """The controls that did not run this time, each by its last outcome and the run that
    produced it ("name: red at 3c3a40b0, 2026-12-01"), or why there is none."""
    parts = []
    for name, e in earlier.items():
        if e.get("outcome"):
            parts.append(f"{name}: last {e['outcome']} at {str(e.get('commit') or '?')[:8]}, "
                         f"{str(e.get('date') or '?')[:10]}")
        else:
            parts.append(f"{name}: {e.get('why') or 'not run'}, no earlier outcome recorded "
                         "on this machine")
    return "; ".join(parts)


def controls_lines(data: dict) -> list[str]:
    """What the last negative-controls run says of this run's holding claims."""
    run = data.get("controls")
    if not run:
        return ["controls: no negative-controls run beside this report "
                "(python -m support controls marks each holding claim controlled or not)"]
    held = [e for e in data["claims"] if e.get("verdict") in CONTROLLED_VERDICTS]
    state = {}
    for e in held:
        s = (e.get("control") or {}).get("state", "uncontrolled")
        state.setdefault(s, []).append(e["id"])
    n = len(state.get("controlled", []))
    head = (f"controls (run at {str(run.get('suite_commit') or '?')[:12]}, "
            f"{run.get('wall_s', '?')} s): {n} of {len(held)} claims that hold, are partial or "
            f"inconclusive are controlled (the last run of every control of theirs did what "
            f"it declares: red, green or level)")
    out = [head]
    for s in (NOT_RUN_THIS_TIME, "survived", "broken", "undecided", "uncontrolled"):
        if state.get(s):
            what = (f"{s} (judged by their last outcomes, in the claims report)"
                    if s == NOT_RUN_THIS_TIME else s)
            out.append(f"  {what}: {', '.join(sorted(state[s]))}")
    far = sorted(e["id"] for e in held if (e.get("control") or {}).get("scale") == "far")
    if far:
        out.append("  controlled only far past their lines (no control at the sentence's own "
                   f"scale): {', '.join(far)}")
    return out
