"""The expectations file (``claims/expectations.toml``): the verdicts known not to be
"holds" (a sentence of the notes that is false as worded, a figure that moved), each naming
the failure it expects, keyed by variant and framework version where that matters, and the
correction it suggests for the sentence (``erratum``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from support.paths import CLAIMS
from support.rules.entries import EntryError, _check_versions, version_mismatch

EXPECTATIONS = CLAIMS / "expectations.toml"


@dataclass(frozen=True)
class Span:
    """Words of the notes that are wrong (``quote``, as the notes print them) and the words
    to put instead (``correction``). ``source`` names the line(s) that hold the quote where
    they are not the claim's own ("L:183": the reason given for a table's figure, in the
    paragraph under it)."""

    quote: str
    correction: str
    source: str = ""


@dataclass(frozen=True)
class Erratum:
    """The correction a known fails or drift suggests for its sentence, written once beside
    the verdict: every span of the notes' words that is wrong, each with the words to put
    instead (``spans``, in the order the notes print them), one plain sentence of what was
    found (``finding``) and the figures to show beside it (``show``; by default the entry's
    ``measurement``). A sentence false in one place has one span, written
    ``{ quote = ..., correction = ..., finding = ... }``; one false in several places lists
    them: ``{ spans = [{ quote = ..., correction = ... }, ...], finding = ... }``."""

    spans: tuple[Span, ...]
    finding: str
    show: tuple = ()


ERRATUM_FIELDS = ("quote", "correction", "finding", "show", "spans", "source")
SPAN_FIELDS = ("quote", "correction", "source")
FINDING_MAX = 320        # a table cell of a sentence or two
# a span's lines, as a catalogue reference names them: "L:183", "S:12-14", "L:71,73"
SPAN_SOURCE = re.compile(r"^[LS]:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
_FORM = ("erratum = { quote = ..., correction = ..., finding = ... }, or with several "
         "spans: erratum = { spans = [{ quote = ..., correction = ... }, ...], finding = ... }")


def _span(where: str, raw, errors: list) -> Span | None:
    if not isinstance(raw, dict):
        errors.append(f"{where}: a span is a table {{ quote = ..., correction = ... }}, not "
                      f"{raw!r}")
        return None
    unknown = set(raw) - set(SPAN_FIELDS)
    if unknown:
        errors.append(f"{where}: unknown span field(s) {sorted(unknown)}")
    empty = [k for k in SPAN_FIELDS[:2] if not isinstance(raw.get(k), str) or not raw[k].strip()]
    if empty:
        errors.append(f"{where}: the erratum needs {', '.join(empty)} (the wrong words as "
                      "printed, the words to put instead)")
        return None
    if raw["quote"].split() == raw["correction"].split():
        errors.append(f"{where}: the erratum's correction repeats its quote "
                      f"\"{raw['quote']}\"")
    source = raw.get("source", "")
    if source and not (isinstance(source, str) and SPAN_SOURCE.match(source)):
        errors.append(f"{where}: a span's source names the notes' line(s) that hold its "
                      f"quote, as \"L:183\" or \"S:12-14\", not {source!r}")
        source = ""
    return Span(raw["quote"], raw["correction"], source)


def _erratum(where: str, raw, errors: list) -> Erratum | None:
    if not isinstance(raw, dict):
        errors.append(f"{where}: erratum must be a table: {_FORM}")
        return None
    unknown = set(raw) - set(ERRATUM_FIELDS)
    if unknown:
        errors.append(f"{where}: unknown erratum field(s) {sorted(unknown)}")
    finding = raw.get("finding")
    if "spans" in raw:
        mixed = [k for k in SPAN_FIELDS if k in raw]
        if mixed:
            errors.append(f"{where}: an erratum with spans keeps {', '.join(mixed)} in its "
                          f"spans: {_FORM}")
        items = raw["spans"]
        if not isinstance(items, list) or not items:
            errors.append(f"{where}: spans is a list of one or more {{ quote = ..., "
                          "correction = ... }")
            items = []
        spans = [_span(f"{where} span {i + 1}", s, errors) for i, s in enumerate(items)]
    else:
        spans = [_span(where, {k: raw[k] for k in SPAN_FIELDS if k in raw}, errors)]
    if not isinstance(finding, str) or not finding.strip():
        errors.append(f"{where}: the erratum needs finding (what was found, in a sentence)")
        return None
    if len(finding) > FINDING_MAX:
        errors.append(f"{where}: the erratum's finding is {len(finding)} characters; "
                      f"say it in a sentence or two (at most {FINDING_MAX}), the reason holds "
                      "the rest")
    quotes = [s.quote for s in spans if s is not None]
    twice = sorted({q for q in quotes if quotes.count(q) > 1})
    if twice:
        errors.append(f"{where}: the erratum quotes {twice} more than once; a span is "
                      "found by its quote, so quote enough words to tell the places apart")
    if None in spans or not spans:
        return None
    show = raw.get("show", ())
    show = (show,) if isinstance(show, str) else tuple(show)
    return Erratum(tuple(spans), finding, show)


@dataclass
class Expectation:
    """A known verdict other than holds, naming the failure it expects by the registry
    figure(s) that drift or whose bound breaks (``measurement``): a figure's name is stable
    where an assertion's wording is not. Any other failure of the same variant (another
    figure, or an assertion) is unexpected."""

    id: str
    verdict: str
    reason: str
    variant: str = ""          # substring of the variant id; "" = every variant
    versions: dict = field(default_factory=dict)
    measurement: object = ""   # a figure name, or a list of them
    erratum: Erratum | None = None

    def applies(self, variant_id: str) -> bool:
        if self.variant and self.variant not in variant_id:
            return False
        return version_mismatch(self.versions) is None

    @property
    def measurements(self) -> list[str]:
        m = self.measurement
        return [m] if isinstance(m, str) and m else list(m or [])

    def matches(self, outcome) -> bool:
        """Whether ``outcome`` (a support.rules.verdicts.Outcome of this verdict) is the failure
        this entry names."""
        if outcome.verdict != self.verdict:
            return False
        return bool(set(self.measurements) & set(outcome.figures))

    def names_failure(self) -> str:
        return "figure " + ", ".join(self.measurements)

    def label(self) -> str:
        extra = f" [{self.variant}]" if self.variant else ""
        ver = f" when {self.versions}" if self.versions else ""
        what = f" ({', '.join(self.measurements)})" if self.measurements else ""
        return f"{self.id}{extra} {self.verdict}{what}{ver}"


EXPECTATION_FIELDS = ("id", "verdict", "reason", "variant", "versions", "measurement", "erratum")
# the verdicts whose sentence is to be corrected: each needs an erratum
CORRECTED = ("fails", "drift")


def load_expectations(path: Path = EXPECTATIONS, registry: dict | None = None) -> list[Expectation]:
    from support.rules.verdicts import EXPECTABLE
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out, errors = [], []
    for i, entry in enumerate(data.get("expect", [])):
        where = f"expectations.toml entry {i + 1} ({entry.get('id')})"
        unknown = set(entry) - set(EXPECTATION_FIELDS) - {"match"}
        if unknown:
            errors.append(f"{where}: unknown field(s) {sorted(unknown)}")
        claim = (registry or {}).get(entry.get("id"))
        if registry is not None and claim is None:
            errors.append(f"{where}: no such claim in the registry")
        verdict = entry.get("verdict")
        if verdict not in EXPECTABLE:
            errors.append(f"{where}: verdict must be one of {', '.join(EXPECTABLE)}")
        if not entry.get("reason"):
            errors.append(f"{where}: every expectation needs a reason")
        exp = Expectation(**{k: v for k, v in entry.items()
                             if k in EXPECTATION_FIELDS and k != "erratum"})
        if "erratum" in entry:
            exp.erratum = _erratum(where, entry["erratum"], errors)
            if verdict not in CORRECTED:
                errors.append(f"{where}: only a known {' or '.join(CORRECTED)} suggests a "
                              "correction (erratum)")
        if "match" in entry:
            errors.append(f"{where}: a known failure names the figure whose bound breaks "
                          "(measurement = ...), never the wording of a message (match)")
        if not exp.measurements:
            errors.append(f"{where}: name the failure: measurement = \"the figure that "
                          "drifts\" or \"the figure whose bound breaks\"")
        if claim is not None:
            bad = [m for m in exp.measurements if m not in claim.figures]
            if bad:
                errors.append(f"{where}: measurement(s) {bad} are not figures of {claim.id} "
                              f"in the registry")
        _check_versions(where, entry.get("versions", {}), errors)
        out.append(exp)
    if errors:
        raise EntryError("expectations file is invalid:\n  " + "\n  ".join(errors))
    return out


def uncorrected(expectations: list[Expectation]) -> list[str]:
    """The known fails and drift whose claim suggests no correction of its sentence (the
    lint of claims/expectations.toml: one erratum per claim, on any of its entries)."""
    corrected = {e.id for e in expectations if e.erratum is not None}
    return [f"{e.label()}: a known {e.verdict} suggests the correction of its sentence: "
            "erratum = { quote = \"the wrong words\", correction = \"the words to put "
            "instead\", finding = \"what was found\" } (here, or on another entry of the claim)"
            for e in expectations if e.verdict in CORRECTED and e.id not in corrected]


def find_expectations(expectations: list[Expectation], cid: str, variant_id: str
                      ) -> list[Expectation]:
    """Every entry for ``cid`` that applies to this variant in this environment."""
    return [e for e in expectations if e.id == cid and e.applies(variant_id)]


def satisfied(versions: dict, have: dict) -> bool:
    """Whether the package versions ``have`` (a report's environment) meet ``versions``; a
    package the report does not name is not held against the entry."""
    for pkg, spec in versions.items():
        if not have.get(pkg):
            continue
        try:
            if Version(Version(str(have[pkg])).base_version) not in SpecifierSet(spec):
                return False
        except InvalidVersion:
            continue
    return True


def erratum_of(expectations: list[Expectation], cid: str, verdict: str, variant_id: str = "",
               versions: dict | None = None,
               figures: tuple = ()) -> tuple[Expectation | None, Erratum | None]:
    """The known entry of a saved variant's verdict (by claim, verdict, variant, the report's
    versions and the failure it names) and the correction it suggests (its own erratum, else
    the one another entry of the claim holds)."""
    same = [e for e in expectations if e.id == cid and e.verdict == verdict
            and (not e.variant or e.variant in variant_id)
            and satisfied(e.versions, versions or {})]
    named = [e for e in same if set(e.measurements) & set(figures)]
    entry = (named or same or [None])[0]
    if entry is None:
        return None, None
    shared = [e.erratum for e in expectations if e.id == cid and e.erratum is not None]
    return entry, entry.erratum or (shared[0] if shared else None)
