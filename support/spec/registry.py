"""The claim registry (``claims/registry/*.toml``).

The registry holds one entry per catalogue ID; it is the authority for what a claim
says, the figures the notes state (with their tolerances and bounds), its kind and tier,
which variants it requires and where it applies. (The expectations file is
support/spec/expectations.py's; what the test sources say, read without running them, is
support/spec/sources.py's.)
"""
from __future__ import annotations

import re
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from support.machine.devices import REQUIREMENTS
from support.machine.environment import version
from support.paths import CLAIMS, ROOT

REGISTRY_DIR = CLAIMS / "registry"

ID_RE = re.compile(r"^[A-Z]{2,5}-\d{2}$")
KINDS = {
    "a": "exact API behaviour",
    "b": "numeric precision",
    "c": "statistical training outcome on the concrete data",
    "d": "timing / performance",
    "e": "needs an accelerator",
    "f": "needs several processes",
    "g": "mathematical identity (property-based)",
    "h": "not testable / pedagogical",
}
TIERS = ("fast", "slow", "gpu", "bench")
STATUSES = ("testable", "pending", "not-testable")
DOCUMENTS = ("lecture", "sheet")
# the packages whose versions a claim or an expectation may be keyed on
PACKAGES = ("torch", "jax", "jaxlib", "optax", "numpy", "scikit-learn", "python",
            "keras", "onnx", "onnxruntime", "xlrd", "pandas", "flax")
FIELDS = {"id", "document", "section", "source", "paraphrase", "stated", "kind", "tier",
          "tolerance", "rule", "version_note", "status", "reason", "applies", "meaning",
          "links", "figures", "requires", "fingerprint", "control_reason"}
FIGURE_FIELDS = {"name", "stated", "tol", "bound", "variant", "reference", "why"}
APPLIES_FIELDS = {"versions"}


class RegistryError(ValueError):
    pass


@dataclass
class Claim:
    id: str
    document: str
    section: str
    source: str
    paraphrase: str
    stated: str
    kind: str
    tier: str
    tolerance: str = ""
    rule: str = ""
    version_note: str = ""
    status: str = "testable"
    reason: str = ""
    meaning: str = ""
    links: list = field(default_factory=list)
    applies: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)     # name -> [Figure, one per variant]
    requires: list = field(default_factory=list)
    fingerprint: str = ""      # of its sentence in the notes (support/notes/locate.py)
    # why no negative control can make this claim's test fail (support/harness/controls.py)
    control_reason: str = ""

    def figure(self, name: str, variant: str = "") -> "Figure":
        """The figure ``name`` that applies to ``variant`` (a figure may be stated per
        variant: ``variant = "optax"`` in its entry)."""
        for f in self.figures.get(name, ()):
            if f.applies(variant):
                return f
        where = f"claims/registry/{self.id.split('-')[0]}.toml"
        if name in self.figures:
            raise KeyError(f"{self.id}: no figure {name!r} applies to variant {variant!r} "
                           f"({where} states it for {[f.variant for f in self.figures[name]]})")
        known = ", ".join(repr(n) for n in self.figures) or "none"
        raise KeyError(f"{self.id} states no figure named {name!r} in the registry "
                       f"({where}; its figures: {known})")

    def all_figures(self) -> list["Figure"]:
        return [f for fs in self.figures.values() for f in fs]


