"""Measure the ``cpu`` backend against its issue-3 targets, side by side in one process.

    python benchmarks/cpu_targets.py                 # all targets
    python benchmarks/cpu_targets.py --only focal,nll --reps 9 --json out.json

Every target runs its candidates round-robin (one call of each per round, after warm-up
calls), so a noisy, shared machine slows them alike; it reports per candidate the median and
the spread of the rounds, and the ratios of medians. A bandwidth floor is the kernel's bytes
moved (every array read or written once) over the bandwidth of a copy with the same
footprint, measured right after (best of NumPy's copy and a parallel Numba copy). First-call times (compilation, or
loading from Numba's cache) are reported, not hidden. FLCE peak extra memory is measured in
a child process from the kernel's high-water mark of resident memory (VmHWM), minus the
outputs. Speed is never asserted here; see the README of backends/cpu_onednn for recorded
results.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import xloss

try:
    import torch
    import torch.nn.functional as F

    from xloss.torch.paper import paper_focal_loss
except ImportError:  # the torch baselines are skipped
    torch = None


# --- timing -----------------------------------------------------------------------------

def first_call(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def race(candidates: dict, reps: int, warmup: int = 2) -> dict:
    """{name: sorted list of seconds}, candidates interleaved round by round."""
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    times = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: sorted(v) for k, v in times.items()}


def med(ts) -> float:
    return statistics.median(ts)


def show(title: str, times: dict, *, base: str | None = None, floor_s: float | None = None, extra=None) -> dict:
    print(f"\n== {title}")
    rows = {}
    for name, ts in times.items():
        m = med(ts)
        line = f"  {name:44s} median {m * 1e3:9.2f} ms   [{ts[0] * 1e3:8.2f} .. {ts[-1] * 1e3:8.2f}]"
        if floor_s:
            line += f"   {m / floor_s:5.2f}x the bandwidth floor"
        print(line)
        rows[name] = {"median_ms": m * 1e3, "min_ms": ts[0] * 1e3, "max_ms": ts[-1] * 1e3}
    if base:
        for name, ts in times.items():
            if name != base:
                print(f"  ratio {base} / {name}: {med(times[base]) / med(ts):.2f}x")
    if floor_s:
        print(f"  bandwidth floor {floor_s * 1e3:.2f} ms")
        rows["bandwidth_floor_ms"] = floor_s * 1e3
    for k, v in (extra or {}).items():
        print(f"  {k}: {v}")
    return rows


# --- machine ----------------------------------------------------------------------------

_pcopy = None


def copy_bandwidth(nbytes: int, reps: int) -> float:
    """Bytes per second of a copy moving ``nbytes`` in all (read + write, the same footprint as
    the kernel it is the floor of): the faster of NumPy's copy and a parallel Numba copy."""
    global _pcopy
    if _pcopy is None:
        from numba import njit, prange

        @njit(parallel=True)
        def pcopy(src, dst):
            blk = 1 << 16
            for b in prange((src.size + blk - 1) // blk):
                for i in range(b * blk, min(src.size, (b + 1) * blk)):
                    dst[np.uint64(i)] = src[np.uint64(i)]

        _pcopy = pcopy
    src = np.ones(nbytes // 8, np.float32)
    dst = np.empty_like(src)
    _pcopy(src, dst)
    t = race({"numpy": lambda: np.copyto(dst, src), "numba": lambda: _pcopy(src, dst)}, reps)
    best = min(med(v) for v in t.values())
    bw = 2 * src.nbytes / best
    print(f"  copy bandwidth at {nbytes / 2**20:.0f} MiB moved: {bw / 1e9:.1f} GB/s "
          f"(numpy {2 * src.nbytes / med(t['numpy']) / 1e9:.1f}, numba {2 * src.nbytes / med(t['numba']) / 1e9:.1f})")
    return bw


def machine() -> dict:
    import numba

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "numba": numba.__version__, "numba_threads": numba.get_num_threads(),
            "torch": getattr(torch, "__version__", None), "torch_threads": torch.get_num_threads() if torch else None,
            "numpy": np.__version__, "python": platform.python_version()}


# --- targets ----------------------------------------------------------------------------

def bench_focal(reps, n=8 << 20):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    y = (rng.random(n) < 0.1).astype(np.float32)
    cpu = xloss.backend("cpu")
    cands = {"xloss cpu forward+grad (numpy)": lambda: xloss.focal_loss_with_grad(x, y, reduction="mean",
                                                                                  backend=cpu)}
    extra = {"first call xloss (compile or cache load)": f"{first_call(cands['xloss cpu forward+grad (numpy)']):.2f} s"}
    cands["xloss cpu forward only"] = lambda: xloss.focal_loss(x, y, reduction="mean", backend=cpu)
    cands["xloss cpu grad only"] = lambda: xloss.focal_loss_grad(x, y, reduction="mean", backend=cpu)
    extra["first call forward / grad only"] = (f"{first_call(cands['xloss cpu forward only']):.2f} s / "
                                               f"{first_call(cands['xloss cpu grad only']):.2f} s")
    if torch is not None:
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def eager():
            xx = tx.detach().requires_grad_()
            paper_focal_loss(xx, ty, 0.25, 2, "mean").backward()
            return xx.grad

        compiled_fn = torch.compile(paper_focal_loss)

        def compiled():
            xx = tx.detach().requires_grad_()
            compiled_fn(xx, ty, 0.25, 2, "mean").backward()
            return xx.grad

        extra["first call torch.compile"] = f"{first_call(compiled):.2f} s"
        cands["xloss cpu forward+grad (torch tensors)"] = lambda: xloss.focal_loss_with_grad(
            tx, ty, reduction="mean", backend=cpu)
        cands["torch eager autograd (paper A.1)"] = eager
        cands["torch.compile (paper A.1)"] = compiled
        # correctness of the comparison: same loss and gradient
        _, d = xloss.focal_loss_with_grad(x, y, reduction="mean", backend=cpu)
        ref = eager().numpy()
        extra["max |dx - torch dx| / max |torch dx|"] = f"{np.abs(d - ref).max() / np.abs(ref).max():.2e}"
    t = race(cands, reps)
    floor = 12 * n / copy_bandwidth(12 * n, reps)  # read x, y; write dx (the mean loss is a scalar)
    return show(f"focal loss forward+grad, {n} float32, alpha 0.25, gamma 2, mean", t,
                base="torch eager autograd (paper A.1)" if torch else None, floor_s=floor, extra=extra), t


def bench_bce(reps, n=8 << 20):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.001, 0.999, n).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.float32)
    w = rng.uniform(0, 2, n).astype(np.float32)
    out = np.empty_like(x)
    cpu = xloss.backend("cpu")
    cands = {"xloss cpu bce_grad (weight, mean)": lambda: xloss.bce_grad(x, y, weight=w, backend=cpu),
             "xloss cpu bce_grad, out=": lambda: xloss.bce_grad(x, y, weight=w, backend=cpu, out=out)}
    extra = {"first call xloss": f"{first_call(cands['xloss cpu bce_grad (weight, mean)']):.2f} s"}
    if torch is not None:
        tx, ty, tw = map(torch.from_numpy, (x, y, w))
        g = torch.tensor(1.0)
        cands["torch aten.binary_cross_entropy_backward"] = lambda: torch.ops.aten.binary_cross_entropy_backward(
            g, tx, ty, tw, 1)
    t = race(cands, reps)
    floor = 16 * n / copy_bandwidth(16 * n, reps)  # read x, y, w; write dx
    return show(f"BCE gradient, {n} float32 with weight, mean", t,
                base="torch aten.binary_cross_entropy_backward" if torch else None, floor_s=floor, extra=extra), t


