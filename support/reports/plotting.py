"""Drawing helpers the figures share: matplotlib imported only when a figure is drawn, the
"not measured" panel, the colours, the PNG bytes, the notes' stated-value mark."""
from __future__ import annotations

import io

NOT_MEASURED = "not measured in this run"
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def pyplot():
    """matplotlib's pyplot on the file backend, imported only when a figure is drawn (so the
    rest of this module, DRAWN included, needs no matplotlib)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("the figures need matplotlib: pip install -e '.[figures]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}\n{NOT_MEASURED}", ha="center", va="center",
            transform=ax.transAxes, color="#888", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return buf.getvalue()


def stated_mark(ax, x, y, label_done: list) -> None:
    ax.plot([x], [y], "kx", ms=10, mew=2, label=None if label_done else "notes (stated)")
    label_done.append(True)
