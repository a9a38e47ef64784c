"""Timing and memory measurement for ``xloss bench``.

Candidates of one benchmark cell run round-robin (one call each per round, after warm-up), so
a noisy, shared machine slows them alike and their ratios stay meaningful. Peak extra memory
is the resident-set high-water mark (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``)
above the resident set before the call, with glibc's mmap threshold pinned so that large
temporaries are really returned to the system when freed.
"""

from __future__ import annotations

import ctypes
import gc
import re
import statistics
import time
from dataclasses import dataclass

_M_MMAP_THRESHOLD = -3
_libc = None


def pin_malloc() -> None:
    """Keep allocations above 128 KiB in mmap (freed memory leaves the resident set)."""
    global _libc
    try:
        _libc = ctypes.CDLL("libc.so.6")
        _libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        _libc = None


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None


def peak_extra_bytes(fn) -> int | None:
    """Resident memory ``fn()`` adds at its peak (None where the OS does not tell)."""
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        return None
    before = _status_bytes("VmRSS")
    fn()
    peak = _status_bytes("VmHWM")
    return None if before is None or peak is None else max(0, peak - before)


def first_call_seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@dataclass
class Timing:
    median: float
    p20: float
    p80: float
    samples: int

    @classmethod
    def of(cls, seconds: list[float]) -> "Timing":
        s = sorted(seconds)
        q = statistics.quantiles(s, n=5, method="inclusive") if len(s) > 1 else [s[0]] * 4
        return cls(statistics.median(s), q[0], q[3], len(s))


def race(candidates: dict, rounds: dict, warmup: set) -> dict:
    """{name: Timing}: candidate ``name`` timed ``rounds[name]`` times, all interleaved round by
    round (a noisy machine slows them alike); those in ``warmup`` get one untimed call first."""
    for name in warmup:
        candidates[name]()
    times = {name: [] for name in candidates}
    for rnd in range(max(rounds.values(), default=0)):
        for name, fn in candidates.items():
            if rnd < rounds[name]:
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    return {name: Timing.of(ts) for name, ts in times.items()}


def plan_rounds(first_call_s: float, repeat: int, budget_s: float) -> int:
    """How many timed rounds a candidate gets: ``repeat``, fewer if that would exceed ``budget_s``
    (its first call tells its cost), at least one."""
    return max(1, min(repeat, int(budget_s / max(first_call_s, 1e-9))))
