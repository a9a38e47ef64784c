"""The fused cross-entropy row's cpu kernel (``backends/cpu_onednn/cross_entropy_fused.py``) as it is now
against the same file at an earlier commit, interleaved in one process on the same validated arguments,
each into its own reused gradient buffer (the kernel alone): per-call medians (wall, and CPU of every
thread), the median of the per-round ratios, each side's ratio to the bandwidth floor of ``xloss bench``
(the logits read once, the gradient written once, at this machine's copy bandwidth), the load average,
and how far the two gradients differ. The earlier file is compiled from ``git show`` without the disk
cache (its helpers are today's: fine while it imports names that still exist).

    python benchmarks/ce_fused_against_commit.py COMMIT [ROUNDS] [DTYPE] [NxC]   # 9 float32 8192x32000
"""

import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

from xloss import dtypes as xdt
from xloss.backends.cpu_onednn import cross_entropy_fused as new
from xloss.bench.machine import copy_bandwidth
from xloss.kernels.cross_entropy import validate

_FILE = "backends/cpu_onednn/cross_entropy_fused.py"


def _old_module(commit: str):
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{_FILE}"], capture_output=True, text=True,
                         check=True).stdout.replace("cache=True", "cache=False")
    mod = types.ModuleType(f"{new.__package__}._fused_at_{commit}")
    mod.__package__ = new.__package__
    exec(compile(src, f"{commit}:{_FILE}", "exec"), mod.__dict__)
    return mod


def main(commit: str, rounds: int, dtype: str, size: str) -> None:
    n, c = (int(v) for v in size.split("x"))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((n, c), dtype=np.float32) * 2).astype(xdt.FLOAT_DTYPES[dtype])
    t = rng.integers(0, c, n)
    t[::17] = -100
    floor = (2 * x.nbytes + n * 8) / copy_bandwidth()
    mods = {commit: _old_module(commit), "now": new}
    args = {k: validate.cross_entropy_with_grad_args(x, t, 1.0, weight=None, reduction="mean", ignore_index=-100,
                                                     label_smoothing=0.0, grad_out=np.zeros_like(x)) for k in mods}
    for k, m in mods.items():
        m.run(args[k])  # compile, and write each buffer once (a buffer in use, as a training loop's)
    g = [args[k].grad_out.astype(np.float64) for k in mods]
    print(f"{dtype} {size}: gradients differ in {np.mean(g[0] != g[1]):.2e} of the elements, by at most "
          f"{np.abs(g[0] - g[1]).max():.3g}; losses {[float(a.loss_out) for a in args.values()]}")
    times = {k: [] for k in mods}
    load0 = os.getloadavg()[0]
    for r in range(rounds):
        for k in (list(mods) if r % 2 == 0 else list(mods)[::-1]):
            c0, t0 = time.process_time(), time.perf_counter()
            mods[k].run(args[k])
            times[k].append((time.perf_counter() - t0, time.process_time() - c0))
    print(f"{rounds} rounds, load average {load0:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"floor {floor * 1e3:.1f} ms")
    for k, v in times.items():
        w, cpu = statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)
        print(f"  {k:>12}: {w * 1e3:7.1f} ms ({w / floor:.2f}x floor), CPU {cpu * 1e3:.0f} ms")
    a, b = times.values()
    print(f"  {commit}/now per round: wall {statistics.median(p[0] / q[0] for p, q in zip(a, b)):.3f}x, "
          f"CPU {statistics.median(p[1] / q[1] for p, q in zip(a, b)):.3f}x")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 9, sys.argv[3] if len(sys.argv) > 3 else "float32",
         sys.argv[4] if len(sys.argv) > 4 else "8192x32000")
