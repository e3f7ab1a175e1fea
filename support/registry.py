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
from importlib import metadata
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

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
DEVICES = ("cpu", "cuda", "mps", "gpu")
STATUSES = ("testable", "pending", "not-testable")
VERDICTS = ("holds", "drift", "fails", "skipped", "not-applicable", "not-testable",
            "pending", "error", "not-run")
DOCUMENTS = ("lecture", "sheet")
# the packages whose versions a claim or an expectation may be keyed on
PACKAGES = ("torch", "jax", "jaxlib", "optax", "numpy", "scikit-learn", "python",
            "keras", "onnx", "onnxruntime", "xlrd")
FIELDS = {"id", "document", "section", "source", "paraphrase", "stated", "kind", "tier",
          "tolerance", "rule", "version_note", "status", "reason", "applies", "meaning",
          "links", "fingerprint"}
APPLIES_FIELDS = {"frameworks", "versions", "devices"}


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
    fingerprint: str = ""      # of its sentence in the notes (support/notes.py)

    @property
    def testable(self) -> bool:
        return self.status != "not-testable"


def installed_version(package: str) -> Version | None:
    if package == "python":
        import platform
        return Version(platform.python_version())
    try:
        return Version(metadata.version(package))
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a local version label such as 2.13.0+cpu parses fine; be safe
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
            for dev in applies.get("devices", []):
                if dev not in DEVICES:
                    errors.append(f"{where}: unknown device {dev!r} (known: {', '.join(DEVICES)})")
            _check_versions(where, applies.get("versions", {}), errors)
            if not re.fullmatch(r"[0-9a-f]{24}", str(entry.get("fingerprint", "0" * 24))):
                errors.append(f"{where}: fingerprint must be 24 hex digits (python -m support.notes pin)")
            try:
                claims[cid] = Claim(**{k: v for k, v in entry.items() if k in FIELDS})
            except TypeError as exc:
                errors.append(f"{where}: {exc}")
    if errors:
        raise RegistryError("claim registry is invalid:\n  " + "\n  ".join(errors))
    return claims


@dataclass
class Expectation:
    id: str
    verdict: str
    reason: str
    variant: str = ""          # substring of the variant id; "" = every variant
    versions: dict = field(default_factory=dict)
    used: int = 0

    def applies(self, variant_id: str) -> bool:
        if self.variant and self.variant not in variant_id:
            return False
        return version_mismatch(self.versions) is None

    def label(self) -> str:
        extra = f" [{self.variant}]" if self.variant else ""
        ver = f" when {self.versions}" if self.versions else ""
        return f"{self.id}{extra}{ver}"


def load_expectations(path: Path = EXPECTATIONS, registry: dict | None = None) -> list[Expectation]:
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out, errors = [], []
    for i, entry in enumerate(data.get("expect", [])):
        where = f"expectations.toml entry {i + 1} ({entry.get('id')})"
        unknown = set(entry) - {"id", "verdict", "reason", "variant", "versions"}
        if unknown:
            errors.append(f"{where}: unknown field(s) {sorted(unknown)}")
        if registry is not None and entry.get("id") not in registry:
            errors.append(f"{where}: no such claim in the registry")
        if entry.get("verdict") not in ("fails", "drift", "not-applicable", "skipped", "error"):
            errors.append(f"{where}: verdict must be fails, drift, not-applicable, skipped or error")
        if not entry.get("reason"):
            errors.append(f"{where}: every expectation needs a reason")
        _check_versions(where, entry.get("versions", {}), errors)
        out.append(Expectation(**{k: v for k, v in entry.items() if k in
                                  ("id", "verdict", "reason", "variant", "versions")}))
    if errors:
        raise RegistryError("expectations file is invalid:\n  " + "\n  ".join(errors))
    return out


def find_expectation(expectations: list[Expectation], cid: str, variant_id: str) -> Expectation | None:
    best = None
    for e in expectations:
        if e.id == cid and e.applies(variant_id):
            # the most specific entry (one naming a variant) wins
            if best is None or (e.variant and not best.variant):
                best = e
    return best


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
