"""Keep Numba's on-disk cache in step with this folder's sources.

Numba invalidates a cached kernel when the kernel's own file changes, not when a helper it
inlines changes (``vecmath.py``, ``access.py``, ...): an edited helper would otherwise keep
running its old machine code from the cache. Before the first kernel runs, this compares a
hash of every source file here with the one recorded beside the cache and, when they differ,
drops this package's cache entries so that they recompile.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_STAMP = "xloss_cpu_onednn.sources"


def sources_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(_HERE.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def refresh(cache_dir: str | os.PathLike | None) -> bool:
    """Drop stale entries in ``cache_dir`` (a Numba cache folder of this package's kernels).
    Returns True if entries were dropped. Never raises: a read-only cache is Numba's business."""
    if cache_dir is None:
        return False
    try:
        folder = Path(cache_dir)
        stamp = folder / _STAMP
        digest = sources_digest()
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return False
        ours = {p.stem for p in _HERE.glob("*.py")}
        dropped = False
        if folder.is_dir():
            for entry in folder.iterdir():
                if entry.suffix in (".nbi", ".nbc") and entry.name.split(".", 1)[0] in ours:
                    entry.unlink(missing_ok=True)
                    dropped = True
        folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest + "\n")
        return dropped
    except OSError:
        return False


_checked = False


def ensure_fresh() -> None:
    """Run :func:`refresh` once per process on the folder Numba caches this package in."""
    global _checked
    if _checked:
        return
    _checked = True
    from numba import njit

    @njit(cache=True)
    def _probe():  # never compiled: only its cache locator is asked for the folder
        return 0

    refresh(getattr(getattr(_probe, "_cache", None), "_cache_path", None))
