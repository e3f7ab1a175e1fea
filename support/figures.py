"""The notes' figures, redrawn from the values a run measured.

    python -m support figures reports/claims.json [more claims.json ...] -o reports/figures

Needs matplotlib (the optional extra ``figures``: ``pip install -e '.[figures]'``). Every
figure is drawn from ``claim.record`` values in ``claims.json`` (one line per run when
several are given) and marks the figures the notes state (black crosses, dashed lines)
next to the measured ones. A series that a run did not record gives a panel that says
"not measured in this run" instead of failing: the figures never stop a report.

Which measurement feeds which figure (claim ID: recorded names):

* finite-difference V: AD-12/AD-14 ``steps``, ``errors``, ``best_error``, ``best_h``;
  autodiff and careless-float lines: AD-15 ``autodiff_error``, ``careless_error``.
* Adam on the bowl: ADAM-09 ``path_<optimizer>`` (lists of [x, y]); step sizes ADAM-15
  ``step_sizes_<opt>_<axis>``; beta2 panel ADAM-16 ``step_over_lr_beta2_<b2>``; eps panel
  ADAM-06 ``first_step_eps_<eps>``, ``grad``, ``sgd_line``.
* training pathologies: STORY-06 ``curve (validation RMSE per epoch)`` with STORY-07
  ``final RMSE``/``baseline``, STORY-08 ``RMSE``, STORY-10 ``lowest``/``highest``; LR-01..03
  ``curve`` and ``RMSE``; STORY-11 ``Adam raw curve``/``Adam scaled curve`` and STORY-12
  ``SGD raw curve``/``SGD scaled curve`` (None entries are non-finite epochs).
* trees vs nets: SPLIT-01 ``HGB, KFold mean of 25``/``MLP, KFold mean of 25`` and SPLIT-04
  ``HGB, GroupKFold mean``/``MLP, GroupKFold mean``, error bars = standard error of the
  per-run lists ``kfold: MLP per (seed, fold)``, ``group: HGB per fold`` etc.; SPLIT-06
  ``<model>: GroupKFold / KFold`` as a fallback.
* CPU vs GPU width crossover: DEV-07 ``<device> ms per epoch at width <w>``, or the
  pytest-benchmark files of the bench tier (``extra_info`` claim DEV-07, device, width).
"""
from __future__ import annotations

import fnmatch
import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import formatting, tolerances  # noqa: E402

NOT_MEASURED = "not measured in this run"
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
    plt.close(fig)
    return buf.getvalue()


def _stated_mark(ax, x, y, label_done: list) -> None:
    ax.plot([x], [y], "kx", ms=10, mew=2, label=None if label_done else "notes (stated)")
    label_done.append(True)


