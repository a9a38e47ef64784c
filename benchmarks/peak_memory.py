"""Peak memory of a region of code, counted allocation by allocation (not RSS).

PyTorch's CPU allocations are read from the profiler's memory events (every allocation and
free through c10's allocator, including the temporaries inside an op); NumPy's from
:mod:`tracemalloc` (NumPy reports its array data to it). The two peaks are taken separately
and added, which bounds the true combined peak from above; for code that allocates through
only one of them the number is exact. A measuring tool of this repository, not of the installed
package: the benchmarks import it as a sibling, the tests through ``tests/conftest.py`` and the
examples from the checkout's ``benchmarks/`` folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass

from torch.profiler import ProfilerActivity, profile


@dataclass
class PeakMemory:
    """Largest net allocation (bytes) seen inside the ``with`` block, above what was live at its start."""

    torch_bytes: int = 0
    numpy_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.torch_bytes + self.numpy_bytes

    @property
    def mib(self) -> float:
        return self.bytes / 2**20


class track_peak_memory:
    """``with track_peak_memory() as peak: ...`` then ``peak.bytes`` / ``peak.torch_bytes`` / ``peak.numpy_bytes``."""

    def __enter__(self) -> PeakMemory:
        self.result = PeakMemory()
        # the profiler starts first, so that its own Python allocations are not counted as NumPy's
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _without_profiler_notes():
            self._prof.__enter__()
        self._own_tracemalloc = not tracemalloc.is_tracing()
        if self._own_tracemalloc:
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._np_start = tracemalloc.get_traced_memory()[0]
        return self.result

    def __exit__(self, *exc):
        # read NumPy's peak before the profiler builds its (Python) event lists
        self.result.numpy_bytes = max(0, tracemalloc.get_traced_memory()[1] - self._np_start)
        with _without_profiler_notes():
            self._prof.__exit__(*exc)
        if self._own_tracemalloc:
            tracemalloc.stop()
        self.result.torch_bytes = _torch_peak(self._prof)
        return False


# what PyTorch's profiler library (kineto) writes on stderr as it starts and stops, at its USDT and
# INFO levels (KINETO_LOG_LEVEL cannot silence USDT below its highest setting, which hides errors too)
_NOTE = re.compile(rb"(USDT|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def _without_profiler_notes():
    """Run the block with file descriptor 2 captured, then write back every line but the profiler's notes
    (its warnings and errors, and anything else written meanwhile, still reach stderr)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real stderr: nothing to keep clean
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().splitlines(keepends=True) if not _NOTE.match(line)]
            if kept:
                os.write(2, b"".join(kept))


def _torch_peak(prof) -> int:
    """Running maximum of the signed CPU allocation sizes, in time order."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is not None:
        # every [memory] event with its signed size (the FunctionEvent list that prof.events()
        # builds keeps only the events it can attach to an op)
        sizes = [(e.start_ns(), e.nbytes()) for e in results.events()
                 if e.name() == "[memory]" and str(e.device_type()) == "DeviceType.CPU"]
    else:  # fallback for profiler versions without kineto_results
        sizes = [(e.time_range.start, e.cpu_memory_usage) for e in prof.events() if e.name == "[memory]"]
    live = peak = 0
    for _, size in sorted(sizes, key=lambda item: item[0]):
        live += size
        peak = max(peak, live)
    return peak
