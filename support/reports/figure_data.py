"""What the notes' figures draw, read from a run's claims.json (no matplotlib needed).

Which measurement feeds which figure is :data:`DRAWN` (claim ID: the recorded names each
figure reads); a figure reads nothing else, and a lint (support/tests/test_registry_lints.py)
checks that a test of the claim records each one.
"""
from __future__ import annotations

import fnmatch

from support.rules import tolerances

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
            raise KeyError(f"support.reports.figures reads {name!r} of {self.cid}, which DRAWN does "
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


def numbers(v) -> list[float] | None:
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         for x in v):
        return [float(x) for x in v]
    return None