# --------------------------------------------------------------------------- the figures
def fd_v(runs) -> tuple[bytes, str]:
    """Finite-difference error against step h (the V), with the autodiff and careless lines."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn, marks, note = 0, [], ""
    for i, (name, data, _b) in enumerate(runs):
        for cid in ("AD-14", "AD-12"):
            steps, errs = _numbers(value(data, cid, "steps")), _numbers(value(data, cid, "errors"))
            if steps and errs:
                ax.loglog(steps, errs, "o-", ms=3, color=_color(i), label=f"{name}: FD error ({cid})")
                drawn += 1
                break
        figs15 = claim_figures(data, "AD-15")
        for key, style, what in (("autodiff_error", "-", "autodiff"),
                                 ("careless_error", ":", "careless float32 scalars")):
            m = figs15.get(key)
            if m and isinstance(m.get("value"), (int, float)) and m["value"] > 0:
                ax.axhline(m["value"], ls=style, color=_color(i), lw=1.2,
                           label=f"{name}: {what} {m['value']:.2g}")
                drawn += 1
    if runs:
        data = runs[0][1]
        f14 = claim_figures(data, "AD-14")
        bh, be = stated_float(f14.get("best_h")), stated_float(f14.get("best_error"))
        if bh and be:
            _stated_mark(ax, bh, be, marks)
        for key, what in (("autodiff_error", "autodiff"), ("careless_error", "careless")):
            s = stated_float(claim_figures(data, "AD-15").get(key))
            if s:
                ax.axhline(s, ls="--", color="k", lw=0.8, alpha=0.6, label=f"notes: {what} {s:g}")
    if not drawn:
        _empty(ax, "finite differences (AD-12/AD-14/AD-15)")
        note = NOT_MEASURED
    else:
        ax.set_xlabel("step h")
        ax.set_ylabel("|FD - exact| on W[0,0]")
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax.set_title("Finite differences: the V, autodiff and careless-float lines")
    return _png(fig), note


def adam_paths(runs) -> tuple[bytes, str]:
    """Fig. 70 left: SGD, momentum and Adam on the 1:40 bowl."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = runs[0][1] if runs else {}
    figs = claim_figures(data, "ADAM-09")
    paths = {k[len("path_"):]: m["value"] for k, m in figs.items()
             if k.startswith("path_") and isinstance(m.get("value"), list)}
    if not paths:
        _empty(ax, "Adam paths (ADAM-09)")
        ax.set_title("Optimizer paths on the bowl")
        return _png(fig), NOT_MEASURED
    try:  # the bowl's contours are the setup, not a measurement: drawn from support.bowl
        import numpy as np
        from . import bowl
        xs, ys = np.meshgrid(np.linspace(-4.5, 1, 120), np.linspace(-2, 2, 120))
        zz = 0.5 * (bowl.CURVATURE[0] * xs ** 2 + bowl.CURVATURE[1] * ys ** 2)
        ax.contour(xs, ys, zz, levels=12, colors="#ccc", linewidths=0.6)
        start = bowl.START
    except Exception:  # noqa: BLE001 - contours are decoration
        start = None
    for i, (opt, pts) in enumerate(sorted(paths.items())):
        pts = [p for p in pts if isinstance(p, list) and len(p) == 2]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".-", ms=3, lw=1,
                    color=_color(i), label=opt)
    if start:
        ax.plot(*start, "ks", ms=6, label="start")
    ax.plot(0, 0, "k*", ms=10, label="minimum")
    ax.set_xlabel("shallow axis")
    ax.set_ylabel("steep axis")
    ax.legend(fontsize=8)
    ax.set_title(f"Optimizer paths on the bowl ({runs[0][0]})")
    return _png(fig), ""


