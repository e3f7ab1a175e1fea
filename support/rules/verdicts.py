"""The verdict vocabulary and the rules that turn what a test did into a verdict.

Everything that shows or decides a verdict reads this module: the plugin (a variant's
verdict, whether it fails the run), the report (a claim's verdict from its variants), the
terminal summary, the matrix, the figures and the annotated notes. The rules are plain
functions so that they are tested without running pytest.

A figure recorded with ``claim.check`` ends in one of four *outcomes* (see
:func:`support.rules.tolerances.judge`): ``within`` its tolerance, ``outside`` it (resolved beyond
noise), ``broken`` (a bound of the qualitative claim is contradicted) or ``undecided`` (the
measured interval straddles a bound or an edge of the tolerance).
"""
from __future__ import annotations

from dataclasses import dataclass

# name -> (meaning, colour); the order is the order of severity, worst first
VERDICTS: dict[str, tuple[str, str]] = {
    "error": ("the test broke, or a claim test recorded nothing", "#7b1fa2"),
    "fails": ("the claim is contradicted: an assertion of the sentence, or a bound it states, "
              "does not hold", "#c62828"),
    "drift": ("the qualitative claim holds; a stated figure is outside its tolerance, "
              "resolved beyond noise", "#ef6c00"),
    "inconclusive": ("a timing or statistical comparison whose interval straddles its "
                     "threshold or tolerance: neither holds nor fails", "#f9a825"),
    "partial": ("what ran holds, but variants the claim requires (e.g. its CUDA variant) "
                "did not run", "#0277bd"),
    "holds": ("the claim holds, every required variant ran and every stated figure is "
              "within its tolerance", "#2e7d32"),
    "not-applicable": ("does not apply to this environment (an API absent in this version), "
                       "with the reason", "#607d8b"),
    "skipped": ("could not run here (no GPU, no data, benchmarks disabled), with the reason",
                "#9e9e9e"),
    "not-run": ("the claim has tests, but this run did not select them", "#bdbdbd"),
    "pending": ("no test yet: a gap in the suite, shown so nothing is silently missing",
                "#8d6e63"),
    "not-testable": ("pedagogy or opinion (kind h), with the reason", "#cfd8dc"),
}
ORDER = tuple(VERDICTS)
MEANING = {v: m for v, (m, _) in VERDICTS.items()}
COLOURS = {v: c for v, (_, c) in VERDICTS.items()}
# the "verdict" of a benchmark variant that ran: it informs its claim and decides nothing
BENCHMARK = "benchmark"
# verdicts of a variant that executed its test body
EXECUTED = ("error", "fails", "drift", "inconclusive", "holds")
# a verdict that fails the run unless claims/expectations.toml lists it
MUST_BE_EXPECTED = ("error", "fails", "drift")
# what may be listed in claims/expectations.toml: a failure it names by its figure (an error
# names none: it is a defect of the test, never a known verdict)
EXPECTABLE = ("fails", "drift")
# shown in the terminal and listed in the errata: everything that is not a plain holds
NOT_HOLDING = ("error", "fails", "drift", "inconclusive", "partial")


def worst(verdicts) -> str:
    return min(verdicts, key=ORDER.index)


# --------------------------------------------------------------------------- one variant
class BrokenBound(AssertionError):
    """Raised by ``claim.check(..., halt=True)`` when a figure breaks its bound: the failure is
    the figure's, named by it (as a known failure names it), not an assertion's wording."""


@dataclass
class Outcome:
    """How one test (one variant) ended, before expectations are consulted."""

    verdict: str
    reason: str = ""
    # the figure names that decided a drift / a broken bound / an undecided comparison
    figures: tuple[str, ...] = ()
    # the assertion message (fails) or exception text (error), for expectations to match
    message: str = ""


def figure_outcomes(measurements: dict) -> dict[str, list[str]]:
    """Figure names grouped by outcome (only figures recorded with ``claim.check``)."""
    out: dict[str, list[str]] = {}
    for name, m in measurements.items():
        if "outcome" in m:
            out.setdefault(m["outcome"], []).append(name)
    return out


def _describe(measurements: dict, names: list[str], what: str) -> str:
    from support.rules.formatting import fmt
    parts = []
    for n in names:
        m = measurements[n]
        iv = m.get("interval")
        val = fmt(m["value"]) + (f" [{fmt(iv[0])}, {fmt(iv[1])}]" if iv else "")
        parts.append(f"{n} = {val} {what} {m.get('rule', '')}".rstrip())
    return "; ".join(parts)


def _describe_broken(measurements: dict, names: list[str]) -> str:
    """Broken figures in words: a bound broken, or a stated figure that is the sentence
    itself (fails_outside, decided by its tolerance) contradicted."""
    return "; ".join(_describe(measurements, [n], "contradicts the sentence's"
                               if measurements[n].get("decided_by") == "tolerance"
                               else "breaks its bound:") for n in names)


