"""The files ``xloss bench`` writes: each checked before anything is measured (a run of minutes
must not end in a traceback about its output path), and the JSON and CSV rewritten after every
cell, so an interrupted or failing run keeps what it measured.

A regular file is replaced whole (written beside it, then renamed over it: a reader never sees
half a file); a device such as ``/dev/stdout`` is written in place.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import XLossValueError


def check(path, option: str) -> Path:
    """``path`` as a Path once it is known to be writable; else :class:`XLossValueError`, one line
    naming ``option`` (e.g. ``--json``)."""
    p = Path(path)
    if p.is_dir():
        raise XLossValueError(f"{option}: {p} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise XLossValueError(f"{option}: folder {parent} does not exist")
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise XLossValueError(f"{option}: cannot use {p}: {exc.strerror}") from None
    if mode is not None and stat.S_ISCHR(mode):
        _probe_device(p, option)
    elif mode is not None and not stat.S_ISREG(mode):
        raise XLossValueError(f"{option}: {p} is not a regular file")
    else:
        if mode is not None and not os.access(p, os.W_OK):
            raise XLossValueError(f"{option}: {p} is not writable")
        try:
            fd, probe = tempfile.mkstemp(prefix=".xloss-bench-", dir=parent)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise XLossValueError(f"{option}: cannot write in {parent}: {exc.strerror}") from None
    return p


def _probe_device(p: Path, option: str) -> None:
    try:
        with open(p, "w") as f:
            f.write("\n")
            f.flush()
    except OSError as exc:
        raise XLossValueError(f"{option}: cannot write {p}: {exc.strerror}") from None


def write_text(p: Path, text: str) -> None:
    """Write ``text`` to ``p``: a regular file (or a new one) replaced atomically, a device in place."""
    try:
        is_regular = stat.S_ISREG(p.stat().st_mode)
    except FileNotFoundError:
        is_regular = True
    if not is_regular:
        with open(p, "w") as f:
            f.write(text)
        return
    try:
        mode = stat.S_IMODE(p.stat().st_mode)  # an existing file keeps its permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new one gets what open() would give it
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent if str(p.parent) else ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