def bench_nll(reps, n=32768, c=1000):
    rng = np.random.default_rng(2)
    logp = rng.standard_normal((n, c)).astype(np.float32)
    target = rng.integers(0, c, n)
    target[::97] = -100
    out = np.empty_like(logp)
    out.fill(1.0)  # touched: a training loop's reused buffer
    cpu = xloss.backend("cpu")
    libc = ctypes.CDLL(None)
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    cands = {"xloss cpu nll_loss_grad (fresh output)": lambda: xloss.nll_loss_grad(1.0, logp, target, backend=cpu),
             "xloss cpu nll_loss_grad, out=": lambda: xloss.nll_loss_grad(1.0, logp, target, backend=cpu, out=out),
             "libc memset of the output": lambda: libc.memset(out.ctypes.data, 0, out.nbytes),
             "numpy out.fill(0)": lambda: out.fill(0)}
    extra = {"first call xloss": f"{first_call(cands['xloss cpu nll_loss_grad (fresh output)']):.2f} s"}
    if torch is not None:
        tl, tt = torch.from_numpy(logp), torch.from_numpy(target)
        tw = torch.ones(c)
        g = torch.tensor(1.0)
        total = torch.tensor(float((target != -100).sum()))
        cands["torch aten.nll_loss_backward"] = lambda: torch.ops.aten.nll_loss_backward(
            g, tl, tt, tw, 1, -100, total)
    t = race(cands, reps)
    rows = show(f"NLL backward, N={n}, C={c}, float32, mean", t,
                base="torch aten.nll_loss_backward" if torch else None, extra=extra)
    m = med(t["libc memset of the output"])
    print(f"  out= / memset: {med(t['xloss cpu nll_loss_grad, out=']) / m:.2f}x")
    return rows, t


