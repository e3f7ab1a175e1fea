"""The notes' figures, redrawn from the values a run measured.

    python -m support figures reports/claims.json [more claims.json ...] -o reports/figures

Needs matplotlib (the optional extra ``figures``: ``pip install -e '.[figures]'``). Every
figure is drawn from ``claim.record`` values in ``claims.json`` (one line per run when
several are given) and marks the figures the notes state (black crosses, dashed lines)
next to the measured ones. A series that a run did not record gives a panel that says
"not measured in this run" instead of failing: the figures never stop a report.

Which measurement feeds which figure: :data:`DRAWN` (claim ID: the recorded names each
figure reads); the figures themselves are in :mod:`support.figure_panels`.
"""
from __future__ import annotations

import fnmatch
import io
from pathlib import Path

from . import tolerances

NOT_MEASURED = "not measured in this run"
# what the figures command needs beyond the suite (support/cli.py checks it first)
NEEDS = ("matplotlib",)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


# --------------------------------------------------------------------------- reading
# Every measurement a figure draws, by claim (a name, or a name ending in * for a family of
# them). A figure reads nothing else (reading an undeclared name raises), and a lint
# (support/tests/test_registry_lints.py) checks that a test of the claim records each one:
# a measurement renamed in a test fails there, instead of a panel going "not measured".
DRAWN: dict[str, tuple[str, ...]] = {
    "AD-12": ("steps", "errors"),
    "AD-14": ("steps", "errors", "best_h", "best_error"),
    "AD-15": ("autodiff_error", "careless_error"),
    "ADAM-06": ("grad", "sgd_line", "first_step_eps_*"),
    "ADAM-09": ("path_*",),
    "ADAM-15": ("step_sizes_*", "sgd_ratio", "adam_ratio"),
    "ADAM-16": ("step_over_lr_beta2_*", "beta2_0.999_collapse_at_250", "beta2_0.9_dip_at_250"),
    "STORY-06": ("curve (validation RMSE per epoch)",),
    "STORY-07": ("final RMSE", "baseline"),
    "STORY-08": ("curve (validation RMSE per epoch)", "RMSE"),
    "STORY-10": ("lowest", "highest"),
    "STORY-11": ("Adam raw curve", "Adam scaled curve", "Adam, raw inputs", "Adam, scaled inputs"),
    "STORY-12": ("SGD raw curve", "SGD scaled curve"),
    "LR-01": ("curve", "RMSE"), "LR-02": ("curve", "RMSE"), "LR-03": ("curve", "RMSE"),
    "SPLIT-01": ("HGB, KFold mean of 25", "MLP, KFold mean of 25", "kfold: HGB per fold",
                 "kfold: MLP per (seed, fold)"),
    "SPLIT-04": ("HGB, GroupKFold mean", "MLP, GroupKFold mean", "group: HGB per fold",
                 "group: MLP per (seed, fold)"),
    "DEV-07": ("widths", "cpu ms per epoch", "cuda ms per epoch"),
}


class _Drawn(dict):
    """One claim's measurements as a figure may read them: only the names DRAWN declares."""

    def __init__(self, cid: str, items: dict):
        self.cid = cid
        super().__init__({k: m for k, m in items.items() if self.declared(k)})

    def declared(self, name: str) -> bool:
        bare = name.split(":", 1)[-1].lstrip()
        return any(fnmatch.fnmatchcase(n, g) for g in DRAWN.get(self.cid, ())
                   for n in (name, bare))

    def get(self, name, default=None):
        if not self.declared(name):
            raise KeyError(f"support.figures reads {name!r} of {self.cid}, which DRAWN does "
                           "not declare: add it there (the lint then checks a test records it)")
        return super().get(name, default)


def claim_figures(data: dict, cid: str) -> dict[str, dict]:
    """The measurements of claim ``cid`` in a claims.json that the figures draw, by name.

    With several variants the name is also available as ``variant:name``; the bare name
    refers to the first variant that recorded it.
    """
    out: dict[str, dict] = {}
    for c in data.get("claims", []):
        if c.get("id") != cid:
            continue
        for v in c.get("variants", []):
            tag = v.get("variant") or ""
            for name, m in (v.get("figures") or {}).items():
                out.setdefault(name, m)
                if tag:
                    out[f"{tag}:{name}"] = m
    return _Drawn(cid, out)


def value(data: dict, cid: str, name: str):
    m = claim_figures(data, cid).get(name)
    return None if m is None else m.get("value")


def stated_float(m: dict | None):
    if not m or "stated" not in m or isinstance(m["stated"], bool):
        return None
    try:
        return tolerances.as_float(m["stated"])
    except (TypeError, ValueError):
        return None


def _numbers(v) -> list[float] | None:
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         for x in v):
        return [float(x) for x in v]
    return None


# --------------------------------------------------------------------------- drawing helpers
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


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}\n{NOT_MEASURED}", ha="center", va="center",
            transform=ax.transAxes, color="#888", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return buf.getvalue()


def _stated_mark(ax, x, y, label_done: list) -> None:
    ax.plot([x], [y], "kx", ms=10, mew=2, label=None if label_done else "notes (stated)")
    label_done.append(True)


def draw_all(runs, out: Path | None = None) -> list[dict]:
    """Draw every figure for ``runs`` = [(name, claims.json data, benchmark files)].

    Returns [{name, title, file, png, note}]; writes ``<out>/<name>.png`` when ``out`` is given.
    A figure whose drawing raises is replaced by a panel saying why.
    """
    from .figure_panels import FIGURES      # needs matplotlib
    result = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for name, title, fn, _claims in FIGURES:
        try:
            png, note = fn(runs)
        except Exception as exc:  # noqa: BLE001 - one broken series must not stop the report
            fig, ax = pyplot().subplots(figsize=(6.4, 2))
            _empty(ax, f"{title}: could not draw ({type(exc).__name__}: {exc})")
            png, note = _png(fig), f"could not draw: {exc}"
        path = None
        if out is not None:
            path = out / f"{name}.png"
            path.write_bytes(png)
        result.append({"name": name, "title": title, "file": str(path) if path else f"{name}.png",
                       "png": png, "note": note})
    return result


def arguments(command: str, parser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, help="claims.json files (or their folders)")
    parser.add_argument("-o", "--out", type=Path, default=Path("reports/figures"))


def run(command: str, args) -> int:
    import json
    runs = []
    for p in args.reports:
        p = p / "claims.json" if p.is_dir() else p
        runs.append((p.parent.name, json.loads(p.read_text()), []))
    for f in draw_all(runs, args.out):
        print(f"{f['file']}: {f['title']}" + (f" ({f['note']})" if f["note"] else ""))
    return 0
