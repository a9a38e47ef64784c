"""How fast can bf16 FLCE be here? The three GEMMs of a bf16 fused linear cross entropy with float32
logits, bare, against the whole xloss call, the stock path, and a square bf16 GEMM (this machine's
practical bf16 rate), interleaved in one process.

    python benchmarks/flce_gemm_floor.py                 # BT 2048, H 1024, V 32000 (benchmarks/flce_training.py's bf16)
    python benchmarks/flce_gemm_floor.py --size 2048x1024x32000 --reps 7

Candidates, each a forward+backward's worth:

* ``stock``: ``F.cross_entropy((x @ W.T).float(), t).backward()`` (bf16 logits, as transformers does);
* ``xloss``: ``xloss.torch.fused_linear_cross_entropy(x, W, t).backward()`` (float32 logits);
* ``logits_f32``: ``x @ W.T`` bf16 x bf16 -> float32 (the route xloss takes: oneDNN's matmul where the
  ``onednn-cpu-gomp`` package is installed, else the widened float32 GEMM), into a preallocated buffer;
* ``dx``: ``G @ W`` and ``dW``: ``G.T @ x``, bf16 -> bf16 (``torch.mm``, oneDNN), G a bf16 (BT, V) matrix;
* ``square``: one bf16 ``torch.mm`` of N x N by N x N with about as many flops as one of the above.

Reported: each median, its GFLOP/s (2 BT H V flops per GEMM), the three GEMMs' sum, and the ceiling
``stock / (three GEMMs)``: what xloss would reach if everything but the GEMMs were free.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import xloss.torch as xt
from xloss.backends.cpu_onednn import dnnl_matmul, gemm


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2048x1024x32000")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    bt, h, v = (int(s) for s in args.size.split("x"))
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(bt, h, generator=g) * 0.5).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.02).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, v, (bt,), generator=g)
    gm = (torch.randn(bt, v, generator=g) * 1e-4).to(torch.bfloat16)
    z = torch.empty(bt, v)
    flops = 2.0 * bt * h * v
    n = round((flops / 2) ** (1 / 3) / 64) * 64
    a_sq = torch.randn(n, n, generator=g).to(torch.bfloat16)

    def stock():
        F.cross_entropy((x @ w.T).float(), t).backward()

    def fused():
        xt.fused_linear_cross_entropy(x, w, t).backward()

    xd, wd = x.detach(), w.detach()
    calls = {"stock": stock, "xloss": fused,
             "logits_f32": lambda: gemm.logits_f32(z, xd, wd),
             "dx": lambda: torch.mm(gm, wd), "dW": lambda: torch.mm(gm.T, xd),
             "square": lambda: torch.mm(a_sq, a_sq)}
    work = {"logits_f32": flops, "dx": flops, "dW": flops, "square": 2.0 * n**3, "xloss": 3 * flops,
            "stock": 3 * flops}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; oneDNN matmul route: "
          f"{dnnl_matmul.available()}; BT {bt} H {h} V {v}; square N {n}; load {os.getloadavg()}")
    for fn in calls.values():
        fn()
        x.grad = w.grad = None
    times = {k: [] for k in calls}
    for _ in range(args.reps):
        for k, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
            x.grad = w.grad = None
    med = {k: statistics.median(ts) for k, ts in times.items()}
    for k, m in med.items():
        print(f"  {k:11s} {m * 1e3:8.1f} ms  {work[k] / m / 1e9:6.0f} GFLOP/s")
    three = [sum(ts) for ts in zip(times["logits_f32"], times["dx"], times["dW"], strict=True)]
    ceil = statistics.median(s / g3 for s, g3 in zip(times["stock"], three, strict=True))
    ratio = statistics.median(s / f for s, f in zip(times["stock"], times["xloss"], strict=True))
    over = statistics.median(f / g3 for f, g3 in zip(times["xloss"], three, strict=True))
    print(f"  three GEMMs {statistics.median(three) * 1e3:8.1f} ms  {3 * flops / statistics.median(three) / 1e9:6.0f}"
          f" GFLOP/s;  stock / xloss {ratio:.2f}x;  ceiling stock / (three GEMMs) {ceil:.2f}x;"
          f"  xloss / (three GEMMs) {over:.2f}")
    print(f"load after {os.getloadavg()}")


if __name__ == "__main__":
    main()
