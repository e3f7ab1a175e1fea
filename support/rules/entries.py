"""The claims' entries: one TOML file per section of the notes, beside its test module.

``claims/lecture/08_pytorch_records_a_tape.toml`` holds the claims of the lecture's section
"PyTorch records a tape", in the order of its sentences; ``claims/lecture/
test_08_pytorch_records_a_tape.py`` holds their tests. The sheet's "Key ideas" is one such pair
per bullet, numbered within the section (``claims/sheet/01_key_ideas_07_modes.toml``, the
bullet "Modes"). A file's header says
once which document, section (and part) and lines it covers; each ``[[claim]]`` entry is the
authority for what its claim says, the figures the notes state (with their tolerances and
bounds), its kind and tier, which variants it requires and where it applies. (The
expectations file is support/rules/expectations.py's; what the test sources say, read without
running them, is support/rules/sources.py's.)
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
from support.machine.fingerprint import MACHINE
from support.machine.environment import version
from support.paths import CLAIMS

ENTRIES_DIR = CLAIMS
# a section's file: two digits of its place in the document, then its heading as a slug
SECTION_FILE = re.compile(r"^(\d{2})_[a-z0-9_]+$")

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
# the letter a catalogue reference gives each document's lines ("L:43-47", "S:5")
PREFIX = {"lecture": "L", "sheet": "S"}
# the packages whose versions a claim or an expectation may be keyed on
PACKAGES = ("torch", "jax", "jaxlib", "optax", "numpy", "scikit-learn", "python",
            "keras", "onnx", "onnxruntime", "xlrd", "pandas", "flax")
# a file's header, written once for all its claims
HEADER_FIELDS = {"document", "section", "part", "lines"}
# a claim's entry; ``notes_words`` (the words the notes print) only where no figure holds them
FIELDS = {"id", "source", "paraphrase", "notes_words", "kind", "tier", "version_note", "status",
          "reason", "applies", "meaning", "links", "figures", "requires", "fingerprint",
          "control_reason", "positive_reason", "module", "threads",
          "machine"}
MODULE_FIELDS = {"path", "why"}
# a timing claim's threads: "one" (its tests run torch's intra-op threads and the OpenMP and
# BLAS pools on one thread: the sentence does not depend on the thread count, and one thread
# removes most of the hand-offs between threads that other work on the machine disturbs) or
# "all" (the frameworks' own counts: the sentence is about parallel work, or the framework
# fixes its pool once per process), with why
THREADS = ("one", "all")
# a figure's value read into a claim's prose (its ``meaning``), so that the words cannot
# disagree with what decides: {bound:NAME} "> 1.5", {stated:NAME} "2.8", {band:NAME} the
# stated figure's tolerance band "[1.4, 5.6]", {reach:KEY} a rounding reach "+- 0.11"
PLACEHOLDER = re.compile(r"\{(bound|stated|band|reach):([^{}]+)\}")
FIGURE_FIELDS = {"name", "stated", "tol", "bound", "variant", "reference", "why", "fails_outside",
                 "timed"}
APPLIES_FIELDS = {"versions"}
MACHINE_FACTS = tuple(name for name, _ in MACHINE)


class EntryError(ValueError):
    pass


@dataclass
class Claim:
    id: str
    document: str
    section: str
    source: str
    paraphrase: str
    kind: str
    tier: str
    notes_words: str = ""
    part: str = ""
    file: str = ""          # its section's file, relative to the checkout
    version_note: str = ""
    status: str = "testable"
    reason: str = ""
    meaning: str = ""
    links: list = field(default_factory=list)
    applies: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)     # name -> [Figure, one per variant]
    requires: list = field(default_factory=list)
    fingerprint: str = ""      # of its sentence in the notes (support/notes/locate.py)
    # why no negative control can make this claim's test fail (support/rules/controls.py)
    control_reason: str = ""
    # why no perturbation can make this claim's false sentence true (no positive control)
    positive_reason: str = ""
    # another module that holds a test of it: { path = "claims/...py", why = "..." }
    module: dict = field(default_factory=dict)
    # a timing claim's threads: { count = "one" | "all", why = "..." }
    threads: dict = field(default_factory=dict)
    # the facts of the machine its figures are known to follow (support/machine/
    # fingerprint.py, MACHINE): python -m support diff calls a change they explain the machine's
    machine: list = field(default_factory=list)

    @property
    def test_module(self) -> str:
        """Its section's test module (``claims/lecture/test_08_....py``)."""
        path = Path(self.file)
        return str(path.with_name(f"test_{path.stem}.py"))

    def test_modules(self) -> list[str]:
        """Where its tests may live: its section's module, and the one its entry names."""
        return [self.test_module] + ([self.module["path"]] if self.module.get("path") else [])

    def figure(self, name: str, variant: str = "") -> "Figure":
        """The figure ``name`` that applies to ``variant`` (a figure may be stated per
        variant: ``variant = "optax"`` in its entry)."""
        for f in self.figures.get(name, ()):
            if f.applies(variant):
                return f
        where = self.file
        if name in self.figures:
            raise KeyError(f"{self.id}: no figure {name!r} applies to variant {variant!r} "
                           f"({where} states it for {[f.variant for f in self.figures[name]]})")
        known = ", ".join(repr(n) for n in self.figures) or "none"
        raise KeyError(f"{self.id} states no figure named {name!r} in its entry "
                       f"({where}; its figures: {known})")

    def all_figures(self) -> list["Figure"]:
        return [f for fs in self.figures.values() for f in fs]

    @property
    def reading(self) -> str:
        """Its ``meaning`` with each placeholder replaced by the figure it names."""
        return PLACEHOLDER.sub(lambda m: self._placeholder(m.group(1), m.group(2)),
                               self.meaning)

    def _placeholder(self, what: str, name: str) -> str:
        from support.rules import tolerances
        if what == "reach":
            return tolerances.reach_text(name)
        figs = self.figures[name]
        if what == "bound":
            return " and ".join(dict.fromkeys(str(b) for f in figs for b in f.bounds))
        if what == "stated":
            return str(figs[0].stated)
        lo, hi = tolerances.band(figs[0].stated, figs[0].tolerance())
        return f"[{lo:g}, {hi:g}]"

    def placeholder_errors(self) -> list[str]:
        """What is wrong with the placeholders of its meaning (a figure it does not have, a
        bound or band it lacks)."""
        from support.rules import tolerances
        out = []
        for what, name in PLACEHOLDER.findall(self.meaning):
            if what == "reach":
                if name not in tolerances.REACH:
                    out.append(f"{{reach:{name}}}: no such reach in tolerances.REACH")
                continue
            figs = self.figures.get(name)
            if not figs:
                out.append(f"{{{what}:{name}}}: {self.id} has no figure {name!r}")
            elif what == "bound" and not any(f.bounds for f in figs):
                out.append(f"{{bound:{name}}}: the figure has no bound")
            elif what in ("stated", "band") and figs[0].stated is None:
                out.append(f"{{{what}:{name}}}: the figure states no value")
            elif what == "band" and figs[0].tolerance() is None:
                out.append(f"{{band:{name}}}: a reference figure has no tolerance band")
        return out


