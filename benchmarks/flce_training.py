"""FLCE forward+backward as a training loop runs it: xloss.torch against the stock PyTorch paths,
interleaved in one process (time and peak memory, gradients included).

    python benchmarks/flce_training.py                    # every case, 5 interleaved rounds
    python benchmarks/flce_training.py --cases bf16 --reps 9 --json out.json

Cases (``CASES``):

* ``bf16``: BT 2048, H 1024, V 32000, bfloat16 operands. Stock = what a transformers model does:
  bf16 logits ``x @ W.T``, upcast to float32, ``F.cross_entropy``. Targets: >= 1.0x (goal 1.5x)
  at <= 0.4 of the stock peak memory.
* ``fp32``: the same shape in float32, against autograd through materialised logits and against
  the three bare GEMMs (logits, ``G @ W``, ``G.T @ x``) alone. Target: >= 1.2x autograd at <= 0.25
  of its memory.
* ``skinny_fp32`` / ``skinny_bf16``: BT 4, H 1024, V 262144 (decode-like): no slower than stock.
* ``sft_bf16``: the ``bf16`` shape as instruction tuning sees it: four sequences of 512 tokens whose
  first quarter (the prompt) is masked with ``ignore_index``. The other cases mask every 17th token
  (padding). The cpu path runs no GEMM on ignored tokens; the stock path computes them all.

Every candidate runs the same number of rounds, in the same order each round after one warm-up
call each; the report gives each candidate's median and the median of the per-round ratios
(the ratio that survives load from other processes best). The machine's load average is
printed before and after: on a shared machine absolute times are not comparable between runs.

``measure(case, reps)`` is the entry point for other harnesses (e.g. ``xloss bench``): it
returns a JSON-able dict with the per-candidate times, ratios and peak memories.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from peak_memory import track_peak_memory

import xloss.torch as xt

SHAPES = {"bf16": (2048, 1024, 32000, torch.bfloat16), "fp32": (2048, 1024, 32000, torch.float32),
          "skinny_fp32": (4, 1024, 262144, torch.float32), "skinny_bf16": (4, 1024, 262144, torch.bfloat16),
          "sft_bf16": (2048, 1024, 32000, torch.bfloat16)}
CASES = tuple(SHAPES)
PROMPT_MASKED = {"sft_bf16": (512, 128)}  # case -> (sequence length, masked prompt tokens at its start)


def problem(bt, h, v, dtype, seed=0, prompt=None):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(bt, h, generator=g) * 0.5).to(dtype).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.02).to(dtype).requires_grad_()
    t = torch.randint(0, v, (bt,), generator=g)
    if prompt is None:
        t[::17] = -100  # some padding
    else:
        seq, masked = prompt
        t.view(-1, seq)[:, :masked] = -100
    return x, w, t


def candidates(case, x, w, t):
    """name -> callable running one forward+backward (leaving x.grad, w.grad set). The first is the baseline."""

    def stock():  # a transformers model: logits in the operands' dtype, upcast, cross entropy
        F.cross_entropy((x @ w.T).float(), t).backward()

    def fused():
        xt.fused_linear_cross_entropy(x, w, t).backward()

    out = {"stock": stock, "xloss": fused}
    if case == "fp32":
        gbuf = torch.empty(x.shape[0], w.shape[0])

        def bare_gemms():  # the three products alone, no softmax, no allocation of the (BT, V) buffer
            with torch.no_grad():
                torch.mm(x, w.T, out=gbuf)
                x.grad = gbuf @ w
                w.grad = gbuf.T @ x

        out["bare_gemms"] = bare_gemms
    return out


def _clear(x, w):
    x.grad = None
    w.grad = None


def measure(case: str, reps: int = 5) -> dict:
    bt, h, v, dtype = SHAPES[case]
    x, w, t = problem(bt, h, v, dtype, prompt=PROMPT_MASKED.get(case))
    fns = candidates(case, x, w, t)
    base = next(iter(fns))
    for fn in fns.values():  # warm-up: imports, kernels, allocator
        fn()
        _clear(x, w)
    peaks = {}
    for name, fn in fns.items():
        with track_peak_memory() as pk:
            fn()
        _clear(x, w)
        peaks[name] = pk.bytes
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            _clear(x, w)
    speedups = {name: statistics.median(b / s for b, s in zip(times[base], times[name])) for name in fns}
    return {"case": case, "bt": bt, "hidden": h, "vocab": v, "dtype": str(dtype).replace("torch.", ""),
            "reps": reps, "median_s": {n: statistics.median(ts) for n, ts in times.items()}, "times_s": times,
            "speedup_vs_stock": speedups,
            "peak_bytes": peaks, "memory_vs_stock": {n: peaks[n] / peaks[base] for n in fns}}


def machine() -> dict:
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {"cpu": model, "cores": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    info = {"machine": machine(), "load_before": os.getloadavg(), "results": []}
    print(json.dumps(info["machine"]))
    print(f"load average before: {info['load_before']}")
    for case in args.cases.split(","):
        r = measure(case, args.reps)
        info["results"].append(r)
        print(f"\n{case}: BT {r['bt']} H {r['hidden']} V {r['vocab']} {r['dtype']}, {r['reps']} interleaved rounds")
        for name in r["median_s"]:
            print(f"  {name:11s} median {r['median_s'][name]:8.4f} s   "
                  f"speedup vs stock {r['speedup_vs_stock'][name]:5.2f}x"
                  f"   peak {r['peak_bytes'][name] / 2**20:8.1f} MiB ({r['memory_vs_stock'][name]:.3f} of stock)")
    info["load_after"] = os.getloadavg()
    print(f"\nload average after: {info['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return info


if __name__ == "__main__":
    main()
