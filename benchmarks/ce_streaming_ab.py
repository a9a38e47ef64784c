"""The fused cross-entropy row (``cross_entropy_loss_with_grad``, cpu) with its gradient written by normal
stores and by streaming stores (``backends/cpu_onednn/streaming.py``), interleaved in one process: both
into one reused gradient buffer (the kernel alone, what streaming is for) and into a fresh one each call
(the plain call; both paths then take normal stores, so this pair shows the noise). Prints per-call
medians (wall and CPU of all threads), the median of the per-round wall ratios, each path's ratio to
the bandwidth floor of ``xloss bench`` (read the logits once, write the gradient once, at this machine's
copy bandwidth), and the load average; checks the two paths' results are bit-identical.

    python benchmarks/ce_streaming_ab.py [ROUNDS] [DTYPE] [NxC]     # defaults: 15 float32 8192x32000
"""

import os
import statistics
import sys
import time

import numpy as np

from xloss import dtypes as xdt
from xloss.backends.cpu_onednn import streaming
from xloss.bench.machine import copy_bandwidth
from xloss.kernels.cross_entropy import api

_NORMAL = 1 << 62  # a threshold no output reaches: normal stores


def _call(x, t, out):
    """(wall seconds, CPU seconds of every thread of this process, loss, gradient) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    loss, grad = api.cross_entropy_loss_with_grad(x, t, backend="cpu", grad_out=out)
    return time.perf_counter() - t0, time.process_time() - c0, loss, grad


def main(rounds: int, dtype: str, size: str) -> None:
    n, c = (int(v) for v in size.split("x"))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((n, c), dtype=np.float32) * 2).astype(xdt.FLOAT_DTYPES[dtype])
    t = rng.integers(0, c, n)
    t[::17] = -100
    floor = (2 * x.nbytes + n * 8) / copy_bandwidth()
    default = streaming.STREAM_MIN_BYTES
    paths = {"normal": _NORMAL, "streaming": default}
    reused = {k: np.empty_like(x) for k in paths}
    results = {}
    for name, threshold in paths.items():  # warm up (compile) and check both give the same bits
        streaming.STREAM_MIN_BYTES = threshold
        _, _, loss, grad = _call(x, t, reused[name])
        results[name] = (float(loss), grad.view(np.uint8))
    same = results["normal"][0] == results["streaming"][0] and np.array_equal(results["normal"][1],
                                                                            results["streaming"][1])
    times = {(k, m): [] for k in paths for m in ("reused", "fresh")}
    load0 = os.getloadavg()[0]
    for r in range(rounds):
        order = list(paths.items()) if r % 2 == 0 else list(paths.items())[::-1]
        for mode in ("reused", "fresh"):
            for name, threshold in order:
                streaming.STREAM_MIN_BYTES = threshold
                out = reused[name] if mode == "reused" else None
                times[(name, mode)].append(_call(x, t, out)[:2])
    streaming.STREAM_MIN_BYTES = default
    load1 = os.getloadavg()[0]
    print(f"{dtype} {size}, {rounds} rounds, bit-identical: {same}; load average {load0:.2f} -> {load1:.2f} "
          f"on {os.cpu_count()} CPUs; floor {floor * 1e3:.1f} ms")
    for mode in ("reused", "fresh"):
        a, b = times[("normal", mode)], times[("streaming", mode)]
        ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b))
        ma, mb = (statistics.median(v[0] for v in z) for z in (a, b))
        ca, cb = (statistics.median(v[1] for v in z) for z in (a, b))
        print(f"  {mode:6}: normal {ma * 1e3:7.1f} ms ({ma / floor:.2f}x floor, CPU {ca * 1e3:.0f} ms)  streaming "
              f"{mb * 1e3:7.1f} ms ({mb / floor:.2f}x floor, CPU {cb * 1e3:.0f} ms)  normal/streaming per round "
              f"{ratio:.3f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15, sys.argv[2] if len(sys.argv) > 2 else "float32",
         sys.argv[3] if len(sys.argv) > 3 else "8192x32000")
