"""The notes' figures, one function each: ``fn(runs) -> (png bytes, note)``, where runs are
[(name, claims.json data, benchmark files)]. Each reads the measurements
:data:`support.reports.figure_data.DRAWN` declares, through
:func:`support.reports.figure_data.claim_figures`. Importing it imports matplotlib.
"""
from __future__ import annotations

import math

from support.reports.figure_data import claim_figures, numbers, stated_float, value
from support.reports.plotting import NOT_MEASURED, color, empty, png, pyplot, stated_mark
from support.rules.formatting import fmt


plt = pyplot()


def fmt_num(v) -> str:
    return fmt(v, digits=3)


def fd_v(runs) -> tuple[bytes, str]:
    """Finite-difference error against step h (the V), with the autodiff and careless lines."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn, marks, note = 0, [], ""
    for i, (name, data, _b) in enumerate(runs):
        for cid in ("AD-14", "AD-12"):
            steps, errs = numbers(value(data, cid, "steps")), numbers(value(data, cid, "errors"))
            if steps and errs:
                ax.loglog(steps, errs, "o-", ms=3, color=color(i), label=f"{name}: FD error ({cid})")
                drawn += 1
                break
        figs15 = claim_figures(data, "AD-15")
        for key, style, what in (("autodiff_error", "-", "autodiff"),
                                 ("careless_error", ":", "careless float32 scalars")):
            m = figs15.get(key)
            if m and isinstance(m.get("value"), (int, float)) and m["value"] > 0:
                ax.axhline(m["value"], ls=style, color=color(i), lw=1.2,
                           label=f"{name}: {what} {m['value']:.2g}")
                drawn += 1
    if runs:
        data = runs[0][1]
        f14 = claim_figures(data, "AD-14")
        bh, be = stated_float(f14.get("best_h")), stated_float(f14.get("best_error"))
        if bh and be:
            stated_mark(ax, bh, be, marks)
        for key, what in (("autodiff_error", "autodiff"), ("careless_error", "careless")):
            s = stated_float(claim_figures(data, "AD-15").get(key))
            if s:
                ax.axhline(s, ls="--", color="k", lw=0.8, alpha=0.6, label=f"notes: {what} {s:g}")
    if not drawn:
        empty(ax, "finite differences (AD-12/AD-14/AD-15)")
        note = NOT_MEASURED
    else:
        ax.set_xlabel("step h")
        ax.set_ylabel("|FD - exact| on W[0,0]")
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax.set_title("Finite differences: the V, autodiff and careless-float lines")
    return png(fig), note


def adam_paths(runs) -> tuple[bytes, str]:
    """Fig. 70 left: SGD, momentum and Adam on the 1:40 bowl."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = runs[0][1] if runs else {}
    figs = claim_figures(data, "ADAM-09")
    paths = {k[len("path_"):]: m["value"] for k, m in figs.items()
             if k.startswith("path_") and isinstance(m.get("value"), list)}
    if not paths:
        empty(ax, "Adam paths (ADAM-09)")
        ax.set_title("Optimizer paths on the bowl")
        return png(fig), NOT_MEASURED
    try:  # the bowl's contours are the setup, not a measurement: drawn from support.lab.bowl
        import numpy as np
        from support.lab import bowl
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
                    color=color(i), label=opt)
    if start:
        ax.plot(*start, "ks", ms=6, label="start")
    ax.plot(0, 0, "k*", ms=10, label="minimum")
    ax.set_xlabel("shallow axis")
    ax.set_ylabel("steep axis")
    ax.legend(fontsize=8)
    ax.set_title(f"Optimizer paths on the bowl ({runs[0][0]})")
    return png(fig), ""


def _family(figs: dict, prefix: str) -> dict[str, list[float]]:
    """The series a claim recorded under names ``prefix + suffix``, by suffix (the numeric
    ones only)."""
    found = {k[len(prefix):]: numbers(m.get("value")) for k, m in figs.items()
             if k.startswith(prefix)}
    return {k: v for k, v in found.items() if v}