def adam_panels(runs) -> tuple[bytes, str]:
    """Fig. 71: step sizes per axis, the beta2 panel and the eps panel."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9))
    missing = []
    data = runs[0][1] if runs else {}
    # step sizes
    ax = axes[0]
    f15 = claim_figures(data, "ADAM-15")
    series = {k[len("step_sizes_"):]: _numbers(m.get("value")) for k, m in f15.items()
              if k.startswith("step_sizes_")}
    series = {k: v for k, v in series.items() if v}
    if series:
        for i, (k, v) in enumerate(sorted(series.items())):
            ax.semilogy(v, color=_color(i // 2), ls="-" if k.endswith("steep") else "--", label=k)
        for key, txt in (("sgd_ratio", "SGD steep/shallow"), ("adam_ratio", "Adam steep/shallow")):
            m = f15.get(key)
            if m is not None:
                ax.text(0.02, 0.02 + 0.08 * (key == "adam_ratio"),
                        f"{txt}: {m['value']:.3g} (notes {m.get('stated', '-')})",
                        transform=ax.transAxes, fontsize=7)
        ax.set_xlabel("step")
        ax.set_ylabel("|step| per axis")
        ax.legend(fontsize=6)
    else:
        _empty(ax, "step sizes (ADAM-15)")
        missing.append("ADAM-15")
    ax.set_title("Step sizes per axis")
    # beta2
    ax = axes[1]
    f16 = claim_figures(data, "ADAM-16")
    b2 = {k.rsplit("_", 1)[-1]: _numbers(m.get("value")) for k, m in f16.items()
          if k.startswith("step_over_lr_beta2_")}
    b2 = {k: v for k, v in b2.items() if v}
    if b2:
        for i, (k, v) in enumerate(sorted(b2.items())):
            ax.semilogy(v, color=_color(i), label=f"beta2 {k}")
        marks: list = []
        for key in ("beta2_0.999_collapse_at_250", "beta2_0.9_dip_at_250"):
            s = stated_float(f16.get(key))
            if s:
                _stated_mark(ax, 250, 1.0 / s, marks)
        ax.axvline(200, color="#999", lw=0.8, ls=":")
        ax.set_xlabel("step (gradient drops 100x at 200)")
        ax.set_ylabel("step / lr")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "beta2 panel (ADAM-16)")
        missing.append("ADAM-16")
    ax.set_title("beta2 after a gradient drop")
    # eps
    ax = axes[2]
    f6 = claim_figures(data, "ADAM-06")
    g = _numbers(f6.get("grad", {}).get("value"))
    eps = {k[len("first_step_eps_"):]: _numbers(m.get("value")) for k, m in f6.items()
           if k.startswith("first_step_eps_")}
    eps = {k: v for k, v in eps.items() if v and g and len(v) == len(g)}
    if g and eps:
        for i, (k, v) in enumerate(sorted(eps.items(), key=lambda kv: float(kv[0]))):
            ax.loglog(g, v, color=_color(i), label=f"eps {k}")
        sgd = _numbers(f6.get("sgd_line", {}).get("value"))
        if sgd and len(sgd) == len(g):
            ax.loglog(g, sgd, "k--", lw=0.8, label="SGD lr*g")
        ax.set_xlabel("gradient g")
        ax.set_ylabel("first step")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "eps panel (ADAM-06)")
        missing.append("ADAM-06")
    ax.set_title("eps and the first step")
    fig.suptitle(f"Adam step sizes ({runs[0][0] if runs else '-'})", fontsize=10)
    return _png(fig), (f"{', '.join(missing)} {NOT_MEASURED}" if missing else "")


# (title, curves [(claim, name, label)], stated finals [(claim, name, label)], lines [(claim, name)])
PATHOLOGY_PANELS = (
    ("no zero_grad (STORY-06..10)",
     [("STORY-06", "curve (validation RMSE per epoch)", "without zero_grad"),
      ("STORY-08", "curve (validation RMSE per epoch)", "with zero_grad")],
     [("STORY-07", "final RMSE", "final"), ("STORY-08", "RMSE", "with zero_grad")],
     [("STORY-07", "baseline"), ("STORY-10", "lowest"), ("STORY-10", "highest")]),
    ("SGD lr sweep (LR-01..06)",
     [("LR-01", "curve", "lr 0.001"), ("LR-02", "curve", "lr 0.01"), ("LR-03", "curve", "lr 0.1")],
     [("LR-01", "RMSE", "lr 0.001"), ("LR-02", "RMSE", "lr 0.01"), ("LR-03", "RMSE", "lr 0.1")],
     []),
    ("Adam vs SGD, raw and scaled (STORY-11..14)",
     [("STORY-11", "Adam raw curve", "Adam, raw"), ("STORY-11", "Adam scaled curve", "Adam, scaled"),
      ("STORY-12", "SGD raw curve", "SGD, raw"), ("STORY-12", "SGD scaled curve", "SGD, scaled")],
     [("STORY-11", "Adam, raw inputs", "Adam raw"), ("STORY-11", "Adam, scaled inputs", "Adam scaled")],
     []),
)


def _curve(v) -> list[float] | None:
    """A per-epoch series; None entries (non-finite epochs) become NaN gaps."""
    if not isinstance(v, list) or len(v) < 2:
        return None
    out = []
    for x in v:
        if x is None:
            out.append(float("nan"))
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(float(x) if math.isfinite(x) else float("nan"))
        else:
            return None
    return out


def pathologies(runs) -> tuple[bytes, str]:
    """The training pathologies: the recorded validation curves, the notes' figures marked."""
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.0))
    missing = []
    for ax, (title, curves, finals, lines) in zip(axes, PATHOLOGY_PANELS):
        n, ends, marks = 0, 0, []
        for ri, (rname, data, _b) in enumerate(runs):
            for ci, (cid, name, label) in enumerate(curves):
                v = _curve(value(data, cid, name))
                if not v:
                    continue
                ends = max(ends, len(v))
                finite = [x for x in v if math.isfinite(x)]
                note = "" if len(finite) == len(v) else f" ({len(v) - len(finite)} NaN epochs)"
                ax.plot(range(1, len(v) + 1), v, lw=1.1, color=_color(ci),
                        ls="-" if ri == 0 else "--",
                        label=label + note + (f" [{rname}]" if len(runs) > 1 else ""))
                n += 1
        data = runs[0][1] if runs else {}
        for cid, name, label in finals:
            m = claim_figures(data, cid).get(name)
            s = stated_float(m)
            if s is not None and ends:
                _stated_mark(ax, ends, s, marks)
                ax.annotate(f"{label}: notes {m['stated']}, measured {fmt_num(m.get('value'))}",
                            (ends, s), fontsize=6, xytext=(-4, 4), textcoords="offset points",
                            ha="right")
        for cid, name in lines:
            m = claim_figures(data, cid).get(name)
            s = stated_float(m)
            if s is not None and n:
                ax.axhline(s, color="k", ls="--", lw=0.7, alpha=0.6)
                ax.text(1, s, f" notes: {name} {m['stated']}", fontsize=6, va="bottom")
        if n:
            ax.set_yscale("log")
            ax.set_xlabel("epoch")
            ax.set_ylabel("validation RMSE (MPa)")
            ax.legend(fontsize=6, loc="best")
        else:
            _empty(ax, title)
            missing.append(title)
        ax.set_title(title, fontsize=9)
    fig.suptitle("Training pathologies (lines: measured; x and dashed: the notes)", fontsize=10)
    return _png(fig), (f"{'; '.join(missing)}: {NOT_MEASURED}" if missing else "")