def variant_outcome(*, when: str, passed: bool, skipped: bool, skip_reason: str = "",
                    not_applicable: bool = False, assertion: bool = False,
                    message: str = "", measurements: dict | None = None,
                    benchmark: bool = False, halted: bool = False) -> Outcome:
    """The verdict of one executed (or skipped) variant.

    ``when`` is pytest's phase ("setup", "call", "teardown"); ``assertion`` whether the
    exception was an AssertionError; ``halted`` whether it was :class:`BrokenBound` (a
    figure's bound, raised at once by ``claim.check(..., halt=True)``)."""
    ms = measurements or {}
    by = figure_outcomes(ms)
    flat = " ".join(line.strip() for line in message.splitlines() if line.strip())
    if skipped:
        return Outcome("not-applicable" if not_applicable else "skipped", skip_reason)
    if not passed:
        if halted and when == "call" and by.get("broken"):
            return Outcome("fails", _describe_broken(ms, by["broken"]),
                           tuple(by["broken"]))
        if assertion and when == "call":
            extra = _describe(ms, by.get("broken", []), "against")
            return Outcome("fails", flat + (f"; also {extra}" if extra else ""),
                           tuple(by.get("broken", [])), message)
        return Outcome("error", flat, (), message)
    if benchmark:
        return Outcome(BENCHMARK, "a benchmark: it records statistics and decides nothing")
    if not ms:
        return Outcome("error", "the claim test ended without recording a measurement "
                       "(use claim.check or claim.record)")
    if by.get("broken"):
        return Outcome("fails", _describe_broken(ms, by["broken"]), tuple(by["broken"]))
    # the worst decided figure decides: a stated figure that left its tolerance beyond noise
    # has moved (a drift), whatever an undecided comparison beside it says, which the reason
    # names; inconclusive only when nothing decided is wrong
    open_bounds = [n for n in by.get("undecided", []) if ms[n].get("decided_by") == "bound"]
    if by.get("outside"):
        reason = _describe(ms, by["outside"], "is outside")
        if open_bounds:
            reason += ("; meanwhile " + _describe(ms, open_bounds, "straddles")
                       + " (the qualitative claim is undecided)")
        return Outcome("drift", reason, tuple(by["outside"]))
    if open_bounds:
        return Outcome("inconclusive", _describe(ms, open_bounds, "straddles"),
                       tuple(open_bounds))
    if by.get("undecided"):
        return Outcome("inconclusive", _describe(ms, by["undecided"], "straddles"),
                       tuple(by["undecided"]))
    return Outcome("holds")


# --------------------------------------------------------------------------- expectations
def unexpected(outcome: Outcome, entries: list) -> tuple[list, str]:
    """Check ``outcome`` against the expectation entries that apply to its claim and variant.

    Returns ``(matched entries, problem)``; ``problem`` is "" when the outcome is what is
    known (or needs no expectation), else a sentence saying what is unexpected. An entry
    matches only the failure it names: the figures that drift or whose bound breaks
    (``measurement``). A fails from an assertion names no figure, so no entry knows it."""
    v = outcome.verdict
    same = [e for e in entries if e.verdict == v]
    if v in MUST_BE_EXPECTED:
        if v == "error" or (v == "fails" and outcome.message):
            if same:
                return [], (f"{v} by {'an assertion' if v == 'fails' else 'an exception'}, not "
                            f"as claims/expectations.toml says "
                            f"({'; '.join(e.names_failure() for e in same)}): {outcome.reason}")
            return [], f"unexpected {v}: {outcome.reason}"
        matched = [e for e in same if e.matches(outcome)]
        named = {n for e in matched for n in e.measurements}
        loose = [f for f in outcome.figures if f not in named]
        if loose:
            return matched, (f"{v} not listed in claims/expectations.toml: "
                             f"{', '.join(loose)} ({outcome.reason})")
        return matched, ""
    if v in ("holds", "drift") and any(e.verdict == "fails" for e in entries):
        known = next(e for e in entries if e.verdict == "fails")
        return [], (f"UNEXPECTED PASS: claims/expectations.toml says it fails "
                    f"({known.reason}) but it {v} here")
    return [], ""


# --------------------------------------------------------------------------- one claim
def claim_verdict(variants: list[dict], missing: list[str]) -> tuple[str, str]:
    """A claim's verdict from its variant records and the required variants that did not
    run (``missing``: one sentence each). Benchmarks (``role == "benchmark"``) inform but
    never decide."""
    deciding = [r for r in variants if r.get("role") != "benchmark"]
    executed = [r["verdict"] for r in deciding if r["verdict"] in EXECUTED]
    if executed:
        v = worst(executed)
        if v == "holds" and missing:
            return "partial", "required variants did not run: " + "; ".join(missing)
        return v, ""
    if deciding and all(r["verdict"] == "not-applicable" for r in deciding):
        return "not-applicable", ""
    if deciding:
        return "skipped", ""
    if variants:
        if all(r["verdict"] == "skipped" for r in variants):
            return "skipped", ""
        return "not-run", ("only its benchmarks ran; benchmarks inform a claim but decide "
                           "nothing: its verdict comes from its timing test (tier slow)")
    return "not-run", ""
