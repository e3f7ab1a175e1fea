"""The stated-vs-measured report: ``claims.json``, ``claims.md`` and the terminal summary.

``python -m support show reports/claims.json`` prints a saved report again
(support/commands/show.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from support.machine import devices, fingerprint
from support.reports import kept as kept_runs, runs
from support.reports.controlled import control_text, controls_lines
from support.rules import verdicts
from support.rules.formatting import fmt as _fmt, md_cell as _md_cell

SCHEMA = 2
# where pytest's assertion introspection starts in a failure message
_INTROSPECTION = re.compile(r"\s+(?:assert\s|\+\s+where\s|At index\s|Use -v\b)")


def _claim_measured(variants: list[dict]):
    """A number when the claim measured one thing once, else an object of named values."""
    named = {}
    multi = len(variants) > 1
    for v in variants:
        for name, m in v.get("measurements", {}).items():
            key = name
            if multi:
                tag = v["variant"] or v["nodeid"].split("::")[-1].split("[")[0]
                key = f"{tag}:{name}"
            named[key] = m["value"]
    if len(named) == 1:
        return next(iter(named.values()))
    return named or None


def _ran_on(rec: dict, requirement: str) -> bool:
    return any(devices.satisfies(d, requirement) for d in rec.get("devices") or [])


def missing_requirements(claim, recs: list[dict]) -> list[str]:
    """One sentence per variant the registry requires (``requires``) that did not run."""
    out = []
    tests = [r for r in recs if r.get("role") != "benchmark"]
    for req in claim.requires:
        if any(_ran_on(r, req) and r["verdict"] in verdicts.EXECUTED for r in tests):
            continue
        why = sorted({r["reason"] for r in tests if _ran_on(r, req) and r["reason"]})
        out.append(f"its {req} variant did not run ({'; '.join(why)})" if why else
                   f"no {req} variant was selected in this run")
    return out


def _figure_label(f) -> str:
    return f"{f.name} [{f.variant}]" if f.variant else f.name


def _stated(c) -> str:
    if c.figures:
        return "; ".join(f"{_figure_label(f)}: {f.rule()}" for f in c.all_figures())
    return c.notes_words


def _entry(c, recs: list[dict], collected: list[str], static: list[str]) -> dict:
    tests = sorted(set(collected) | {r["nodeid"] for r in recs}) or static
    entry = {
        "id": c.id, "document": c.document, "section": c.section, "source": c.source,
        "paraphrase": c.paraphrase, "kind": c.kind, "tier": c.tier,
        "stated": _stated(c), "measured": None,
        "figures": {_figure_label(f): f.rule() for f in c.all_figures()},
        "requires": list(c.requires),
        "verdict": None, "reason": "", "expected": None, "variants": [], "tests": tests,
    }
    if c.meaning:
        entry["meaning"] = c.reading
    if c.links:
        entry["links"] = c.links
    if c.machine:
        entry["machine"] = list(c.machine)
    if recs:
        missing = missing_requirements(c, recs)
        v, why = verdicts.claim_verdict(recs, missing)
        entry["verdict"], entry["measured"] = v, _claim_measured(recs)
        entry["missing"] = missing
        for r in recs:
            exp = (r.get("expected") or {}).get(c.id) or []
            if exp and (r["verdict"] == v or entry["expected"] is None):
                entry["expected"] = exp[0]
            entry["variants"].append({
                "test": r["nodeid"], "params": r["params"], "variant": r["variant"],
                "verdict": r["verdict"], "reason": r["reason"], "role": r.get("role", "test"),
                "devices": r.get("devices", []),
                "measured": {k: m["value"] for k, m in r["measurements"].items()},
                "figures": r["measurements"], "notes": r["notes"],
                "unexpected": r.get("unexpected", []),
                "duration_s": round(r.get("duration", 0.0), 4),
                **({"control": r["control"]} if r.get("control") else {}),
            })
        reasons = [f"{r['variant'] + ': ' if r['variant'] else ''}{r['reason']}"
                   for r in recs if r["verdict"] == v and r["reason"]]
        entry["reason"] = "; ".join(dict.fromkeys([why] * bool(why) + reasons))
        if entry["expected"] and v == entry["expected"]["verdict"]:
            entry["reason"] = (entry["reason"] + " | known: " + entry["expected"]["reason"]).strip(" |")
    elif c.status == "not-testable":
        entry["verdict"], entry["reason"] = "not-testable", c.reason
    elif tests:
        entry["verdict"], entry["reason"] = "not-run", "its tests were not selected in this run"
    elif c.status == "pending":
        entry["verdict"], entry["reason"] = "pending", "no test yet (a gap in the suite)"
    else:
        entry["verdict"], entry["reason"] = "error", "registry says testable but no test exists"
    return entry


def _environment(state) -> dict:
    """The workers' fingerprint under xdist (the first worker's; keys on which the workers
    disagree are listed), else this process's."""
    envs = [state.environments[k] for k in sorted(state.environments)]
    if not envs:
        return fingerprint.fingerprint()
    env = dict(envs[0])
    differ = sorted({k for e in envs[1:] for k in set(e) | set(env) if e.get(k) != env.get(k)})
    if differ:
        env["workers_differ"] = differ
    return env


