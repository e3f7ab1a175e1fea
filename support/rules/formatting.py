"""How numbers and values are written in every report, table and page of the suite."""
from __future__ import annotations

import math


def fmt(v, digits: int = 4, max_items: int = 8, max_chars: int | None = None) -> str:
    """A measured value for people: floats to ``digits`` significant digits, lists cut
    after ``max_items``, dicts as ``k=v`` pairs, None as "", other text cut at
    ``max_chars``."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.{digits}g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x, digits, max_items)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        head = ", ".join(fmt(x, digits, max_items) for x in list(v)[:max_items])
        return "[" + head + (", ..." if len(v) > max_items else "") + "]"
    s = str(v)
    return s if max_chars is None or len(s) <= max_chars else s[:max_chars - 3] + "..."


def md_cell(text) -> str:
    """Text that is safe inside one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")
