"""The notes' mathematics, rendered: ``\\( ... \\)``, ``\\[ ... \\]``, ``$ ... $`` and
``$$ ... $$`` in a page's text become MathML, which current browsers render natively, so the
annotated page stays one self-contained file with no script or font to fetch.

The conversion is latex2mathml's (a small pure-Python package, the ``notes`` extra). Without
it, or for a formula it cannot convert, the TeX is shown as code and ``missing()`` says why.
"""
from __future__ import annotations

import html
import re

# display math first; an inline $...$ opens on a non-space, closes on one, and is not a price
# or a shell variable (no digit or letter right after the closing $)
MATH = re.compile(r"\\\[(?P<d1>.+?)\\\]|\$\$(?P<d2>.+?)\$\$|\\\((?P<i1>.+?)\\\)"
                  r"|(?<![\\$\w])\$(?=[^\s$])(?P<i2>[^$\n]*?[^\s\\$])\$(?![\w$])", re.S)


def missing() -> str:
    """Why the mathematics is not rendered here, or "" when it is."""
    try:
        import latex2mathml.converter  # noqa: F401
    except ImportError:
        return "latex2mathml is not installed (pip install -e '.[notes]'): formulas are shown as TeX"
    return ""


def _e(x: str) -> str:
    return html.escape(x, quote=True)


def formula(tex: str, display: bool) -> str:
    """One formula as MathML (its TeX kept as the element's title), or as code."""
    if not missing():
        import inspect

        from latex2mathml import exceptions
        from latex2mathml.converter import convert
        refused = tuple(c for _, c in inspect.getmembers(exceptions, inspect.isclass)
                        if issubclass(c, Exception))
        try:
            mathml = convert(tex.strip(), display="block" if display else "inline")
        except refused:        # a formula it cannot parse is shown as TeX instead
            mathml = ""
        # a command it does not know comes back as its name, backslash and all: TeX then
        if mathml and not re.search(r">\\[A-Za-z]", mathml):
            return mathml.replace("<math ", f"<math title='{_e(tex.strip())}' ", 1)
    return f"<code class='tex'>{_e(tex)}</code>"


def render(text: str) -> str:
    """``text`` as HTML: escaped, its formulas as MathML."""
    out, pos = [], 0
    for m in MATH.finditer(text):
        out.append(_e(text[pos:m.start()]))
        display = m.group("d1") is not None or m.group("d2") is not None
        out.append(formula(next(g for g in m.groups() if g is not None), display))
        pos = m.end()
    out.append(_e(text[pos:]))
    return "".join(out)
