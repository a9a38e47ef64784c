"""What the benchmark ran on, and this machine's measured ceilings (copy bandwidth, GEMM peak)."""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata

import numpy as np


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def describe(torch=None) -> dict:
    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {d: _version(d) for d in ("xloss", "numpy", "numba", "cffi", "torch", "ml_dtypes")},
    }
    try:
        import numba

        info["numba_threads"] = numba.get_num_threads()
    except ImportError:
        pass
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
    return info


def copy_bandwidth(nbytes: int = 256 << 20, repeat: int = 5) -> float:
    """Bytes per second of a large copy (read + write counted), best of ``repeat``.

    The best of NumPy's copy (one thread) and a threaded copy of halves, so the figure is the
    machine's, not one thread's."""
    n = nbytes // 8
    src = np.ones(n)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    try:
        import numba

        @numba.njit(parallel=True, cache=False)
        def _pcopy(d, s):
            for i in numba.prange(s.size):
                d[i] = s[i]

        _pcopy(dst, src)
        for _ in range(repeat):
            t = time.perf_counter()
            _pcopy(dst, src)
            best = min(best, time.perf_counter() - t)
    except ImportError:
        pass
    return 2 * n * 8 / best


def gemm_peak(torch=None, dtype: str = "float32", n: int = 2048, repeat: int = 5) -> tuple[float, str]:
    """FLOP/s of a square GEMM on the fastest BLAS at hand, and which one."""
    best = (0.0, "none")
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    if dtype == "float32":
        np.matmul(a, a)
        t = min(_timed(lambda: np.matmul(a, a)) for _ in range(repeat))
        best = max(best, (2 * n**3 / t, "numpy"))
    if torch is not None:
        tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
               "float64": torch.float64}[dtype]
        ta = torch.from_numpy(a).to(tdt)
        torch.mm(ta, ta)
        t = min(_timed(lambda: torch.mm(ta, ta)) for _ in range(repeat))
        best = max(best, (2 * n**3 / t, "torch"))
    return best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
