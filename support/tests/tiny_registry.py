"""A registry of a few made-up claims for the harness's own tests, written as the suite keeps
its claims: one section file per (document, section), its header written once."""
from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


def write(folder: Path, entries: str) -> Path:
    """Write ``entries`` (``[[claim]]`` tables, each naming its ``document`` and ``section``)
    under ``folder`` as ``<document>/NN_<section>.toml`` files; returns ``folder``."""
    sections: dict[tuple[str, str], list[str]] = {}
    for block in re.split(r"(?m)^\[\[claim\]\]\n", entries)[1:]:
        data = tomllib.loads(block)
        kept = "\n".join(line for line in block.strip().split("\n")
                         if not re.match(r"(document|section) = ", line))
        sections.setdefault((data["document"], data["section"]), []).append(kept)
    for n, ((doc, section), blocks) in enumerate(sections.items(), start=1):
        prefix = "L" if doc == "lecture" else "S"
        slug = re.sub(r"[^a-z0-9]+", "_", section.lower()).strip("_") or "s"
        path = folder / doc / f"{n:02d}_{slug}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'document = "{doc}"\nsection = "{section}"\nlines = "{prefix}:1-9"\n\n'
                        + "\n\n".join(f"[[claim]]\n{b}" for b in blocks) + "\n")
    return folder
