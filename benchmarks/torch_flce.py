"""Fused linear-cross-entropy forward+backward: xloss.torch against PyTorch autograd through
materialised logits (``F.cross_entropy(x @ W.T, t)``), time and peak memory.

    python benchmarks/torch_flce.py              # the issue's target: BT=4096 H=1024 V=32000 fp32, cpu backend
    python benchmarks/torch_flce.py --bt 1024 --reps 3 --json out.json
    python benchmarks/torch_flce.py --rss                    # also peak RSS, each variant in a fresh process

Time: both variants run in one process, warm, interleaved (baseline, xloss, baseline, ...)
so that load from other processes on a shared machine hits both alike; the report gives
each variant's median and the median of the per-pair ratios. Memory: the largest net
allocation during one forward+backward above what was live before (inputs and weights),
counted allocation by allocation (``peak_memory.py`` beside this script: PyTorch's allocator events
plus NumPy's tracemalloc peak; gradients included, since both variants must produce them).
``--rss`` adds the peak resident set of a fresh process per variant minus its resident set
after the setup (Linux VmHWM, reset after the setup) — a cruder, allocator-independent
cross-check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from peak_memory import track_peak_memory

import xloss
import xloss.torch as xt

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def make_problem(args):
    g = torch.Generator().manual_seed(0)
    dt = DTYPES[args.dtype]
    x = (torch.randn(args.bt, args.hidden, generator=g) * 0.5).to(dt).requires_grad_()
    w = (torch.randn(args.vocab, args.hidden, generator=g) * 0.02).to(dt).requires_grad_()
    t = torch.randint(0, args.vocab, (args.bt,), generator=g)
    t[:: 17] = -100  # some padding
    return x, w, t


def variants(args, x, w, t):
    def baseline():
        loss = F.cross_entropy(x @ w.T, t, ignore_index=-100)
        loss.backward()
        return loss

    def fused():
        loss = xt.fused_linear_cross_entropy(x, w, t, chunk_size=args.chunk_size, backend=args.backend)
        loss.backward()
        return loss

    return {"torch_autograd": baseline, "xloss_flce": fused}


def clear(x, w):
    x.grad = None
    w.grad = None


def run_rss(args, name):
    """Child process: set up, then run one variant once (after a warm-up) and print RSS facts."""
    tiny = argparse.Namespace(**{**vars(args), "bt": 64, "vocab": 256, "hidden": 32})
    x, w, t = make_problem(tiny)
    variants(tiny, x, w, t)[name]()  # imports, Numba kernels and allocator warm-up, on a tiny problem
    x, w, t = make_problem(args)
    fn = variants(args, x, w, t)[name]
    # reset the kernel's peak-RSS mark (ru_maxrss would also count the parent's pages copied
    # at fork), then read it back after the run (Linux: /proc/self/clear_refs, VmHWM)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_kib("VmRSS")
    fn()
    print(json.dumps({"rss_setup": base * 1024, "rss_peak": _status_kib("VmHWM") * 1024}))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bt", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--rss", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--_rss-child", dest="rss_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.rss_child:
        return run_rss(args, args.rss_child)

    x, w, t = make_problem(args)
    fns = variants(args, x, w, t)
    native16 = args.dtype != "float32" and args.backend == "cpu"  # xloss.torch.flce_native's 16-bit default
    chunk = args.chunk_size or (xt.chunking.default_half_chunk_size(args.vocab) if native16
                                else xt.default_chunk_size(args.hidden, args.vocab))
    print(f"FLCE fwd+bwd BT={args.bt} H={args.hidden} V={args.vocab} {args.dtype}, backend={args.backend}, "
          f"chunk={chunk}, torch threads={torch.get_num_threads()}, xloss {xloss.__version__}, "
          f"torch {torch.__version__}")

    losses = {}
    for name, fn in fns.items():  # warm-up (Numba compile, allocator) and a correctness check
        losses[name] = fn().detach().item()
        clear(x, w)
    rel = abs(losses["xloss_flce"] - losses["torch_autograd"]) / abs(losses["torch_autograd"])
    print(f"loss: torch {losses['torch_autograd']:.6f}  xloss {losses['xloss_flce']:.6f}  (rel. diff {rel:.2e})")

    peaks = {}
    for name, fn in fns.items():
        with track_peak_memory() as peak:
            fn()
        clear(x, w)
        peaks[name] = {"torch_bytes": peak.torch_bytes, "numpy_bytes": peak.numpy_bytes, "bytes": peak.bytes}
    mem_ratio = peaks["xloss_flce"]["bytes"] / peaks["torch_autograd"]["bytes"]
    for name, pk in peaks.items():
        print(f"peak extra memory {name:15s} {pk['bytes'] / 2**20:9.1f} MiB "
              f"(torch {pk['torch_bytes'] / 2**20:.1f} + numpy {pk['numpy_bytes'] / 2**20:.1f})")
    print(f"memory ratio xloss/torch: {mem_ratio:.3f} (target <= 0.25)")

    times = {name: [] for name in fns}
    ratios = []
    for _ in range(args.reps):
        pair = {}
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            pair[name] = time.perf_counter() - t0
            clear(x, w)
            times[name].append(pair[name])
        ratios.append(pair["xloss_flce"] / pair["torch_autograd"])
    for name, ts in times.items():
        print(f"time {name:15s} median {statistics.median(ts):7.3f} s  min {min(ts):7.3f} s  "
              f"max {max(ts):7.3f} s  ({len(ts)} runs)")
    time_ratio = statistics.median(ratios)
    print(f"time ratio xloss/torch: median of pairs {time_ratio:.3f}, of minima "
          f"{min(times['xloss_flce']) / min(times['torch_autograd']):.3f} (target <= 1.1)")

    result = {"bt": args.bt, "hidden": args.hidden, "vocab": args.vocab, "dtype": args.dtype, "backend": args.backend,
              "chunk": chunk, "threads": torch.get_num_threads(), "losses": losses, "peaks": peaks,
              "memory_ratio": mem_ratio, "times": times, "pair_ratios": ratios, "time_ratio": time_ratio}

    if args.rss:
        rss = {}
        for name in fns:
            cmd = [sys.executable, __file__, "--bt", str(args.bt), "--hidden", str(args.hidden), "--vocab",
                   str(args.vocab), "--dtype", args.dtype, "--backend", args.backend, "--_rss-child", name]
            if args.chunk_size:
                cmd += ["--chunk-size", str(args.chunk_size)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            facts = json.loads(out)
            rss[name] = facts["rss_peak"] - facts["rss_setup"]
            print(f"peak RSS above setup {name:15s} {rss[name] / 2**20:9.1f} MiB")
        print(f"RSS ratio xloss/torch: {rss['xloss_flce'] / rss['torch_autograd']:.3f}")
        result["rss"] = rss

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
