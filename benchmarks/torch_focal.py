"""Focal-loss training step (forward + backward through the loss): xloss.torch.SigmoidFocalLoss
against the paper's appendix A.1 code (torchvision's sigmoid_focal_loss) under eager autograd,
and against ``torch.compile`` of that code.

    python benchmarks/torch_focal.py                       # 8M elements, float32, reduction="sum", cpu backend
    python benchmarks/torch_focal.py --reduction none --dtype bfloat16 --json out.json

Each step: ``loss = fn(x, y); loss.backward()`` (``reduction="none"``: ``loss.sum().backward()``).
The variants run in one process, warm (torch.compile's compilation happens in the warm-up),
interleaved per repetition; the report gives medians and the median of the per-repetition
speed-ups over eager. Targets (issue 8): at least 5x eager and faster than torch.compile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import xloss.torch as xt
from xloss.torch.paper import paper_focal_loss as appendix_a1

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=8 * 2**20)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--reduction", choices=["none", "mean", "sum"], default="sum")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    g = torch.Generator().manual_seed(0)
    dt = DTYPES[args.dtype]
    x = (torch.randn(args.elements, generator=g) * 3).to(dt).requires_grad_()
    y = (torch.rand(args.elements, generator=g) < 0.01).to(dt)  # RetinaNet-like: few positives

    module = xt.SigmoidFocalLoss(alpha=0.25, gamma=2.0, reduction=args.reduction, backend=args.backend)
    compiled = None if args.no_compile else torch.compile(appendix_a1)

    def step(fn):
        def run():
            loss = fn(x, y)
            (loss.sum() if args.reduction == "none" else loss).backward()
            x.grad = None
        return run

    variants = {"eager_autograd": step(lambda a, b: appendix_a1(a, b, 0.25, 2, args.reduction)),
                "xloss_module": step(module)}
    if compiled is not None:
        variants["torch_compile"] = step(lambda a, b: compiled(a, b, 0.25, 2, args.reduction))

    print(f"focal training step, {args.elements} elements {args.dtype}, reduction={args.reduction}, "
          f"backend={args.backend}, torch threads={torch.get_num_threads()}, torch {torch.__version__}")
    for fn in variants.values():  # warm-up: Numba kernels, torch.compile
        fn()
        fn()
    times = {name: [] for name in variants}
    for _ in range(args.reps):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"  {name:15s} median {med[name] * 1e3:8.2f} ms  min {min(ts) * 1e3:8.2f} ms")
    speedups = {name: statistics.median(e / t for e, t in zip(times["eager_autograd"], ts))
                for name, ts in times.items()}
    print("speed-up over eager (median of per-repetition ratios): "
          + ", ".join(f"{k} {v:.1f}x" for k, v in speedups.items()))
    if compiled is not None:
        vs_compile = statistics.median(c / t for c, t in zip(times["torch_compile"], times["xloss_module"]))
        print(f"xloss vs torch.compile: {vs_compile:.2f}x faster")
    result = {"elements": args.elements, "dtype": args.dtype, "reduction": args.reduction, "backend": args.backend,
              "threads": torch.get_num_threads(), "times": times, "speedups": speedups}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
