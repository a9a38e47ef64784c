"""How much memory this process may still allocate, and a per-call budget checked against it.

Validation refuses a call whose allocations (result buffers, contiguous copies, dtype
conversions, materialised broadcasts) cannot fit, before attempting any of them: a MemoryError
half-way, or the kernel's OOM killer, is worse than a clear error. All allocations of one call
count together (:func:`one_call`), against the smaller of the machine's available memory
(``MemAvailable``), what the process's cgroup limits leave (v1 and v2, every ancestor) and what
its address-space limit (``RLIMIT_AS``, ``ulimit -v``) leaves.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from pathlib import Path

from .errors import XLossValueError

#: A call's allocations are checked once their total exceeds this (reading the limits costs ~0.1 ms).
CHECK_ABOVE = 64 << 20
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")
_UNLIMITED = 1 << 62


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_dirs() -> list[tuple[Path, str, str]]:
    """``(folder, limit file, usage file)`` for the process's memory cgroup and its ancestors."""
    try:
        lines = _PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2 unified hierarchy
            base, limit, usage = _CGROUP_ROOT, "memory.max", "memory.current"
            if not (base / "cgroup.controllers").exists():
                base = _CGROUP_ROOT / "unified"
        elif "memory" in controllers.split(","):
            base, limit, usage = _CGROUP_ROOT / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        rel = Path(path.lstrip("/"))
        for parent in [rel, *rel.parents]:
            folder = base / parent
            if (folder / limit).exists():
                found.append((folder, limit, usage))
    return found


def _address_space_left() -> int | None:
    """What ``RLIMIT_AS`` (``ulimit -v``) leaves of the address space: the soft limit less the
    process's current virtual size (VmSize counts what is reserved, which the limit counts too)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY or limit < 0:
        return None
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
    return max(0, limit - used)


def available_bytes() -> int | None:
    """Bytes this process can still allocate (None if nothing can be read): the least of the
    machine's available memory, what the cgroups leave and what ``RLIMIT_AS`` leaves."""
    values = [v for v in (_meminfo_available(), _address_space_left()) if v is not None]
    for folder, limit_file, usage_file in _cgroup_dirs():
        limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
        if limit is not None and usage is not None and limit < _UNLIMITED:
            values.append(max(0, limit - usage))
    return min(values) if values else None


class _Budget(threading.local):
    depth = 0
    total = 0
    available: int | None = None
    checked = False


_budget = _Budget()


@contextlib.contextmanager
def _one_call():
    outer = _budget.depth == 0
    if outer:
        _budget.total, _budget.checked, _budget.available = 0, False, None
    _budget.depth += 1
    try:
        yield
    finally:
        _budget.depth -= 1


def one_call(fn):
    """Decorator: every :func:`ensure_fits` inside ``fn`` (the validation of one call) adds to one
    budget."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with _one_call():
            return fn(*args, **kwargs)

    return wrapped


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 1 << 30 else f"{nbytes / 2**20:.1f} MiB"


def ensure_fits(nbytes: int, what: str) -> None:
    """Count an allocation of ``nbytes`` against the call's budget; refuse it if the call's
    allocations together cannot fit."""
    total = _budget.total + int(nbytes) if _budget.depth else int(nbytes)
    if _budget.depth:
        _budget.total = total
    if total <= CHECK_ABOVE:
        return
    if not _budget.depth or not _budget.checked:
        _budget.available = available_bytes()
        _budget.checked = bool(_budget.depth)
    avail = _budget.available
    if avail is not None and total > avail:
        so_far = f" (with this call's other allocations, {_size(total)} in all)" if total != nbytes else ""
        raise XLossValueError(f"{what} would need {_size(nbytes)} of memory{so_far}; "
                              f"{_size(avail)} is available to this process")
