"""C prototypes for cffi, read from a backend's installed headers (package data), so that each
prototype is written once: in the header. The typedefs and structs a cdef needs before them stay
with the backend (cffi wants its own spelling of some, e.g. an enum as ``int``).
"""

from __future__ import annotations

import re
from pathlib import Path

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#.*$", re.M)  # the headers continue no directive onto a second line
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)")


def prototypes(headers, export: str) -> str:
    """The functions ``headers`` declare with the export macro ``export`` (e.g. ``FT78NE_API``), one
    prototype a line in header order, without the macro, comments, directives or GCC attributes."""
    out = []
    for path in headers:
        text = _DIRECTIVE.sub(" ", _COMMENT.sub(" ", Path(path).read_text()))
        for decl in re.findall(rf"\b{re.escape(export)}\b([^;{{}}]*);", text):
            decl = " ".join(_ATTRIBUTE.sub(" ", decl).split())
            out.append(re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", decl)) + ";")
    if not out:
        raise ValueError(f"no {export} prototypes in {', '.join(map(str, headers))}")
    return "\n".join(out) + "\n"