def build(state, elapsed: float = 0.0) -> dict:
    by_id: dict[str, list[dict]] = {}
    for rec in state.records:
        for cid in rec["ids"]:
            by_id.setdefault(cid, []).append(rec)
    from support.rules.sources import static_claim_markers
    static = static_claim_markers()
    claims = [_entry(c, by_id.get(cid, []), state.collected.get(cid, []), static.get(cid, []))
              for cid, c in state.registry.items()]
    summary = {v: 0 for v in verdicts.ORDER}
    for e in claims:
        summary[e["verdict"]] += 1
    known = sum(1 for e in claims if e["expected"] and e["verdict"] == e["expected"]["verdict"])
    matched = {m["label"] for r in state.records for ms in (r.get("expected") or {}).values()
               for m in ms}
    # an entry applied to a variant that ran, and matched nothing there: it did not occur
    applied = {lab for r in state.records if r["verdict"] in verdicts.EXECUTED
               for labs in (r.get("expectations_applied") or {}).values() for lab in labs}
    stale = sorted(applied - matched)
    unexpected = [p for r in state.records for p in r.get("unexpected", [])]
    return {
        "schema": SCHEMA,
        "environment": _environment(state),
        "elapsed_s": round(elapsed, 1),
        "summary": summary,
        "expected_verdicts": known,
        "stale_expectations": stale,
        "unexpected": list(dict.fromkeys(unexpected)),
        "verdicts": verdicts.MEANING,
        "claims": claims,
    }


def plain(message: str) -> str:
    """A test's failure message without pytest's introspection ("assert np.float64(...) <
    ... where ..."): what the test said, in its words."""
    text = " ".join(str(message).split())
    text = re.sub(r"^(?:[\w.]+: )?AssertionError: ", "", text)
    cut = _INTROSPECTION.search(text)
    return (text[:cut.start()] if cut and cut.start() > 0 else text).strip()


def reason_text(e: dict) -> str:
    """A claim's reason for people: each deciding variant's message in its own words, then
    the known reason (the raw test output stays in claims.json)."""
    parts = [f"{v['variant'] + ': ' if v.get('variant') else ''}{plain(v['reason'])}"
             for v in e.get("variants", []) if v.get("reason") and v.get("verdict") == e["verdict"]]
    own = str(e.get("reason", "")).split(" | known: ")[0]
    parts = list(dict.fromkeys(parts)) or ([plain(own)] if own else [])
    exp = e.get("expected")
    if exp and exp.get("verdict") == e["verdict"]:
        parts.append("known: " + exp["reason"])
    return "; ".join(parts)


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    return text[:limit - 4].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."


def kept_lines(data: dict, kept: dict) -> list[str]:
    """The claims skipped here (or partial) that a kept run on an accelerator decided."""
    kept = {cid: k for cid, k in kept.items() if k.why == "accelerator"}
    if not kept:
        return []
    out = ["not run here, decided in a kept run (that run's verdict, not this one's):"]
    for cid in sorted(kept):
        here = next((e["verdict"] for e in data["claims"] if e["id"] == cid), "")
        out.append(f"  {cid:<9} {here} here; {kept[cid].text()}")
    return out


SHOWN = 12          # a partial run's claims that did not hold in the last full run, listed


