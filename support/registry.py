"""The claim registry (``claims/registry/*.toml``) and the expectations file.

The registry holds one entry per catalogue ID; it is the authority for what a claim
says, what the notes state, its kind and tier, and where it applies. The expectations
file (``claims/expectations.toml``) records the verdicts that are known not to be
"holds" (a sentence of the notes that is false as worded, a figure that moved), keyed
by framework version where that matters.
"""
from __future__ import annotations

import ast
import re
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from .devices import REQUIREMENTS
from .environment import version

ROOT = Path(__file__).resolve().parent.parent
REGISTRY_DIR = ROOT / "claims" / "registry"
EXPECTATIONS = ROOT / "claims" / "expectations.toml"

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
          "links", "figures", "requires", "fingerprint"}
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
    fingerprint: str = ""      # of its sentence in the notes (support/notes.py)

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
    compared under the tolerance ``tol``: a key of support.tolerances.TABLE, or an override
    ``{ rtol = ..., why = "..." }``) and/or the bounds of the qualitative claim
    (``bound = "<= 1e-15"``). A test checks it with ``claim.check(name, value)``: a broken
    bound makes the claim fail, a stated figure outside its tolerance makes it drift.
    ``reference = true`` marks a figure the notes do not print (a measured reference, e.g.
    the protocol's re-run): it is compared the same way and reported as a reference."""

    claim: str
    name: str
    stated: object = None
    tol: object = None
    bounds: tuple = ()
    variant: str = ""
    reference: bool = False

    def tolerance(self):
        from . import tolerances
        if self.stated is None:
            return None
        if self.tol is None:
            numeric = not isinstance(self.stated, (bool, str)) or tolerances._numeric_text(self.stated)
            return tolerances.TABLE["printed" if numeric else "exact"]
        return tolerances.resolve(self.tol)

    def judge(self, value, interval=None) -> tuple[str, str]:
        """(outcome, what decided it): see support.tolerances.judge_where."""
        from . import tolerances
        return tolerances.judge_where(value, interval, self.stated, self.tolerance(),
                                      self.bounds)

    def rule(self) -> str:
        """The figure's rule in words, for reports: "1.7e-18 (printed), bound <= 1e-15"."""
        parts = []
        if self.stated is not None:
            t = self.tolerance()
            kind = "reference" if self.reference else "stated"
            parts.append(f"{kind} {self.stated} ({t.describe()})")
        parts += [f"bound {b}" for b in self.bounds]
        return ", ".join(parts)

    def applies(self, variant_id: str) -> bool:
        return not self.variant or self.variant in variant_id


def _figures(where: str, cid: str, raw, errors: list) -> dict:
    from . import tolerances
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
                                  f"{', '.join(REQUIREMENTS)}; support/devices.py)")
            entry = dict(entry, figures=_figures(where, str(cid), entry.get("figures", []), errors))
            try:
                claims[cid] = Claim(**{k: v for k, v in entry.items() if k in FIELDS})
            except TypeError as exc:
                errors.append(f"{where}: {exc}")
    if errors:
        raise RegistryError("claim registry is invalid:\n  " + "\n  ".join(errors))
    return claims


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
    from .verdicts import EXPECTABLE
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


def static_claim_markers(root: Path = ROOT) -> dict[str, list[str]]:
    """ID -> ['claims/...py::function'] for every ``@pytest.mark.claim(...)`` under claims/,
    found by reading the source (so it sees tests whatever a run collected)."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        owners = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                for dec in node.decorator_list:
                    for sub in ast.walk(dec):
                        owners[id(sub)] = node.name
        for node in ast.walk(tree):
            f = getattr(node, "func", None)
            if isinstance(node, ast.Call) and isinstance(f, ast.Attribute) and f.attr == "claim" \
                    and isinstance(f.value, ast.Attribute) and f.value.attr == "mark":
                where = f"{path.relative_to(root)}::{owners.get(id(node), '<module>')}"
                for arg in node.args:
                    key = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                        else "<non-literal claim id>"
                    found.setdefault(key, []).append(where)
    return found


# calls through which a test compares a registry figure: claim.check(name, ...),
# claim.figure(name), timing.check_ratio(claim, name, ...), timing.settle(claim, name, ...)
_FIGURE_CALLS = {"check": 0, "figure": 0, "decided": 0, "check_ratio": 1, "settle": 1}


def _name_pattern(node) -> str | None:
    """A figure name as a regular expression: a literal, or an f-string whose fields match
    anything; None when the name is computed otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+"
                       for v in node.values)
    return None


def static_figure_checks(root: Path = ROOT) -> dict[str, list[tuple[str, str]]]:
    """Claim ID -> [(name pattern, 'file::function')] of every figure name a test of that
    claim compares, found by reading the source. Names used in a module's helper functions
    (no claim marker) count for every claim of the module. A computed name is reported as
    the pattern "<computed>"."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((root / "claims").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helpers, module_ids = [], set()
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            ids = [a.value for d in fn.decorator_list for sub in ast.walk(d)
                   if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == "claim"
                   for a in sub.args if isinstance(a, ast.Constant)]
            module_ids.update(ids)
            names = []
            for call in ast.walk(fn):
                f = getattr(call, "func", None)
                pos = _FIGURE_CALLS.get(getattr(f, "attr", None)) if isinstance(call, ast.Call) else None
                if pos is None or len(call.args) <= pos:
                    continue
                names.append(_name_pattern(call.args[pos]) or "<computed>")
            where = f"{path.relative_to(root)}::{fn.name}"
            if ids:
                for cid in ids:
                    found.setdefault(cid, []).extend((n, where) for n in names)
            else:
                helpers.extend((n, where) for n in names)
        for cid in module_ids:
            found.setdefault(cid, []).extend(helpers)
    return found