def _step_sizes(ax, data) -> bool:
    f15 = claim_figures(data, "ADAM-15")
    series = _family(f15, "step_sizes_")
    ax.set_title("Step sizes per axis")
    if not series:
        return False
    for i, (k, v) in enumerate(sorted(series.items())):
        ax.semilogy(v, color=color(i // 2), ls="-" if k.endswith("steep") else "--", label=k)
    for key, txt in (("sgd_ratio", "SGD steep/shallow"), ("adam_ratio", "Adam steep/shallow")):
        m = f15.get(key)
        if m is not None:
            ax.text(0.02, 0.02 + 0.08 * (key == "adam_ratio"),
                    f"{txt}: {m['value']:.3g} (notes {m.get('stated', '-')})",
                    transform=ax.transAxes, fontsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel("|step| per axis")
    ax.legend(fontsize=6)
    return True


def _beta2(ax, data) -> bool:
    f16 = claim_figures(data, "ADAM-16")
    b2 = _family(f16, "step_over_lr_beta2_")
    ax.set_title("beta2 after a gradient drop")
    if not b2:
        return False
    for i, (k, v) in enumerate(sorted(b2.items())):
        ax.semilogy(v, color=color(i), label=f"beta2 {k}")
    marks: list = []
    for key in ("beta2_0.999_collapse_at_250", "beta2_0.9_dip_at_250"):
        s = stated_float(f16.get(key))
        if s:
            stated_mark(ax, 250, 1.0 / s, marks)
    ax.axvline(200, color="#999", lw=0.8, ls=":")
    ax.set_xlabel("step (gradient drops 100x at 200)")
    ax.set_ylabel("step / lr")
    ax.legend(fontsize=7)
    return True


def _eps(ax, data) -> bool:
    f6 = claim_figures(data, "ADAM-06")
    g = numbers(f6.get("grad", {}).get("value"))
    eps = {k: v for k, v in _family(f6, "first_step_eps_").items() if g and len(v) == len(g)}
    ax.set_title("eps and the first step")
    if not (g and eps):
        return False
    for i, (k, v) in enumerate(sorted(eps.items(), key=lambda kv: float(kv[0]))):
        ax.loglog(g, v, color=color(i), label=f"eps {k}")
    sgd = numbers(f6.get("sgd_line", {}).get("value"))
    if sgd and len(sgd) == len(g):
        ax.loglog(g, sgd, "k--", lw=0.8, label="SGD lr*g")
    ax.set_xlabel("gradient g")
    ax.set_ylabel("first step")
    ax.legend(fontsize=7)
    return True


def adam_panels(runs) -> tuple[bytes, str]:
    """Fig. 71: step sizes per axis, the beta2 panel and the eps panel."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9))
    data = runs[0][1] if runs else {}
    missing = []
    for ax, draw, cid, what in ((axes[0], _step_sizes, "ADAM-15", "step sizes"),
                                (axes[1], _beta2, "ADAM-16", "beta2 panel"),
                                (axes[2], _eps, "ADAM-06", "eps panel")):
        if not draw(ax, data):
            empty(ax, f"{what} ({cid})")
            missing.append(cid)
    fig.suptitle(f"Adam step sizes ({runs[0][0] if runs else '-'})", fontsize=10)
    return png(fig), (f"{', '.join(missing)} {NOT_MEASURED}" if missing else "")


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
                ax.plot(range(1, len(v) + 1), v, lw=1.1, color=color(ci),
                        ls="-" if ri == 0 else "--",
                        label=label + note + (f" [{rname}]" if len(runs) > 1 else ""))
                n += 1
        data = runs[0][1] if runs else {}
        for cid, name, label in finals:
            m = claim_figures(data, cid).get(name)
            s = stated_float(m)
            if s is not None and ends:
                stated_mark(ax, ends, s, marks)
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
            empty(ax, title)
            missing.append(title)
        ax.set_title(title, fontsize=9)
    fig.suptitle("Training pathologies (lines: measured; x and dashed: the notes)", fontsize=10)
    return png(fig), (f"{'; '.join(missing)}: {NOT_MEASURED}" if missing else "")


# (model, split, claim of the mean, its name, claim of the runs, their name)
SPLIT_BARS = (
    ("HGB", "random", "SPLIT-01", "HGB, KFold mean of 25", "SPLIT-01", "kfold: HGB per fold"),
    ("MLP", "random", "SPLIT-01", "MLP, KFold mean of 25", "SPLIT-01", "kfold: MLP per (seed, fold)"),
    ("HGB", "grouped", "SPLIT-04", "HGB, GroupKFold mean", "SPLIT-04", "group: HGB per fold"),
    ("MLP", "grouped", "SPLIT-04", "MLP, GroupKFold mean", "SPLIT-04", "group: MLP per (seed, fold)"),
)


def _se(v) -> float | None:
    xs = numbers(v)
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
                   color=color(ri), alpha=0.8, label=rname if i == 0 or drew == 0 else None)
            drew += 1
            s = stated_float(m)
            if s is not None and ri == 0:
                stated_mark(ax, i, s, marks)
    if not drew:
        empty(ax, "trees vs nets (SPLIT-01/04/06)")
        ax.set_title("Trees vs nets under both splits")
        return png(fig), NOT_MEASURED
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("validation RMSE (MPa), mean of 25 runs +- SE")
    ax.legend(fontsize=7)
    ax.set_title("Trees vs nets under the random and the grouped split")
    return png(fig), ""


def crossover(runs) -> tuple[bytes, str]:
    """The CPU-vs-GPU width sweep (DEV-07): time per epoch against width, per device."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curves: dict[tuple[str, str], dict[int, float]] = {}
    for rname, data, benches in runs:
        widths = numbers(value(data, "DEV-07", "widths")) or []
        for dev in ("cpu", "cuda"):
            ms = numbers(value(data, "DEV-07", f"{dev} ms per epoch"))
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
        empty(ax, "CPU vs GPU width sweep (DEV-07)")
        ax.set_title("CPU vs GPU crossover")
        return png(fig), NOT_MEASURED
    for i, ((rname, dev), pts) in enumerate(sorted(curves.items())):
        ws = sorted(pts)
        ax.loglog(ws, [pts[w] for w in ws], "o-" if dev == "cpu" else "s--", color=color(i),
                  label=f"{dev} [{rname}]")
    ax.set_xlabel("hidden width")
    ax.set_ylabel("ms per epoch (8192 rows)")
    ax.legend(fontsize=7)
    ax.set_title("CPU vs GPU crossover")
    return png(fig), "" if has_gpu else "no GPU results in these runs: CPU curve only"


# (name, title, function, the claims whose measurements or sentences it draws)
FIGURES = (
    ("fd_v", "Finite differences: error against step h, autodiff and careless-float lines", fd_v,
     ("AD-12", "AD-14", "AD-15")),
    ("adam_paths", "Adam, momentum and SGD paths on the bowl (Fig. 70)", adam_paths,
     ("ADAM-09",)),
    ("adam_panels", "Adam step sizes, beta2 and eps panels (Fig. 71)", adam_panels,
     ("ADAM-15", "ADAM-16", "ADAM-06")),
    ("pathologies", "Training pathologies: no zero_grad, SGD lr sweep, Adam vs SGD raw/scaled",
     pathologies, ("STORY-06", "STORY-07", "STORY-08", "STORY-10", "STORY-11", "STORY-12",
                   "LR-01", "LR-02", "LR-03")),
    ("trees_vs_nets", "Trees vs nets under the random and the grouped split (Fig. 68)",
     trees_vs_nets, ("SPLIT-01", "SPLIT-04", "SPLIT-06")),
    ("crossover", "CPU vs GPU width crossover (DEV-07)", crossover, ("DEV-07",)),
)