def flce_problem(bt, h, v, seed=3):
    rng = np.random.default_rng(seed)
    inp = (rng.standard_normal((bt, h)) / np.sqrt(h)).astype(np.float32)
    w = rng.standard_normal((v, h)).astype(np.float32)
    target = rng.integers(0, v, bt)
    grad = np.full(bt, 1.0 / bt, np.float32)
    # the global statistics the forward pass would have produced (float32 GEMM, chunked)
    lmax = np.empty(bt, np.float32)
    sexp = np.zeros(bt, np.float64)
    for c0 in range(0, v, 4096):
        lg = inp @ w[c0:c0 + 4096].T
        m = lg.max(1)
        lmax = m if c0 == 0 else np.maximum(lmax, m)
    for c0 in range(0, v, 4096):
        lg = inp @ w[c0:c0 + 4096].T
        sexp += np.exp((lg - lmax[:, None]).astype(np.float64)).sum(1)
    return inp, w, target, grad, lmax, sexp.astype(np.float32)


def bench_flce(reps, bt=2048, h=1024, v=32000, blas="auto"):
    inp, w, target, grad, lmax, sexp = flce_problem(bt, h, v)
    mask = np.zeros(bt, bool)
    cpu = xloss.backend("cpu", blas=blas) if blas != "auto" else xloss.backend("cpu")
    gemm_name = cpu.gemm().name

    def ours():
        return xloss.fused_linear_cross_entropy_grad(grad, inp, w, mask, target, logits_max=lmax,
                                                     sum_exp_logits=sexp, backend=cpu)

    cands = {"xloss cpu FLCE grad (recompute)": ours}
    extra = {"first call xloss": f"{first_call(ours):.2f} s", "BLAS": gemm_name}
    logits = np.empty((bt, v), np.float32)
    ig = np.empty((bt, h), np.float32)
    wg = np.empty((v, h), np.float32)
    if gemm_name == "torch":
        tA, tW, tL, tIG, tWG = map(torch.from_numpy, (inp, w, logits, ig, wg))

        def bare():
            torch.mm(tA, tW.t(), out=tL)
            torch.mm(tL, tW, out=tIG)
            torch.mm(tL.t(), tA, out=tWG)
    else:
        def bare():
            np.matmul(inp, w.T, out=logits)
            np.matmul(logits, w, out=ig)
            np.matmul(logits.T, inp, out=wg)
    cands[f"three bare GEMMs ({gemm_name})"] = bare
    if torch is not None:
        tA, tW, tT, tG = torch.from_numpy(inp), torch.from_numpy(w), torch.from_numpy(target), torch.from_numpy(grad)

        def torch_autograd():
            a = tA.detach().requires_grad_()
            ww = tW.detach().requires_grad_()
            loss = F.cross_entropy(a @ ww.t(), tT, reduction="none")
            return torch.autograd.grad((loss * tG).sum(), (a, ww))

        cands["torch autograd, materialised logits"] = torch_autograd
        gi, gw = ours()
        ti, tw_ = torch_autograd()
        extra["max |input_grad - torch| / max |torch|"] = f"{np.abs(gi - ti.numpy()).max() / ti.abs().max():.2e}"
        extra["max |weight_grad - torch| / max |torch|"] = f"{np.abs(gw - tw_.numpy()).max() / tw_.abs().max():.2e}"
    t = race(cands, reps, warmup=1)
    rows = show(f"FLCE gradients, BT={bt}, H={h}, V={v}, float32", t, base="torch autograd, materialised logits"
                if torch else None, extra=extra)
    ratio = med(t["xloss cpu FLCE grad (recompute)"]) / med(t[f"three bare GEMMs ({gemm_name})"])
    print(f"  xloss / bare GEMMs: {ratio:.3f}x")
    rows["xloss_over_bare_gemms"] = ratio
    peak = flce_peak_memory(bt, h, v, blas)
    logits_bytes = bt * v * 4
    print(f"  peak extra memory: {peak / 2**20:.1f} MiB = {peak / logits_bytes:.3f} of the {logits_bytes / 2**20:.0f} "
          f"MiB logits")
    rows["peak_extra_bytes"] = peak
    rows["peak_extra_fraction_of_logits"] = peak / logits_bytes
    return rows, t