def selection_lines(data: dict, kept: dict) -> list[str]:
    """What a partial run left out, and the last verdicts of those claims in the newest kept
    full run that ran them (never as this run's): nothing for a full run."""
    sel = runs.selection(data)
    if sel.full:
        return []
    out = [f"{sel.text()}: {', '.join(sel.not_run[:12])}"
           + (f" and {len(sel.not_run) - 12} more" if len(sel.not_run) > 12 else "")]
    last = {cid: k for cid, k in kept.items() if k.why == "not run"}
    if not last:
        return out + ["  no kept full run holds their last verdicts (claims/history)"]
    counts = {v: sum(k.verdict == v for k in last.values()) for v in verdicts.ORDER}
    out.append(f"  their last verdicts, from kept full runs (not this run's): "
               + ", ".join(f"{v} {n}" for v, n in counts.items() if n)
               + (f"; {len(sel.not_run) - len(last)} in none" if len(last) < len(sel.not_run)
                  else ""))
    bad = [(cid, k) for cid, k in sorted(last.items()) if k.verdict in verdicts.NOT_HOLDING]
    out += [f"  {cid:<9} {k.text()}" for cid, k in bad[:SHOWN]]
    if len(bad) > SHOWN:
        out.append(f"  and {len(bad) - SHOWN} more that did not hold there (claims.md lists "
                   "every claim with its last kept verdict)")
    return out


def markdown(data: dict, kept: dict | None = None) -> str:
    """claims.md; ``kept``: {id: support.reports.kept.Kept} for the claims a kept run
    decided where this one could not (default: read from claims/history)."""
    kept = kept_runs.evidence(data) if kept is None else kept
    env = data["environment"]
    v = env.get("versions", {})
    lines = [
        "# Lecture 11 claims: stated vs measured", "",
        f"Environment: `{fingerprint.label(env)}` · Python {env.get('python')} · "
        f"{env.get('cpu')} · torch {v.get('torch')} · jax {v.get('jax')} · optax {v.get('optax')} · "
        f"numpy {v.get('numpy')} · scikit-learn {v.get('scikit-learn')} · suite {env.get('suite_commit')}",
        "", data_line(env), "",
        "| verdict | claims |", "|---|---|",
    ]
    lines += [f"| {k} | {n} |" for k, n in data["summary"].items() if n]
    partial = selection_lines(data, kept)
    if partial:
        lines += ["", "**" + partial[0] + "**", ""] + [f"* {x.strip()}" for x in partial[1:]]
    if data.get("unexpected"):
        lines += ["", "Not as expected (these failed the run):", ""] + [f"* {_md_cell(p)}" for p in data["unexpected"]]
    if data.get("stale_expectations"):
        lines += ["", "Expected, but did not occur in this run: " + ", ".join(data["stale_expectations"])]
    lines += [""] + notes_lines(data.get("notes") or {}) if (data.get("notes") or {}).get("checked") else []
    lines += [""] + controls_lines(data)
    on_device = {cid: k for cid, k in kept.items() if k.why == "accelerator"}
    if on_device:
        lines += ["", "Not run here, decided in a kept run (that run's verdict, not this one's):", ""]
        lines += [f"* {cid}: {k.text()}" for cid, k in sorted(on_device.items())]
    section = None
    for e in sorted(data["claims"], key=lambda e: (e["document"] != "lecture", e["section"], e["id"])):
        key = (e["document"], e["section"])
        if key != section:
            section = key
            lines += ["", f"## {e['document']}: {e['section']}", "",
                      "| id | claim | stated | measured | verdict | variants | reason |",
                      "|---|---|---|---|---|---|---|"]
        variants = ", ".join(f"{x['variant'] or 'default'}: {x['verdict']}" for x in e["variants"])
        if e.get("missing"):
            variants += "; missing: " + "; ".join(e["missing"])
        verdict = e["verdict"] + (f" ({'last kept full run' if kept[e['id']].why == 'not run' else 'kept run'}: "
                                  f"{kept[e['id']].text()})" if e["id"] in kept else "")
        verdict += control_text(e)
        lines.append("| " + " | ".join(_md_cell(x) for x in (
            e["id"], e["paraphrase"], e["stated"], _fmt(e["measured"]), verdict,
            variants, reason_text(e))) + " |")
    return "\n".join(lines) + "\n"


def write(data: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    j = out / "claims.json"
    tmp = j.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=repr))
    tmp.replace(j)
    m = out / "claims.md"
    m.write_text(markdown(data))
    return [j, m]


def known_tag(e: dict) -> str:
    """' [known]' when the verdict is the one claims/expectations.toml expects."""
    return " [known]" if e["expected"] and e["expected"]["verdict"] == e["verdict"] else ""


def summary_line(data: dict) -> str:
    return " | ".join(f"{k} {n}" for k, n in data["summary"].items() if n)


def not_holding(data: dict) -> list[dict]:
    """The claims whose verdict is not a plain holds, worst first."""
    bad = [e for e in data["claims"] if e["verdict"] in verdicts.NOT_HOLDING]
    return sorted(bad, key=lambda e: (verdicts.ORDER.index(e["verdict"]), e["id"]))