def fmt_num(v) -> str:
    return formatting.fmt(v, digits=3)


# (model, split, claim of the mean, its name, claim of the runs, their name)
SPLIT_BARS = (
    ("HGB", "random", "SPLIT-01", "HGB, KFold mean of 25", "SPLIT-01", "kfold: HGB per fold"),
    ("MLP", "random", "SPLIT-01", "MLP, KFold mean of 25", "SPLIT-01", "kfold: MLP per (seed, fold)"),
    ("HGB", "grouped", "SPLIT-04", "HGB, GroupKFold mean", "SPLIT-04", "group: HGB per fold"),
    ("MLP", "grouped", "SPLIT-04", "MLP, GroupKFold mean", "SPLIT-04", "group: MLP per (seed, fold)"),
)


def _se(v) -> float | None:
    xs = _numbers(v)
    if not xs or len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) / math.sqrt(len(xs))


def trees_vs_nets(runs) -> tuple[bytes, str]:
    """Fig. 68: RMSE per model under the random and the grouped split, with standard errors."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    marks: list = []
    drew = 0
    labels = [f"{model}\n{split}" for model, split, *_ in SPLIT_BARS]
    width = 0.8 / max(1, len(runs))
    for ri, (rname, data, _b) in enumerate(runs):
        for i, (model, split, cid, name, rcid, rname_runs) in enumerate(SPLIT_BARS):
            m = claim_figures(data, cid).get(name)
            if not m or not isinstance(m.get("value"), (int, float)):
                continue
            x = i + (ri - (len(runs) - 1) / 2) * width
            ax.bar(x, m["value"], width * 0.9, yerr=_se(value(data, rcid, rname_runs)), capsize=3,
                   color=_color(ri), alpha=0.8, label=rname if i == 0 or drew == 0 else None)
            drew += 1
            s = stated_float(m)
            if s is not None and ri == 0:
                _stated_mark(ax, i, s, marks)
    if not drew:
        _empty(ax, "trees vs nets (SPLIT-01/04/06)")
        ax.set_title("Trees vs nets under both splits")
        return _png(fig), NOT_MEASURED
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("validation RMSE (MPa), mean of 25 runs +- SE")
    ax.legend(fontsize=7)
    ax.set_title("Trees vs nets under the random and the grouped split")
    return _png(fig), ""


def crossover(runs) -> tuple[bytes, str]:
    """The CPU-vs-GPU width sweep (DEV-07): time per epoch against width, per device."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curves: dict[tuple[str, str], dict[int, float]] = {}
    for rname, data, benches in runs:
        widths = _numbers(value(data, "DEV-07", "widths")) or []
        for dev in ("cpu", "cuda"):
            ms = _numbers(value(data, "DEV-07", f"{dev} ms per epoch"))
            if ms and len(ms) == len(widths):
                curves[(rname, dev)] = {int(w): t for w, t in zip(widths, ms)}
        for f in benches or []:
            for b in f.get("benchmarks", []):
                ei = b.get("extra_info") or {}
                if ei.get("claim") != "DEV-07" or "width" not in ei:
                    continue
                med = (b.get("stats") or {}).get("median")
                if med:
                    curves.setdefault((rname, str(ei.get("device", "cpu"))), {}).setdefault(
                        int(ei["width"]), 1e3 * med)
    has_gpu = any(dev != "cpu" for (_r, dev) in curves)
    if not curves:
        _empty(ax, "CPU vs GPU width sweep (DEV-07)")
        ax.set_title("CPU vs GPU crossover")
        return _png(fig), NOT_MEASURED
    for i, ((rname, dev), pts) in enumerate(sorted(curves.items())):
        ws = sorted(pts)
        ax.loglog(ws, [pts[w] for w in ws], "o-" if dev == "cpu" else "s--", color=_color(i),
                  label=f"{dev} [{rname}]")
    ax.set_xlabel("hidden width")
    ax.set_ylabel("ms per epoch (8192 rows)")
    ax.legend(fontsize=7)
    ax.set_title("CPU vs GPU crossover")
    return _png(fig), "" if has_gpu else "no GPU results in these runs: CPU curve only"


FIGURES = (
    ("fd_v", "Finite differences: error against step h, autodiff and careless-float lines", fd_v),
    ("adam_paths", "Adam, momentum and SGD paths on the bowl (Fig. 70)", adam_paths),
    ("adam_panels", "Adam step sizes, beta2 and eps panels (Fig. 71)", adam_panels),
    ("pathologies", "Training pathologies: no zero_grad, SGD lr sweep, Adam vs SGD raw/scaled",
     pathologies),
    ("trees_vs_nets", "Trees vs nets under the random and the grouped split (Fig. 68)", trees_vs_nets),
    ("crossover", "CPU vs GPU width crossover (DEV-07)", crossover),
)


def draw_all(runs, out: Path | None = None) -> list[dict]:
    """Draw every figure for ``runs`` = [(name, claims.json data, benchmark files)].

    Returns [{name, title, file, png, note}]; writes ``<out>/<name>.png`` when ``out`` is given.
    A figure whose drawing raises is replaced by a panel saying why.
    """
    result = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for name, title, fn in FIGURES:
        try:
            png, note = fn(runs)
        except Exception as exc:  # noqa: BLE001 - one broken series must not stop the report
            fig, ax = plt.subplots(figsize=(6.4, 2))
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
