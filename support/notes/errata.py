"""The errata: every claim the run did not find to hold as printed, in the notes' own terms.

For each claim whose verdict is fails, drift, partial or inconclusive: the document and line
of its sentence, its ID, what the notes state, what was measured (rounded to the precision
the notes print the figure with), the environment of the run and the reason. This is the
list a lecturer pastes into the next revision of the notes.
"""
from __future__ import annotations

import math
import re

from support.machine import fingerprint
from support.spec import tolerances
from support.spec.formatting import fmt, md_cell

ERRATA = ("fails", "drift", "partial", "inconclusive")
_EXP = re.compile(r"[eE]([-+]?\d+)\s*$")


def as_printed(value, stated) -> str:
    """``value`` written with the precision of the figure ``stated`` ("1.4e-12", "5.5", "2"):
    the same number of decimals, in the same power of ten. Anything not numeric as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(stated, bool):
        return fmt(value)
    if not math.isfinite(value):
        return str(value)
    try:
        half = tolerances.printed_halfwidth(stated)
    except (TypeError, ValueError):
        return fmt(value)
    step = -round(math.log10(2 * half))            # decimals of the printed figure
    text = stated if isinstance(stated, str) else repr(stated)
    if _EXP.search(text):                                  # 1.4e-12: the same last decimal place
        if not value:
            return "0"
        digits = math.floor(math.log10(abs(value))) + step
        return f"{value:.{digits}e}" if digits >= 0 else f"{value:.1g}"
    return f"{value:.{max(0, step)}f}"


def _tol_text(m: dict) -> str:
    t = m.get("tolerance") or m.get("rule") or ""
    return t.get("text") or t.get("key", "") if isinstance(t, dict) else str(t)


def stated_rows(claim: dict) -> list[dict]:
    """One row per figure a variant compared with what the notes state."""
    rows = []
    for v in claim.get("variants", []):
        for name, m in (v.get("figures") or {}).items():
            if not isinstance(m, dict) or m.get("stated") is None:
                continue
            outcome = m.get("outcome") or {True: "within", False: "outside"}.get(m.get("within"), "")
            rows.append({"variant": v.get("variant") or "", "name": name,
                         "stated": m["stated"], "measured": as_printed(m.get("value"), m["stated"]),
                         "unit": m.get("unit", ""), "tolerance": _tol_text(m),
                         "outcome": outcome})
    return rows


def measured_text(claim: dict, only_outside: bool = True) -> str:
    """What was measured, as the notes would print it (the figures outside their tolerance
    first; every stated figure if none is; the raw measurement if nothing was stated)."""
    rows = stated_rows(claim)
    out = [r for r in rows if r["outcome"] in ("outside", "broken", "undecided")]
    rows = out if (out and only_outside) else rows
    if not rows:
        return fmt(claim.get("measured"))
    return "; ".join(f"{r['variant'] + ': ' if r['variant'] else ''}{r['name']} = "
                     f"{r['measured']}{(' ' + r['unit']) if r['unit'] else ''} "
                     f"(notes: {fmt(r['stated'])})" for r in rows)


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def environment_text(env: dict) -> str:
    v = env.get("versions", {})
    devs = ", ".join(sorted({d.get("name", d.get("type", "")) for d in env.get("devices", [])}))
    keys = ("torch", "jax", "optax", "numpy", "scikit-learn")
    return (f"{fingerprint.label(env)}: Python {env.get('python', '?')}, "
            + ", ".join(f"{k} {v[k]}" for k in keys if k in v)
            + (f"; {devs}" if devs else "") + f"; suite {str(env.get('suite_commit') or '?')[:10]}")


def entries(report: dict, locations: dict) -> list[dict]:
    """The errata entries, by document and line. ``locations``: {id: notes.Location}."""
    out = []
    for c in report.get("claims", []):
        if c.get("verdict") not in ERRATA:
            continue
        loc = locations.get(c["id"])
        line = loc.line if loc is not None and loc.line is not None else None
        out.append({"document": c.get("document", ""), "line": line,
                    "where": f"line {line}" if line else f"{c.get('source', '')} (not located)",
                    "id": c["id"], "verdict": c["verdict"], "stated": c.get("stated") or "",
                    "paraphrase": c.get("paraphrase", ""),
                    "measured": measured_text(c), "reason": _short(c.get("reason", ""))})
    return sorted(out, key=lambda e: (e["document"] != "lecture", e["document"],
                                      e["line"] or 10 ** 9, e["id"]))


def markdown(report: dict, locations: dict, files: dict | None = None) -> str:
    env = report.get("environment", {})
    rows = entries(report, locations)
    counts = {v: sum(1 for e in rows if e["verdict"] == v) for v in ERRATA}
    lines = ["# Errata: sentences of the notes that the run did not find to hold as printed", "",
             f"Measured in: {environment_text(env)}.", "",
             "Counts: " + ", ".join(f"{v} {n}" for v, n in counts.items()) +
             f" ({len(rows)} entries). Figures are rounded to the precision the notes print.", ""]
    for doc in dict.fromkeys(e["document"] for e in rows):
        where = f" (`{files[doc]}`)" if files and doc in files else ""
        lines += [f"## {doc}{where}", "",
                  "| line | ID | verdict | the notes state | measured | claim | reason |",
                  "|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(md_cell(x) for x in (
            e["where"], e["id"], e["verdict"], e["stated"] or "-", e["measured"] or "-",
            e["paraphrase"], e["reason"] or "-")) + " |" for e in rows if e["document"] == doc]
        lines.append("")
    if not rows:
        lines.append("Nothing to correct: no claim fails, drifts, is partial or inconclusive.")
    return "\n".join(lines) + "\n"