@dataclass(frozen=True)
class Figure:
    """A figure of a claim, held once, in the registry: what the notes print (``stated``,
    compared under the tolerance ``tol``: a key of support.rules.tolerances.TABLE, or an override
    ``{ rtol = ..., why = "..." }``) and/or the bounds of the qualitative claim
    (``bound = "<= 1e-15"``). A test checks it with ``claim.check(name, value)``: a broken
    bound makes the claim fail, a stated figure outside its tolerance makes it drift.
    ``reference = true`` marks a figure the notes do not print (a measured reference, e.g.
    the protocol's re-run or the catalogue's reading): it is shown beside the measurement and
    never decides (no tolerance, never drift); only its bounds, the qualitative claim, do.
    ``fails_outside = true`` marks a stated figure that is the sentence itself (an API default,
    a count of the dataset, exact arithmetic: "the default num_workers is 0"): outside its
    tolerance the claim fails instead of drifting, so a test need not assert it a second time.
    A figure that may move while the sentence stands (the number of equations in a jaxpr) is
    left to drift. ``timed = true`` marks a timing figure: it is measured by the timing method
    (support.machine.timing), its interval widens by its own measured load sensitivity on a
    busy machine (support.machine.sensitivity), and ``python -m support load-sensitivity``
    measures that sensitivity."""

    claim: str
    name: str
    stated: object = None
    tol: object = None
    bounds: tuple = ()
    variant: str = ""
    reference: bool = False
    fails_outside: bool = False
    timed: bool = False

    def tolerance(self):
        from support.rules import tolerances
        if self.stated is None or self.reference:
            return None
        if self.tol is None:
            numeric = tolerances.numeric_stated(self.stated)
            return tolerances.TABLE["printed" if numeric else "exact"]
        return tolerances.resolve(self.tol)

    def judge(self, value, interval=None) -> tuple[str, str]:
        """(outcome, what decided it): see support.rules.tolerances.judge_where."""
        from support.rules import tolerances
        # a reference is not what the notes print: nothing but the bounds is compared
        stated = None if self.reference else self.stated
        outcome, by = tolerances.judge_where(value, interval, stated, self.tolerance(), self.bounds)
        if outcome == "outside" and self.fails_outside:
            return "broken", by          # the stated figure is the sentence: contradicted
        return outcome, by

    def rule(self) -> str:
        """The figure's rule in words, for reports: "1.7e-18 (printed), bound <= 1e-15"."""
        parts = []
        if self.reference:
            parts.append(f"reference {self.stated} (not printed in the notes; shown, not compared)")
        elif self.stated is not None:
            fails = "; outside it the claim fails" if self.fails_outside else ""
            parts.append(f"stated {self.stated} ({self.tolerance().describe()}{fails})")
        parts += [f"bound {b}" for b in self.bounds]
        return ", ".join(parts)

    def applies(self, variant_id: str) -> bool:
        return not self.variant or self.variant in variant_id


