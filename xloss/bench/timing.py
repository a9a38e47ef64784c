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
    def of(cls, seconds: list[float]) -> Timing:
        s = sorted(seconds)
        q = statistics.quantiles(s, n=5, method="inclusive") if len(s) > 1 else [s[0]] * 4
        return cls(statistics.median(s), q[0], q[3], len(s))


def race(candidates: dict, rounds: int) -> dict:
    """{name: Timing}: every candidate timed ``rounds`` times, interleaved round by round (a noisy
    machine slows them alike), so every candidate has the same number of samples."""
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: Timing.of(ts) for name, ts in times.items()}


#: Every candidate of a cell gets at least this many timed samples, whatever the budget.
MIN_ROUNDS = 3


def common_rounds(slowest_call_s: float, repeat: int, budget_s: float) -> int:
    """Timed rounds for a whole cell: ``repeat``, fewer if the slowest candidate (by its warm
    call) would exceed ``budget_s``, never fewer than :data:`MIN_ROUNDS` (nor than ``repeat``
    when that is smaller)."""
    fit = int(budget_s / max(slowest_call_s, 1e-9))
    return max(min(MIN_ROUNDS, repeat), min(repeat, fit))


def cold_first_call(spec: dict, timeout_s: float = 900) -> tuple[float | None, str]:
    """Seconds of one candidate's first call in a fresh interpreter whose Numba and
    TorchInductor caches are new, empty folders, so compilation is really included. Not
    included: importing xloss, and torch for a PyTorch candidate (a program has paid for them);
    included: what an xloss backend imports on its first call (Numba; torch for the FLCE
    products). ``spec``:
    kernel, mode, size, dtype, backends, candidate. Returns (seconds, "") or (None, why)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="xloss-cold-") as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(tmp, "numba"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
               "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
               "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
        try:
            out = subprocess.run([sys.executable, "-m", "xloss.bench.coldstart", json.dumps(spec)], env=env,
                                 capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return None, f"the cold first call took over {timeout_s:.0f} s"
    try:
        answer = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None, f"the cold-start process failed (exit {out.returncode}): {out.stderr.strip()[-200:]}"
    return answer.get("seconds"), answer.get("error", "")