_PEAK_CHILD = r"""
import sys, numpy as np, xloss
sys.path.insert(0, {here!r})
from cpu_targets import flce_problem
bt, h, v, blas = {bt}, {h}, {v}, {blas!r}
inp, w, target, grad, lmax, sexp = flce_problem(bt, h, v)
mask = np.zeros(bt, bool)
cpu = xloss.backend("cpu", blas=blas) if blas != "auto" else xloss.backend("cpu")
cpu.gemm()
small = xloss.fused_linear_cross_entropy_grad(grad[:8], inp[:8], w[:300], mask[:8], target[:8] % 300,
                                              logits_max=lmax[:8], sum_exp_logits=sexp[:8], backend=cpu)
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark
base = rss()
gi, gw = xloss.fused_linear_cross_entropy_grad(grad, inp, w, mask, target, logits_max=lmax, sum_exp_logits=sexp,
                                              backend=cpu)
print(hwm() - base - gi.nbytes - gw.nbytes)
"""


def flce_peak_memory(bt, h, v, blas) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    code = _PEAK_CHILD.format(here=here, bt=bt, h=h, v=v, blas=blas)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(res.stdout.strip().splitlines()[-1])


def bench_gemm(reps, bt=2048, h=1024, cv=2048):
    """NumPy's BLAS against PyTorch's on the FLCE chunk shapes (what ``blas="auto"`` relies on)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((bt, h), dtype=np.float32)
    w = rng.standard_normal((cv, h), dtype=np.float32)
    g = rng.standard_normal((bt, cv), dtype=np.float32)
    lo, io, wo = np.empty((bt, cv), np.float32), np.empty((bt, h), np.float32), np.empty((cv, h), np.float32)
    cands = {"numpy: L = A @ W.T, IG = G @ W, WG = G.T @ A": lambda: (np.matmul(a, w.T, out=lo),
                                                                      np.matmul(g, w, out=io),
                                                                      np.matmul(g.T, a, out=wo))}
    if torch is not None:
        ta, tw, tg, tl, ti, two = map(torch.from_numpy, (a, w, g, lo, io, wo))
        cands["torch: same three"] = lambda: (torch.mm(ta, tw.t(), out=tl), torch.mm(tg, tw, out=ti),
                                              torch.mm(tg.t(), ta, out=two))
    t = race(cands, reps)
    flops = 3 * 2 * bt * h * cv
    rows = show(f"BLAS: three GEMMs of one FLCE chunk (BT={bt}, H={h}, chunk={cv})", t)
    for k, ts in t.items():
        print(f"  {k}: {flops / med(ts) / 1e9:.0f} GFLOP/s")
    return rows, t


_COMPILE_CHILD = r"""
import json, time, numpy as np, xloss
rng = np.random.default_rng(0)
x = rng.standard_normal(1000).astype(np.float32)
y = (x > 0).astype(np.float32)
out = {}
def first(name, fn):
    t = time.perf_counter(); fn(); out[name] = round(time.perf_counter() - t, 2)