def _figures(where: str, cid: str, raw, errors: list) -> dict:
    from support.rules import tolerances
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
        if f.get("fails_outside") and (f.get("reference") or "stated" not in f):
            errors.append(f"{fw}: fails_outside = true needs a stated figure the notes print "
                          "(not a reference): it says that figure is the sentence itself")
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
                   bool(f.get("reference", False)), bool(f.get("fails_outside", False)),
                   bool(f.get("timed", False))))
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


def section_files(directory: Path = ENTRIES_DIR) -> list[Path]:
    """The section files under ``directory`` (a claims folder), in the documents' order."""
    return sorted(p for doc in DOCUMENTS for p in (directory / doc).rglob("*.toml")
                  if SECTION_FILE.match(p.stem))


def _header(where: str, path: Path, directory: Path, data: dict, errors: list) -> dict:
    head = {k: v for k, v in data.items() if k != "claim"}
    unknown = set(head) - HEADER_FIELDS
    if unknown:
        errors.append(f"{where}: unknown header field(s) {sorted(unknown)} (a claim's own "
                      "fields go under its [[claim]])")
    for req in ("document", "section", "lines"):
        if not head.get(req):
            errors.append(f"{where}: the header needs {req} = ...")
    doc = path.relative_to(directory).parts[0]
    if head.get("document") != doc:
        errors.append(f"{where}: document = {head.get('document')!r}, but the file lies under "
                      f"{doc}/")
    if not data.get("claim"):
        errors.append(f"{where}: no [[claim]] entries")
    return head


