"""Runs of the suite as data: a run's claims report and benchmark files, loaded from a
``claims.json``, a run folder or a pytest-benchmark JSON, and what differs between runs
(verdicts, figures beyond their tolerance, API facts, environments). The matrix
(support/reports/matrix.py) and the diff (support/reports/diff.py) are two views of this model.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from support.machine import fingerprint
from support.paths import CLAIMS, REPORTS, ROOT
from support.rules import formatting, tolerances
from support.rules.verdicts import EXECUTED as RAN

HISTORY = CLAIMS / "history"
# a claim that ran: its figures can be compared across runs
EXECUTED = RAN + ("partial",)
# the claims.json schemas the matrix reads (1: figures judged by "within"; 2: by "outcome")
SCHEMAS = (1, 2)
TIMING = re.compile(r"time|wall|speed|(^|[_ ])(ms|s)($|[_ ])|per epoch", re.I)


# --------------------------------------------------------------------------- loading
@dataclass
class Run:
    """One environment's run: its claims report and the benchmark files beside it."""
    name: str
    path: Path
    data: dict
    benchmarks: list[dict] = field(default_factory=list)

    @property
    def env(self) -> dict:
        return self.data.get("environment", {})

    @property
    def label(self) -> str:
        return fingerprint.label(self.env)

    @property
    def claims(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.data.get("claims", [])}


