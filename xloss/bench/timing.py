"""Timing and memory measurement for ``xloss bench``.

The clock readings :mod:`xloss.bench.sampling` builds on. Peak extra memory
is the resident-set high-water mark (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``)
above the resident set before the call, with glibc's mmap threshold pinned so that large
temporaries are really returned to the system when freed.
"""

from __future__ import annotations

import ctypes
import gc
import re
import time

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


def peak_extra_bytes(fn) -> tuple[int | None, float]:
    """Resident memory ``fn()`` adds at its peak (None where the OS does not tell), and the
    seconds of that call alone (the reset and readings around it not included). Garbage is
    collected once per cell (:func:`release`), not here: a collection costs tens of milliseconds."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    before = _status_bytes("VmRSS") if reset else None
    seconds = first_call_seconds(fn)
    peak = _status_bytes("VmHWM") if reset else None
    return (None if before is None or peak is None else max(0, peak - before)), seconds


def release() -> None:
    """Collect garbage and hand freed memory back to the system (before a cell's peak readings)."""
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)


def first_call_seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


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
