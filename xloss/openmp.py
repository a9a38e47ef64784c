"""The OpenMP wait policy, decided when xloss is imported, before any OpenMP runtime (torch's, or
Numba's for the cpu backend) loads. Importing this loads nothing heavy.

**Passive waiting.** GNU OpenMP's idle threads spin for a while (about a millisecond) after
each parallel region before they sleep. A training step alternates many short regions (torch
layers, the loss's chunks) with Python between them; on a machine with more runnable threads
than cores — another job, or simply a busy shared host — the spinning threads take the cores
from the threads that have work, and every region waits at its barrier for a descheduled
thread. Measured on the 2-core reference machine (``benchmarks/results/openmp_contention.md``):
with ``OMP_WAIT_POLICY=PASSIVE`` both the stock and the fused step ran 2-5x faster under load,
and the fused step went from 0.5-0.8x to 0.9-1.7x the stock one. So, unless the user chose
(``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` set), importing xloss sets
``OMP_WAIT_POLICY=PASSIVE`` while no OpenMP runtime is loaded yet — OpenMP reads it once, when
it loads, so this works when xloss is imported before torch (``import xloss.torch`` without an
earlier ``import torch`` does that). When torch came first the runtime's policy is already
fixed; :func:`wait_policy` says which case applies (``xloss.backend("cpu").info()`` shows it).
Set ``OMP_WAIT_POLICY=ACTIVE`` to keep spinning.
"""

from __future__ import annotations

import os
import sys

OPENMP_NAMES = ("libgomp", "libiomp5", "libomp")


def loaded_openmp_runtimes() -> list[str]:
    """The OpenMP runtime files mapped into this process (Linux), for diagnostics."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(OPENMP_NAMES))


_policy_note = "not decided"


def prefer_passive_wait() -> str:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` for the OpenMP runtime this process will load, unless the
    user chose a policy or a runtime is already loaded. Returns what happened (also kept for
    :func:`wait_policy`)."""
    global _policy_note
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        _policy_note = "chosen by the environment"
    elif sys.platform != "linux":
        _policy_note = "runtime default (only set on Linux)"
    elif loaded_openmp_runtimes():
        _policy_note = ("runtime default: an OpenMP runtime was loaded before xloss (e.g. import torch first); "
                        "import xloss first or set OMP_WAIT_POLICY=PASSIVE")
    else:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _policy_note = "set to PASSIVE by xloss before the runtime loaded"
    return _policy_note


def wait_policy() -> str:
    """The OpenMP wait policy in force and who chose it, in words."""
    return f"{os.environ.get('OMP_WAIT_POLICY', 'unset')} ({_policy_note})"


prefer_passive_wait()