first("import + focal forward+grad (gamma 2)", lambda: xloss.focal_loss_with_grad(x, y, reduction="mean"))
first("focal forward", lambda: xloss.focal_loss(x, y, reduction="mean"))
first("bce_grad", lambda: xloss.bce_grad(np.abs(x) % 1, y))
first("nll_loss_grad", lambda: xloss.nll_loss_grad(1.0, x.reshape(10, 100), np.arange(10)))
inp = x.reshape(100, 10); w = rng.standard_normal((50, 10)).astype(np.float32)
first("fused_linear_cross_entropy_grad", lambda: xloss.fused_linear_cross_entropy_grad(
    np.ones(100, np.float32), inp, w, np.zeros(100, bool), np.zeros(100, np.int64),
    logits_max=np.zeros(100, np.float32), sum_exp_logits=np.ones(100, np.float32)))
print(json.dumps(out))
"""


def bench_compile() -> dict:
    """First-call times with an empty Numba cache (a child process with its own cache folder):
    what a fresh install pays once, per dtype and kernel variant, before the cache is warm."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        res = subprocess.run([sys.executable, "-c", _COMPILE_CHILD], capture_output=True, text=True, env=env,
                             check=True)
        cold = json.loads(res.stdout.strip().splitlines()[-1])
        res = subprocess.run([sys.executable, "-c", _COMPILE_CHILD], capture_output=True, text=True, env=env,
                             check=True)
        warm = json.loads(res.stdout.strip().splitlines()[-1])
    print("\n== first call, float32 (compilation with an empty cache / load from the cache in a new process)")
    for k in cold:
        print(f"  {k:44s} {cold[k]:6.2f} s / {warm[k]:5.2f} s")
    return {"cold_s": cold, "cached_s": warm}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="compile,focal,bce,nll,gemm,flce", help="comma-separated subset")
    ap.add_argument("--reps", type=int, default=7, help="timed rounds per target (FLCE: half)")
    ap.add_argument("--blas", default="auto", choices=("auto", "torch", "numpy"))
    ap.add_argument("--threads", type=int, help="threads for Numba and PyTorch alike (default: their defaults)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        import numba

        numba.set_num_threads(args.threads)
        if torch is not None:
            torch.set_num_threads(args.threads)
    only = set(args.only.split(","))
    info = machine()
    info["load_average_at_start"] = os.getloadavg()
    print("machine:", json.dumps(info))
    results = {"machine": info, "command": " ".join([os.path.basename(sys.argv[0])] + (argv or sys.argv[1:]))}
    if "compile" in only:
        results["compile"] = bench_compile()
    if "focal" in only:
        results["focal"] = bench_focal(args.reps)[0]
    if "bce" in only:
        results["bce"] = bench_bce(args.reps)[0]
    if "nll" in only:
        results["nll"] = bench_nll(args.reps)[0]
    if "gemm" in only:
        results["gemm"] = bench_gemm(args.reps)[0]
    if "flce" in only:
        results["flce"] = bench_flce(max(3, args.reps // 2), blas=args.blas)[0]
    results["load_average_at_end"] = os.getloadavg()
    print(f"\nload average at start {info['load_average_at_start']}, at end {results['load_average_at_end']} "
          f"(other processes share these {os.cpu_count()} cores)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
