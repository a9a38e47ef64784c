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


try:
    import numba
except ImportError:  # the copy-bandwidth figure is then NumPy's one-thread copy
    numba = None
else:

    @numba.njit(parallel=True, cache=True)
    def _parallel_copy(d, s):  # compiled once, cached on disk
        for i in numba.prange(s.size):
            d[i] = s[i]


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
    if numba is not None:
        _parallel_copy(dst, src)
        for _ in range(repeat):
            t = time.perf_counter()
            _parallel_copy(dst, src)
            best = min(best, time.perf_counter() - t)
    return 2 * n * 8 / best


def gemm_library(torch=None) -> str:
    """The BLAS the GEMM peak is measured on, fixed per run: PyTorch's when installed (what the
    cpu backend's FLCE and the "3 bare GEMMs" floor use), else NumPy's. Never "whichever was
    faster this time", which would change the roofline between runs."""
    return "torch" if torch is not None else "numpy"


def gemm_peak(torch=None, dtype: str = "float32", n: int = 1024, repeat: int = 5) -> tuple[float, str]:
    """FLOP/s of a square GEMM on :func:`gemm_library` (best of ``repeat``), and that library."""
    lib = gemm_library(torch)
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    if lib == "numpy":
        b = a.astype(np.float64) if dtype == "float64" else a
        np.matmul(b, b)
        t = min(_timed(lambda: np.matmul(b, b)) for _ in range(repeat))
        return 2 * n**3 / t, lib
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float64": torch.float64}[dtype]
    ta = torch.from_numpy(a).to(tdt)
    torch.mm(ta, ta)
    t = min(_timed(lambda: torch.mm(ta, ta)) for _ in range(repeat))
    return 2 * n**3 / t, lib


class OtherLoad:
    """CPU time other processes used while it ran, in CPUs (Linux ``/proc``; None elsewhere):
    all busy time of the machine minus this process's and its children's."""

    def __init__(self):
        self.start = self._snapshot()

    @staticmethod
    def _snapshot():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
            busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # minus idle, iowait
            t = os.times()
            own = t.user + t.system + t.children_user + t.children_system
            return time.monotonic(), busy / os.sysconf("SC_CLK_TCK"), own
        except (OSError, ValueError, IndexError, AttributeError):
            return None

    def cpus(self) -> float | None:
        end = self._snapshot()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        wall = end[0] - self.start[0]
        return max(0.0, ((end[1] - self.start[1]) - (end[2] - self.start[2])) / wall)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


#: Thresholds of the busy-machine warning: other processes using more than this many CPUs on
#: average, a load average above this fraction of the CPUs, or a timing spread (p80 / p20) above.
BUSY_OTHER_CPUS = 0.25
BUSY_LOAD_PER_CPU = 0.5
BUSY_SPREAD = 1.3


def busy_warnings(load_before: float | None, other_cpus: float | None, cells: list,
                  load_after: float | None = None) -> list[str]:
    """One line per sign that the machine was not quiet while the benchmark ran; the spread
    warning states the load seen, so a reader can tell an unstable kernel from a busy machine."""
    cpus = os.cpu_count() or 1
    out = []
    if load_before is not None and load_before > BUSY_LOAD_PER_CPU * cpus:
        out.append(f"load average {load_before:.1f} on {cpus} CPUs before the run")
    if other_cpus is not None and other_cpus > BUSY_OTHER_CPUS:
        out.append(f"other processes used {other_cpus:.2f} CPUs on average during the run")
    spread = [f"{c['kernel']} {c['mode']} {c['size']}: {r['implementation']} p80/p20 = {r['p80_s'] / r['p20_s']:.2f}"
              for c in cells for r in c["results"] if r["p20_s"] > 0 and r["p80_s"] / r["p20_s"] > BUSY_SPREAD]
    if spread:
        seen = [f"load average {v:.1f}" for v in (load_before, load_after) if v is not None]
        if other_cpus is not None:
            seen.append(f"other processes {other_cpus:.2f} CPUs")
        out.append(f"the benchmark seems unstable: timing spread above {BUSY_SPREAD}x in {len(spread)} result(s) "
                   f"({', '.join(seen) or 'load unknown'}), e.g. " + "; ".join(spread[:3]))
    return out


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
