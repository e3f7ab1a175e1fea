"""The expectations file (``claims/expectations.toml``): the verdicts known not to be
"holds" (a sentence of the notes that is false as worded, a figure that moved), each naming
the failure it expects, keyed by variant and framework version where that matters."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from support.paths import CLAIMS
from support.spec.registry import RegistryError, _check_versions, version_mismatch

EXPECTATIONS = CLAIMS / "expectations.toml"


@dataclass
class Expectation:
    """A known verdict other than holds, naming the failure it expects: ``match`` (a regular
    expression searched in the assertion message) and/or ``measurement`` (the figure names
    that drift or break). Any other failure of the same variant is unexpected."""

    id: str
    verdict: str
    reason: str
    variant: str = ""          # substring of the variant id; "" = every variant
    versions: dict = field(default_factory=dict)
    match: str = ""
    measurement: object = ""   # a figure name, or a list of them

    def applies(self, variant_id: str) -> bool:
        if self.variant and self.variant not in variant_id:
            return False
        return version_mismatch(self.versions) is None

    @property
    def measurements(self) -> list[str]:
        m = self.measurement
        return [m] if isinstance(m, str) and m else list(m or [])

    def matches(self, outcome) -> bool:
        """Whether ``outcome`` (a support.verdicts.Outcome of this verdict) is the failure
        this entry names."""
        if outcome.verdict != self.verdict:
            return False
        if self.match and outcome.message and re.search(self.match, outcome.message, re.S):
            return True
        return bool(set(self.measurements) & set(outcome.figures))

    def names_failure(self) -> str:
        parts = []
        if self.match:
            parts.append(f"message matching /{self.match}/")
        if self.measurements:
            parts.append("figure " + ", ".join(self.measurements))
        return " or ".join(parts) or "nothing"

    def label(self) -> str:
        extra = f" [{self.variant}]" if self.variant else ""
        ver = f" when {self.versions}" if self.versions else ""
        what = f" ({', '.join(self.measurements)})" if self.measurements else ""
        return f"{self.id}{extra} {self.verdict}{what}{ver}"


EXPECTATION_FIELDS = ("id", "verdict", "reason", "variant", "versions", "match", "measurement")


def load_expectations(path: Path = EXPECTATIONS, registry: dict | None = None) -> list[Expectation]:
    from support.spec.verdicts import EXPECTABLE
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out, errors = [], []
    for i, entry in enumerate(data.get("expect", [])):
        where = f"expectations.toml entry {i + 1} ({entry.get('id')})"
        unknown = set(entry) - set(EXPECTATION_FIELDS)
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
        exp = Expectation(**{k: v for k, v in entry.items() if k in EXPECTATION_FIELDS})
        if verdict == "drift" and not exp.measurements:
            errors.append(f"{where}: a drift names the figure(s) that move (measurement = ...)")
        if verdict in ("fails", "error") and not (exp.match or exp.measurements):
            errors.append(f"{where}: name the failure: match = \"regex of the assertion "
                          "message\" or measurement = \"figure whose bound breaks\"")
        if exp.match:
            try:
                re.compile(exp.match)
            except re.error as e:
                errors.append(f"{where}: bad match regex: {e}")
        if claim is not None:
            bad = [m for m in exp.measurements if m not in claim.figures]
            if bad:
                errors.append(f"{where}: measurement(s) {bad} are not figures of {claim.id} "
                              f"in the registry")
        _check_versions(where, entry.get("versions", {}), errors)
        out.append(exp)
    if errors:
        raise RegistryError("expectations file is invalid:\n  " + "\n  ".join(errors))
    return out


def find_expectations(expectations: list[Expectation], cid: str, variant_id: str
                      ) -> list[Expectation]:
    """Every entry for ``cid`` that applies to this variant in this environment."""
    return [e for e in expectations if e.id == cid and e.applies(variant_id)]