def terminal(tr, data: dict, paths: list[Path], history: Path | None = None) -> None:
    """The run's summary in the terminal; ``history``: where kept runs are (default
    claims/history)."""
    tr.section("claims: stated vs measured", sep="=")
    tr.write_line(summary_line(data) + f"   ({len(data['claims'])} claims; "
                  f"{data['expected_verdicts']} verdicts as expected)")
    evidence = kept_runs.evidence(data, history)
    for line in selection_lines(data, evidence):
        tr.write_line(line, yellow=True)
    bad = not_holding(data)
    if bad:
        tr.write_line("")
    for e in bad:
        tr.write_line(f"{e['id']:<9} {e['verdict']:<12}{known_tag(e)} {clip(reason_text(e), 400)}")
    kept = kept_lines(data, evidence)
    if kept:
        tr.write_line("")
    for line in kept:
        tr.write_line(line)
    if data.get("unexpected"):
        tr.write_line("")
        tr.write_line("NOT AS EXPECTED (these fail the run):", red=True, bold=True)
        for p in data["unexpected"]:
            tr.write_line(f"  {p[:400]}", red=True)
    if data.get("stale_expectations"):
        tr.write_line("expected, but did not occur in this run: " + ", ".join(data["stale_expectations"]))
    for line in timing_lines(data):
        tr.write_line(line)
    for line in notes_lines(data.get("notes") or {}):
        tr.write_line(line)
    for line in controls_lines(data):
        tr.write_line(line)
    tr.write_line(data_line(data["environment"]))
    tr.write_line("report: " + ", ".join(str(p) for p in paths))


def undecided_timings(data: dict) -> list[tuple[str, str, dict]]:
    """(claim, figure, its load reading) of every timing figure the run left undecided."""
    out = []
    for e in data["claims"]:
        for v in e.get("variants", []):
            for name, f in (v.get("figures") or {}).items():
                if isinstance(f, dict) and f.get("outcome") == "undecided" and f.get("load"):
                    label = f"{name} [{v['variant']}]" if v.get("variant") else name
                    out.append((e["id"], label, f["load"]))
    return out


def timing_lines(data: dict) -> list[str]:
    """What the machine did while the undecided timing figures were measured, and the one
    command that reruns just their claims."""
    found = undecided_timings(data)
    if not found:
        return []
    lines = ["timing figures left undecided, and the machine's load during their trials "
             "(cores other work kept busy):"]
    for cid, name, load in found:
        how = (f"busy: {load.get('quiet_rounds') or 0} of {load['rounds']} rounds quiet, "
               f"other work {load['cores']:.2f} cores on average, interval widened by the "
               f"figure's load sensitivity (x{load['widened'][0]:.3g} to x{load['widened'][1]:.3g})"
               if load.get("busy") and load.get("widened") else
               f"quiet ({load['rounds']} rounds, other work {load['cores']:.2f} cores on "
               f"average): the figure itself sits at its line")
        if load.get("waited_s"):
            how += f"; waited {load['waited_s']:.1f} s for quiet moments"
        lines.append(f"  {cid} {name}: {how}")
    ids = sorted({cid for cid, _, _ in found})
    lines.append("  rerun just these on a quieter machine: python -m pytest "
                 + " ".join(f"--claim {c}" for c in ids))
    return lines


def data_line(env: dict) -> str:
    """Which concrete data the run read (a named path, the cache or the suite's own copy)."""
    d = env.get("concrete_data") or {}
    words = {"named": "the path named", "cache": "the user cache",
             "bundled": "the copy that ships with the suite",
             "none": "none (the data claims were skipped)"}
    if not d:
        return "concrete data: not recorded in this report"
    return f"concrete data: {words.get(d.get('source'), d.get('source'))}" + (
        f" ({d['file']})" if d.get("file") else "")


def notes_lines(n: dict) -> list[str]:
    """What the notes check says: the claims whose sentence changed or vanished."""
    if not n.get("checked"):
        return []
    head = (f"notes: {n['located']} claims located in {len(n['paths'])} file(s)"
            + (f", {len(n['moved'])} moved" if n.get("moved") else ""))
    if not n.get("changed"):
        return [head + "; every sentence as recorded"]
    out = [head + f"; {len(n['changed'])} sentence(s) changed or missing: revisit their tests"]
    out += [f"  {c['id']:<9} {c['status']:<8} {c['document']} {c['recorded']}"
            + (f" (now line {c['line']})" if c.get("line") else "") for c in n["changed"]]
    return out
