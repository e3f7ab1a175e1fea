"""A claim's measured figures as the annotated pages and the errata write them: a value at a
precision that shows how it differs from the printed figure, a figure's name and unit for
people, the rows a claim compared with what the notes state, and what was measured in one
line."""
from __future__ import annotations

import math

from support.rules import tolerances
from support.rules.formatting import fmt


def _decimals(stated) -> int | None:
    """The decimals the notes print ``stated`` with, or None when it is not a number."""
    if isinstance(stated, bool):
        return None
    try:
        half = tolerances.printed_halfwidth(stated)
    except (TypeError, ValueError):
        return None
    return -round(math.log10(2 * half))


def shown(value, stated=None, digits: int = 4) -> str:
    """A measured value at a precision that shows how it differs from the printed figure
    ``stated``: three significant digits and at least one decimal more than the notes print
    (3.50 against 4, 419.6 against 478, 0.527 against 0.8); ``digits`` significant digits
    where nothing is stated (41.33, 30); very small or large values in powers of ten
    (9.98e-07)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt(value)
    if not math.isfinite(value) or isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) < 1e-3 or abs(value) >= 1e6:
        return f"{value:.2e}"
    printed = _decimals(stated) if stated is not None else None
    if printed is None:
        return f"{value:.{digits}g}"
    magnitude = math.floor(math.log10(abs(value)))
    return f"{value:.{max(0, 2 - magnitude, printed + 1)}f}"


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
                         "stated": m["stated"], "measured": shown(m.get("value"), m["stated"]),
                         "unit": m.get("unit", ""), "tolerance": _tol_text(m),
                         "outcome": outcome})
    return rows


def _label(name: str, unit: str) -> str:
    """A figure's name for people: an identifier's underscores as spaces, its unit not
    repeated ("held_by_graph_MB" in MB: "held by graph")."""
    if " " in name:
        return name
    words = name.split("_")
    if unit and len(words) > 1 and words[-1] == unit:
        words.pop()
    return " ".join(words)


def figure_text(name: str, m: dict, digits: int = 4) -> str:
    """"orders worse than autodiff 3.50 (notes: 4)", with the interval where there is one."""
    stated = m.get("stated")
    value = shown(m.get("value"), stated, digits)
    unit = m.get("unit") or ""
    iv = m.get("interval")
    if isinstance(iv, (list, tuple)) and len(iv) == 2:
        value += " [" + ", ".join(shown(x, stated, digits) for x in iv) + "]"
    said = ""
    if stated is not None:
        whose = "reference" if str(m.get("rule", "")).startswith("reference") else "notes"
        said = f" ({whose}: {fmt(stated)})"
    return f"{_label(name, unit)} {value}{' ' + unit if unit else ''}{said}"


def outside(m: dict) -> bool:
    """Whether a figure is off what the notes state: outside its tolerance, broken, or
    undecided."""
    return isinstance(m, dict) and (m.get("outcome") in ("outside", "broken", "undecided")
                                    or m.get("within") is False)


def measured_text(claim: dict, only_outside: bool = True) -> str:
    """What was measured, for people: the figures outside their tolerance (every stated
    figure where none is, or ``only_outside`` is False), else the raw measurement."""
    rows = [(v.get("variant") or "", n, m) for v in claim.get("variants", [])
            for n, m in (v.get("figures") or {}).items()
            if isinstance(m, dict) and m.get("stated") is not None]
    off = [r for r in rows if outside(r[2])]
    rows = off if (off and only_outside) else rows
    if not rows:
        return fmt(claim.get("measured"))
    return "; ".join(f"{var + ': ' if var else ''}{figure_text(n, m)}" for var, n, m in rows)