def load_entries(directory: Path = ENTRIES_DIR) -> dict[str, Claim]:
    """Read and validate every section file under ``directory`` (the claims folder: its
    ``lecture/`` and ``sheet/``); raise EntryError."""
    errors: list[str] = []
    claims: dict[str, Claim] = {}
    files = section_files(directory)
    if not files:
        raise EntryError(f"no section files (NN_<heading>.toml) under {directory}")
    for path in files:
        rel = path.relative_to(directory.parent)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            errors.append(f"{rel}: {exc}")
            continue
        head = _header(str(rel), path, directory, data, errors)
        for entry in data.get("claim", []):
            cid = entry.get("id", "<missing id>")
            where = f"{rel}:{cid}"
            unknown = set(entry) - FIELDS
            if unknown:
                errors.append(f"{where}: unknown field(s) {sorted(unknown)}"
                              + (" (the file's header holds them once)"
                                 if unknown & HEADER_FIELDS else ""))
            if not ID_RE.match(str(cid)):
                errors.append(f"{where}: malformed id (want PREFIX-NN)")
            if cid in claims:
                errors.append(f"{where}: duplicate id (also in {claims[cid].file})")
            for req in ("source", "paraphrase", "kind", "tier"):
                if not entry.get(req):
                    errors.append(f"{where}: missing {req}")
            if head.get("document") not in DOCUMENTS:
                errors.append(f"{where}: unknown document {head.get('document')!r}")
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
            if entry.get("notes_words") is not None and entry.get("figures"):
                errors.append(f"{where}: notes_words = ... is the notes' words for a claim with "
                              "no figures; with figures, each figure holds what the notes print")
            module = entry.get("module", {})
            if module and (not isinstance(module, dict) or set(module) != MODULE_FIELDS
                           or not str(module.get("why", "")).strip()):
                errors.append(f"{where}: module = {{ path = \"claims/.../test_....py\", why = "
                              "\"...\" }} names another module that holds a test of it, and why")
            elif module and not (directory.parent / module["path"]).is_file():
                errors.append(f"{where}: module {module['path']!r} does not exist")
            threads = entry.get("threads", {})
            if entry.get("kind") == "d" and status == "testable" and (
                    not isinstance(threads, dict) or set(threads) != {"count", "why"}
                    or threads.get("count") not in THREADS or not str(threads["why"]).strip()):
                errors.append(f"{where}: a timing claim says which threads it is timed on: "
                              f"threads = {{ count = \"one\" or \"all\", why = \"...\" }}")
            elif threads and entry.get("kind") != "d":
                errors.append(f"{where}: threads = ... is a timing claim's (kind d)")
            applies = entry.get("applies", {})
            if set(applies) - APPLIES_FIELDS:
                errors.append(f"{where}: unknown applies field(s) {sorted(set(applies) - APPLIES_FIELDS)}")
            _check_versions(where, applies.get("versions", {}), errors)
            if not re.fullmatch(r"[0-9a-f]{24}", str(entry.get("fingerprint", "0" * 24))):
                errors.append(f"{where}: fingerprint must be 24 hex digits (python -m support pin)")
            for fact in entry.get("machine", []):
                if fact not in MACHINE_FACTS:
                    errors.append(f"{where}: unknown machine fact {fact!r} (known: "
                                  f"{', '.join(MACHINE_FACTS)}; support/machine/fingerprint.py)")
            for req in entry.get("requires", []):
                if req not in REQUIREMENTS:
                    errors.append(f"{where}: unknown requirement {req!r} (known: "
                                  f"{', '.join(REQUIREMENTS)}; support/machine/devices.py)")
            entry = dict(entry, figures=_figures(where, str(cid), entry.get("figures", []), errors),
                         document=head.get("document", ""), section=head.get("section", ""),
                         part=head.get("part", ""), file=str(rel))
            try:
                claims[cid] = Claim(**{k: v for k, v in entry.items()
                                       if k in FIELDS | {"document", "section", "part", "file"}})
            except TypeError as exc:
                errors.append(f"{where}: {exc}")
                continue
            errors += [f"{where}: meaning {e}" for e in claims[cid].placeholder_errors()]
    if errors:
        raise EntryError("the claims' entries are invalid:\n  " + "\n  ".join(errors))
    return claims