@dataclass(frozen=True)
class Figure:
    """A figure of a claim, held once, in the registry: what the notes print (``stated``,
    compared under the tolerance ``tol``: a key of support.spec.tolerances.TABLE, or an override
    ``{ rtol = ..., why = "..." }``) and/or the bounds of the qualitative claim
    (``bound = "<= 1e-15"``). A test checks it with ``claim.check(name, value)``: a broken
    bound makes the claim fail, a stated figure outside its tolerance makes it drift.
    ``reference = true`` marks a figure the notes do not print (a measured reference, e.g.
    the protocol's re-run or the catalogue's reading): it is shown beside the measurement and
    never decides (no tolerance, never drift); only its bounds, the qualitative claim, do."""

    claim: str
    name: str
    stated: object = None
    tol: object = None
    bounds: tuple = ()
    variant: str = ""
    reference: bool = False

    def tolerance(self):
        from support.spec import tolerances
        if self.stated is None or self.reference:
            return None
        if self.tol is None:
            numeric = not isinstance(self.stated, (bool, str)) or tolerances._numeric_text(self.stated)
            return tolerances.TABLE["printed" if numeric else "exact"]
        return tolerances.resolve(self.tol)

    def judge(self, value, interval=None) -> tuple[str, str]:
        """(outcome, what decided it): see support.spec.tolerances.judge_where."""
        from support.spec import tolerances
        # a reference is not what the notes print: nothing but the bounds is compared
        stated = None if self.reference else self.stated
        return tolerances.judge_where(value, interval, stated, self.tolerance(), self.bounds)

    def rule(self) -> str:
        """The figure's rule in words, for reports: "1.7e-18 (printed), bound <= 1e-15"."""
        parts = []
        if self.reference:
            parts.append(f"reference {self.stated} (not printed in the notes; shown, not compared)")
        elif self.stated is not None:
            parts.append(f"stated {self.stated} ({self.tolerance().describe()})")
        parts += [f"bound {b}" for b in self.bounds]
        return ", ".join(parts)

    def applies(self, variant_id: str) -> bool:
        return not self.variant or self.variant in variant_id


def _figures(where: str, cid: str, raw, errors: list) -> dict:
    from support.spec import tolerances
    out: dict = {}
    if not isinstance(raw, list):
        errors.append(f"{where}: figures must be a list of {{ name = ..., stated = ... }}")
        return out
    for f in raw:
        if not isinstance(f, dict) or not f.get("name"):
            errors.append(f"{where}: a figure needs a name")
            continue
        fw = f"{where}: figure {f.get('name')!r}"
        unknown = set(f) - FIGURE_FIELDS
        if unknown:
            errors.append(f"{fw}: unknown field(s) {sorted(unknown)}")
        if "stated" not in f and "bound" not in f:
            errors.append(f"{fw}: needs stated and/or bound")
        tol = f.get("tol")
        if f.get("reference") and tol is not None:
            errors.append(f"{fw}: a reference figure is shown beside the measurement and never "
                          "decides, so it takes no tol (a figure the sentence implies is stated; "
                          "a limit it sets is a bound)")
            tol = None
        if f.get("reference") and "stated" not in f:
            errors.append(f"{fw}: reference = true needs the reference value in stated")
        if isinstance(tol, dict):
            if not f.get("why") and not tol.get("why"):
                errors.append(f"{fw}: a tolerance override needs why = \"...\"")
            tol = tolerances.Tol(**{k: v for k, v in tol.items() if k != "why"},
                                 why=tol.get("why") or f.get("why", ""))
        elif tol is not None and tol not in tolerances.TABLE:
            errors.append(f"{fw}: unknown tolerance key {tol!r}")
        try:
            raw_b = f.get("bound", [])
            bounds = tuple(tolerances.Bound.parse(b) for b in
                           ([raw_b] if isinstance(raw_b, str) else raw_b))
        except ValueError as exc:
            errors.append(f"{fw}: {exc}")
            bounds = ()
        if any(g.variant == f.get("variant", "") for g in out.get(f["name"], [])):
            errors.append(f"{fw}: duplicate figure (same name and variant)")
        out.setdefault(f["name"], []).append(
            Figure(cid, f["name"], f.get("stated"), tol, bounds, f.get("variant", ""),
                   bool(f.get("reference", False))))
    return out


def installed_version(package: str) -> Version | None:
    from packaging.version import InvalidVersion
    text = version(package)
    try:
        return Version(text) if text else None
    except InvalidVersion:       # a distribution with a non-PEP 440 version: not keyable
        return None