def is_benchmark_json(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and \
        "claims" not in data


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _bench_files(folder: Path) -> list[tuple[Path, dict]]:
    out = []
    for p in sorted(folder.rglob("*.json")):
        if p.name == "claims.json" or p.name.endswith(".tmp"):
            continue
        d = _read_json(p)
        if is_benchmark_json(d):
            out.append((p, d))
    return out


def _run_name(folder: Path) -> str:
    try:
        rel = folder.resolve().relative_to(ROOT)
        parts = rel.parts
        if parts[:2] == ("claims", "history"):
            return "/".join(parts[2:]) or folder.name
        return "/".join(parts)
    except ValueError:
        return folder.name


def default_inputs() -> list[Path]:
    """Every run kept in claims/history/ and every tox env's report in reports/."""
    found: list[Path] = []
    if HISTORY.is_dir():
        found += sorted(p.parent for p in HISTORY.rglob("claims.json"))
    if REPORTS.is_dir():
        found += sorted(p.parent for p in REPORTS.glob("*/claims.json")
                        if p.parent.name != "matrix")
    return found


def load(inputs: list[Path]) -> tuple[list[Run], list[dict]]:
    """Runs from claims.json files or folders; stray benchmark files become their own runs.

    Returns the runs and a list of problems (unreadable inputs) to show in the report.
    """
    runs: list[Run] = []
    problems: list[dict] = []
    seen: set[Path] = set()
    seen_content: set = set()
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            cj = p / "claims.json"
            if cj.exists():
                p = cj
            else:
                benches = _bench_files(p)
                if not benches:
                    problems.append({"path": str(raw), "problem": "no claims.json or benchmark JSON in it"})
                    continue
                runs.append(_bench_only_run(p, benches))
                continue
        if p.resolve() in seen:
            continue
        seen.add(p.resolve())
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest and digest in seen_content:
            # the same report kept in claims/history/ and still in reports/: one column
            continue
        seen_content.add(digest)
        data = _read_json(p)
        if data is None:
            problems.append({"path": str(raw), "problem": "not readable as JSON"})
            continue
        if is_benchmark_json(data):
            runs.append(_bench_only_run(p.parent, [(p, data)], name=p.stem))
            continue
        if not isinstance(data, dict) or "claims" not in data:
            problems.append({"path": str(raw), "problem": "neither a claims report nor benchmark JSON"})
            continue
        if data.get("schema") not in SCHEMAS:
            problems.append({"path": str(raw), "problem": f"schema {data.get('schema')!r}, "
                             f"read as schema {max(SCHEMAS)}"})
        folder = p.parent
        runs.append(Run(name=_run_name(folder), path=folder, data=data,
                        benchmarks=[dict(d, _file=str(bp)) for bp, d in _bench_files(folder)]))
    _unique_names(runs)
    return runs, problems


def _bench_only_run(folder: Path, benches, name: str | None = None) -> Run:
    info = benches[0][1].get("machine_info", {})
    # the suite's benchmarks carry claims.json's environment; a file made otherwise has
    # only pytest-benchmark's own machine description
    env = info.get("environment") or {"python": info.get("python_version"),
                                       "cpu": (info.get("cpu") or {}).get("brand_raw")}
    data = {"schema": max(SCHEMAS), "environment": env, "summary": {}, "claims": []}
    return Run(name=name or _run_name(folder), path=folder, data=data,
               benchmarks=[dict(d, _file=str(p)) for p, d in benches])


def _unique_names(runs: list[Run]) -> None:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
        if counts[r.name] > 1:
            r.name = f"{r.name}#{counts[r.name]}"


# --------------------------------------------------------------------------- comparing
def _outcome(m: dict) -> str | None:
    """A figure's outcome in a report of either schema (1: ``within``; 2: ``outcome``)."""
    if "outcome" in m:
        return m["outcome"]
    return {True: "within", False: "outside"}.get(m.get("within"))


def _mark(m: dict) -> str:
    o = _outcome(m)
    return "" if o in ("within", None) else f" ({'out' if o == 'outside' else o})"


def figure_moved(have: dict[str, dict], stated) -> bool:
    """Whether one figure, measured in several runs, moved: its decided outcome changed
    (an undecided interval is no change), or its value moved beyond its tolerance."""
    decided = {_outcome(m) for m in have.values()} - {None, "undecided"}
    if len(decided) > 1:
        return True
    if stated is None:          # a bound alone: only crossing it is a move
        return False
    ref = next(iter(have.values()))
    return any(tolerances.moved(ref["value"], m["value"], stated, m.get("tolerance"))
               for m in have.values())


def _figures(claim: dict) -> dict[str, dict]:
    """Every recorded measurement of a claim, keyed 'variant:name' when there are variants."""
    out = {}
    variants = claim.get("variants", [])
    multi = len(variants) > 1
    for v in variants:
        tag = v.get("variant") or v.get("test", "").split("::")[-1].split("[")[0]
        for name, m in (v.get("figures") or {}).items():
            out[f"{tag}:{name}" if multi else name] = m
    return out


def differences(runs: list[Run]) -> list[dict]:
    """What differs between the runs, claim by claim, most important first."""
    rows = []
    ids = sorted({cid for r in runs for cid in r.claims})
    for cid in ids:
        cells = {r.name: r.claims.get(cid) for r in runs}
        verdicts = {n: (c or {}).get("verdict") for n, c in cells.items()}
        executed = {n: v for n, v in verdicts.items() if v in EXECUTED}
        any_claim = next(c for c in cells.values() if c)
        base = {"id": cid, "paraphrase": any_claim.get("paraphrase", ""),
                "section": any_claim.get("section", ""), "verdicts": verdicts}
        if any_claim.get("kind") == "d":
            # a timing claim moves with the machine's load as much as with a release
            base["paraphrase"] = "[timing claim: compare runs on an idle machine] " + base["paraphrase"]
        if len(set(executed.values())) > 1:
            rows.append(dict(base, kind="verdict flipped",
                             detail=", ".join(f"{n}: {v}{_known(cells[n])}"
                                              for n, v in executed.items())))
        na = [n for n, v in verdicts.items() if v == "not-applicable"]
        if na and executed:
            reasons = "; ".join(dict.fromkeys(cells[n].get("reason", "") for n in na if cells[n]))
            rows.append(dict(base, kind="newly not-applicable",
                             detail=f"not-applicable in {', '.join(na)} ({reasons}); "
                                    f"executed in {', '.join(executed)}"))
        figs = {n: _figures(c) for n, c in cells.items() if c and verdicts[n] in EXECUTED}
        names = sorted({k for f in figs.values() for k in f})
        for fname in names:
            have = {n: f[fname] for n, f in figs.items() if fname in f}
            if len(have) < 2:
                continue
            ms = list(have.values())
            stated = next((m["stated"] for m in ms if "stated" in m), None)
            judged = any(_outcome(m) is not None for m in ms)
            if stated is not None or judged:
                if figure_moved(have, stated):
                    timing = " [a timing: it moves with the load too]" if TIMING.search(fname) else ""
                    rows.append(dict(base, kind="figure moved", figure=fname,
                                     stated=stated if stated is not None else ms[0].get("rule"),
                                     values={n: m["value"] for n, m in have.items()},
                                     detail=f"{fname}{timing}: {ms[0].get('rule') or f'stated {stated}'}; " + ", ".join(
                                         f"{n}: {fmt(m['value'])}{_mark(m)}"
                                         for n, m in have.items())))
            else:
                vals = [m["value"] for m in ms]
                # Unstated floats are measurements (times, errors) that always jitter; a
                # changed count, flag or string is an API fact that changed.
                if all(isinstance(v, (bool, int, str)) for v in vals) and \
                        len({json.dumps(v) for v in vals}) > 1:
                    rows.append(dict(base, kind="value changed", figure=fname,
                                     values={n: m["value"] for n, m in have.items()},
                                     detail=f"{fname}: " + ", ".join(
                                         f"{n}: {fmt(m['value'])}" for n, m in have.items())))
    order = ("verdict flipped", "newly not-applicable", "figure moved", "value changed")
    rows.sort(key=lambda r: (order.index(r["kind"]), r["id"]))
    return rows


def coverage_gaps(runs: list[Run]) -> list[dict]:
    """Claims executed in some runs but not in others (a tier or device not selected)."""
    out = []
    ids = sorted({cid for r in runs for cid in r.claims})
    for cid in ids:
        verdicts = {r.name: (r.claims.get(cid) or {}).get("verdict") for r in runs}
        ran = [n for n, v in verdicts.items() if v in EXECUTED]
        idle = [n for n, v in verdicts.items() if v in ("not-run", "skipped", None)]
        if ran and idle:
            out.append({"id": cid, "ran": ran, "idle": {n: verdicts[n] or "absent" for n in idle}})
    return out


# --------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class Selection:
    """What a run selected: its tiers and what narrowed them (the report's ``selection``,
    written by the claims plugin), and the claims it left not run. A report written before
    the plugin recorded it is judged by its not-run claims alone."""

    tiers: tuple[str, ...] | None           # None: not recorded
    default_tiers: tuple[str, ...] = ()
    narrowed: tuple[str, ...] = ()          # "--claim TAPE-07", "-k adam", "--lf", ...
    not_run: tuple[str, ...] = ()

    @property
    def full(self) -> bool:
        """Every default tier, nothing narrowed (recorded), or nothing left not run."""
        if self.tiers is None:
            return not self.not_run
        return set(self.default_tiers) <= set(self.tiers) and not self.narrowed

    def key(self) -> tuple:
        """Two runs of one key selected the same claims."""
        if self.full:
            return ("full",)
        if self.tiers is None:
            return ("not recorded", self.not_run)
        return (self.tiers, self.narrowed)

    def tag(self) -> str:
        """A word for a kept run's folder: "" for a full run, its tiers when only they
        were narrowed ("fast"), else "partial"."""
        if self.full:
            return ""
        return "-".join(self.tiers) if self.tiers and not self.narrowed else "partial"

    def text(self) -> str:
        if self.full:
            chosen = (f"tiers {', '.join(self.tiers)}" if self.tiers and
                      set(self.tiers) != set(self.default_tiers) else "every default tier")
            return chosen + (f" ({len(self.not_run)} claims with no test in them)"
                             if self.not_run else "")
        what = [f"tiers {', '.join(self.tiers)}"] if self.tiers is not None else []
        what += list(self.narrowed)
        head = "a partial run: " + ("; ".join(what) if what else "its selection is not recorded")
        return f"{head}; {len(self.not_run)} claims not run"


def not_run(data: dict) -> list[str]:
    """The claims a run left not run (its tests were not selected)."""
    return [c["id"] for c in data.get("claims", []) if c.get("verdict") == "not-run"]


def selection(data: dict) -> Selection:
    """What the run of the report ``data`` selected."""
    left = tuple(not_run(data))
    sel = data.get("selection")
    if not isinstance(sel, dict):
        return Selection(None, not_run=left)
    narrowed = [f"--claim {' '.join(sel['claims'])}"] if sel.get("claims") else []
    narrowed += [f"-k {sel['keyword']!r}"] if sel.get("keyword") else []
    narrowed += [f"-m {sel['markexpr']!r}"] if sel.get("markexpr") else []
    narrowed += [" ".join(sel["paths"])] if sel.get("paths") else []
    narrowed += ["--lf"] if sel.get("last_failed") else []
    return Selection(tuple(sel.get("tiers") or ()), tuple(sel.get("default_tiers") or ()),
                     tuple(narrowed), left)


# --------------------------------------------------------------------------- formatting
def fmt(v) -> str:
    """A matrix cell: short lists, short text."""
    return formatting.fmt(v, max_items=4, max_chars=60)


def cell_value(claim: dict | None, limit: int = 3) -> str:
    """The measured figures worth showing in a cell: stated ones first."""
    if not claim:
        return ""
    figs = _figures(claim)
    stated = [(k, m) for k, m in figs.items() if "stated" in m]
    other = [(k, m) for k, m in figs.items() if "stated" not in m and not isinstance(m.get("value"), list)]
    pick = (stated + other)[:limit]
    if len(figs) == 1 and pick:
        return fmt(pick[0][1]["value"])
    text = "; ".join(f"{_bare(k, claim)}={fmt(m['value'])}" for k, m in pick)
    more = len(figs) - len(pick)
    return text + (f"; +{more}" if more > 0 else "")


def _bare(key: str, claim: dict) -> str:
    """A measurement's name without the variant tag _figures put before it (names may hold
    colons themselves: "kfold: HGB per fold")."""
    for v in claim.get("variants", []):
        tag = v.get("variant") or v.get("test", "").split("::")[-1].split("[")[0]
        if key.startswith(f"{tag}:") and key[len(tag) + 1:] in (v.get("figures") or {}):
            return key[len(tag) + 1:]
    return key


def fingerprint_rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """Environment facts as rows (what distinguishes the columns)."""
    keys = []
    for r in runs:
        for k in r.env.get("versions", {}):
            if k not in keys:
                keys.append(k)
    rows = [("label", [r.label for r in runs]),
            ("python", [str(r.env.get("python", "")) for r in runs])]
    rows += [(name, [read(r.env) for r in runs]) for name, read in fingerprint.MACHINE]
    main = ["torch", "jax", "jaxlib", "optax", "numpy", "scipy", "scikit-learn"]
    for k in main + [k for k in keys if k not in main]:
        rows.append((k, [str(r.env.get("versions", {}).get(k, "-")) for r in runs]))
    prec = []
    for r in runs:
        for k in r.env.get("precision", {}):
            if k not in prec:
                prec.append(k)
    for k in prec:
        rows.append((k, [str(r.env.get("precision", {}).get(k, "-")) for r in runs]))
    rows.append(("threads", [str((r.env.get("threads") or {}).get("torch_threads", "")) for r in runs]))
    rows.append(("suite commit", [str(r.env.get("suite_commit", "")) for r in runs]))
    rows.append(("selection", [selection(r.data).text() for r in runs]))
    rows.append(("wall time (s)", [str(r.data.get("elapsed_s", "")) for r in runs]))
    rows.append(("verdicts", [", ".join(f"{k} {n}" for k, n in r.data.get("summary", {}).items() if n)
                              for r in runs]))
    return rows


def _sections(runs: list[Run]) -> list[tuple[tuple[str, str], list[str]]]:
    meta: dict[str, dict] = {}
    for r in runs:
        for cid, c in r.claims.items():
            meta.setdefault(cid, c)
    groups: dict[tuple[str, str], list[str]] = {}
    for cid, c in sorted(meta.items(), key=lambda kv: (kv[1].get("document") != "lecture",
                                                        kv[1].get("section", ""), kv[0])):
        groups.setdefault((c.get("document", ""), c.get("section", "")), []).append(cid)
    return list(groups.items())


def _known(claim: dict) -> str:
    """' (known)' when the verdict is the one claims/expectations.toml lists for that run."""
    exp = claim.get("expected") or {}
    return " (known)" if exp.get("verdict") and exp["verdict"] == claim.get("verdict") else ""
