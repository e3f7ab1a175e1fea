"""The notes' figures, redrawn from the values a run measured.

    python -m support figures reports/claims.json [more claims.json ...] -o reports/figures

(support/commands/figures.py). Needs matplotlib (the optional extra ``figures``:
``pip install -e '.[figures]'``). Every figure is drawn from ``claim.record`` values in
``claims.json`` (one line per run when several are given) and marks the figures the notes
state (black crosses, dashed lines) next to the measured ones. A series that a run did not
record gives a panel that says "not measured in this run" instead of failing: the figures
never stop a report.

Which measurement feeds which figure: :data:`support.reports.figure_data.DRAWN` (claim ID: the recorded names each
figure reads); the figures themselves are in :mod:`support.reports.panels`.
"""
from __future__ import annotations

from pathlib import Path

from support.reports.plotting import empty, png as to_png, pyplot


def draw_all(runs, out: Path | None = None) -> list[dict]:
    """Draw every figure for ``runs`` = [(name, claims.json data, benchmark files)].

    Returns [{name, title, file, png, note}]; writes ``<out>/<name>.png`` when ``out`` is given.
    A figure whose drawing raises is replaced by a panel saying why.
    """
    from support.reports.panels import FIGURES      # needs matplotlib
    result = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for name, title, fn, _claims in FIGURES:
        try:
            png, note = fn(runs)
        except Exception as exc:  # noqa: BLE001 - one broken series must not stop the report
            fig, ax = pyplot().subplots(figsize=(6.4, 2))
            empty(ax, f"{title}: could not draw ({type(exc).__name__}: {exc})")
            png, note = to_png(fig), f"could not draw: {exc}"
        path = None
        if out is not None:
            path = out / f"{name}.png"
            path.write_bytes(png)
        result.append({"name": name, "title": title, "file": str(path) if path else f"{name}.png",
                       "png": png, "note": note})
    return result