def version_mismatch(versions: dict) -> str | None:
    """None if the installed packages satisfy ``versions``, else why not."""
    for pkg, spec in versions.items():
        v = installed_version(pkg)
        if v is None:
            return f"{pkg} is not installed"
        if Version(v.base_version) not in SpecifierSet(spec):
            return f"{pkg} {v} is outside {spec}"
    return None


def _check_versions(where: str, versions: dict, errors: list) -> None:
    if not isinstance(versions, dict):
        errors.append(f"{where}: versions must be a table of package = specifier")
        return
    for pkg, spec in versions.items():
        if pkg not in PACKAGES:
            errors.append(f"{where}: unknown package {pkg!r} (known: {', '.join(PACKAGES)})")
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            errors.append(f"{where}: bad version specifier {spec!r} for {pkg}")


def load_registry(directory: Path = REGISTRY_DIR) -> dict[str, Claim]:
    """Read and validate every ``*.toml`` under ``directory``; raise RegistryError."""
    errors: list[str] = []
    claims: dict[str, Claim] = {}
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise RegistryError(f"no registry files under {directory}")
    for path in files:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            errors.append(f"{path.name}: {exc}")
            continue
        for entry in data.get("claim", []):
            cid = entry.get("id", "<missing id>")
            where = f"{path.name}:{cid}"
            unknown = set(entry) - FIELDS
            if unknown:
                errors.append(f"{where}: unknown field(s) {sorted(unknown)}")
            if not ID_RE.match(str(cid)):
                errors.append(f"{where}: malformed id (want PREFIX-NN)")
            elif not path.stem == cid.split("-")[0]:
                errors.append(f"{where}: belongs in {cid.split('-')[0]}.toml")
            if cid in claims:
                errors.append(f"{where}: duplicate id")
            for req in ("document", "section", "paraphrase", "kind", "tier"):
                if not entry.get(req):
                    errors.append(f"{where}: missing {req}")
            if entry.get("document") not in DOCUMENTS:
                errors.append(f"{where}: unknown document {entry.get('document')!r}")
            if entry.get("kind") not in KINDS:
                errors.append(f"{where}: unknown kind {entry.get('kind')!r}")
            if entry.get("tier") not in TIERS:
                errors.append(f"{where}: unknown tier {entry.get('tier')!r}")
            status = entry.get("status", "testable")
            if status not in STATUSES:
                errors.append(f"{where}: unknown status {status!r}")
            if entry.get("kind") == "h" and status != "not-testable":
                errors.append(f"{where}: kind h must have status not-testable")
            if status == "not-testable" and not entry.get("reason"):
                errors.append(f"{where}: not-testable needs a reason")
            applies = entry.get("applies", {})
            if set(applies) - APPLIES_FIELDS:
                errors.append(f"{where}: unknown applies field(s) {sorted(set(applies) - APPLIES_FIELDS)}")
            _check_versions(where, applies.get("versions", {}), errors)
            if not re.fullmatch(r"[0-9a-f]{24}", str(entry.get("fingerprint", "0" * 24))):
                errors.append(f"{where}: fingerprint must be 24 hex digits (python -m support pin)")
            for req in entry.get("requires", []):
                if req not in REQUIREMENTS:
                    errors.append(f"{where}: unknown requirement {req!r} (known: "
                                  f"{', '.join(REQUIREMENTS)}; support/machine/devices.py)")
            entry = dict(entry, figures=_figures(where, str(cid), entry.get("figures", []), errors))
            try:
                claims[cid] = Claim(**{k: v for k, v in entry.items() if k in FIELDS})
            except TypeError as exc:
                errors.append(f"{where}: {exc}")
    if errors:
        raise RegistryError("claim registry is invalid:\n  " + "\n  ".join(errors))
    return claims
