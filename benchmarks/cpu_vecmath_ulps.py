"""Measure the max ulp error of the cpu backend's vectorized exp/log helpers (README table).

    python benchmarks/cpu_vecmath_ulps.py            # float32: every input (about 10 minutes)
    python benchmarks/cpu_vecmath_ulps.py --step 97  # float32: every 97th bit pattern

float32 helpers are compared with NumPy in float64 on every float32 of their domain (or a
strided sweep); float64 helpers with mpmath at 50 digits on log-uniform samples covering
every binade. The tests (tests/backends/cpu/test_vecmath.py) assert bounds on smaller sweeps.
"""

from __future__ import annotations

import argparse
import time

import mpmath
import numpy as np
from numba import njit, prange

from xloss.backends.cpu_onednn import vecmath as vm


@njit(parallel=True, error_model="numpy")
def _eval32(fn_id, a, g, out):
    for i in prange(a.size):
        v = a[i]
        if fn_id == 0:
            out[i] = vm.exp_f32(v)
        elif fn_id == 1:
            out[i] = vm.log1p_unit_f32(v, np.float32(1.0) / (np.float32(1.0) + v))
        else:
            out[i] = vm.pow_f32(v, g)


@njit(error_model="numpy")
def _eval64(fn_id, a, g, out):
    for i in range(a.size):
        v = a[i]
        if fn_id == 0:
            out[i] = vm.exp_f64(v)
        elif fn_id == 1:
            out[i] = vm.log1p_unit_f64(v, 1.0 / (1.0 + v))
        elif fn_id == 2:
            out[i] = vm.log_f64(v)
        else:
            out[i] = vm.pow_f64(v, g)


def sweep32(name, fn_id, lo, hi, exact, step, g=0.0):
    worst, where, count = 0.0, None, 0
    chunk = 1 << 26
    for start in range(0, 2**32, chunk * step):
        bits = np.arange(start, min(start + chunk * step, 2**32), step, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        x = x[(x >= lo) & (x <= hi)]
        if not x.size:
            continue
        out = np.empty_like(x)
        _eval32(fn_id, x, g, out)
        ref = exact(x.astype(np.float64))
        ok = np.abs(ref) < float(np.finfo(np.float32).max)
        with np.errstate(over="ignore"):
            spacing = np.spacing(np.abs(ref[ok]).astype(np.float32)).astype(np.float64)
        err = np.abs(out[ok] - ref[ok]) / spacing
        count += x.size
        if err.size and err.max() > worst:
            worst, where = float(err.max()), float(x[ok][np.argmax(err)])
    print(f"{name:28s} {count:>13,d} inputs   max {worst:.4f} ulp (at {where!r})")


def sample64(name, fn_id, xs, exact, g=0.0):
    mpmath.mp.dps = 50
    out = np.empty_like(xs)
    _eval64(fn_id, xs, g, out)
    worst, where = 0.0, None
    for got, x in zip(out, xs):
        e = exact(mpmath.mpf(float(x)))
        ef = float(e)
        if ef == 0.0 or not np.isfinite(ef):
            continue
        err = float(abs(mpmath.mpf(float(got)) - e) / mpmath.mpf(float(np.spacing(abs(ef)))))
        if err > worst:
            worst, where = err, float(x)
    print(f"{name:28s} {xs.size:>13,d} samples  max {worst:.4f} ulp (at {where!r})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", type=int, default=1, help="float32: test every STEP-th bit pattern")
    ap.add_argument("--samples", type=int, default=20000, help="float64: samples per helper")
    args = ap.parse_args(argv)
    t = time.time()
    sweep32("exp_f32 [-104, 89]", 0, -104.0, 89.0, np.exp, args.step)
    sweep32("log1p_unit_f32 [0, 1]", 1, 0.0, 1.0, np.log1p, args.step)
    for g in (0.3, 1.7, 4.25):
        sweep32(f"pow_f32 q in [0, 1], g={g}", 2, 0.0, 1.0, lambda q, g=g: np.power(q, g), max(args.step, 7), g)
    rng = np.random.default_rng(0)
    n = args.samples
    sample64("exp_f64 [-745, 709.7]", 0, rng.uniform(-745, 709.7, n), mpmath.exp)
    tiny_to_one = np.concatenate([10 ** rng.uniform(-300, 0, n // 2), rng.uniform(0, 1, n // 2)])
    sample64("log1p_unit_f64 [0, 1]", 1, tiny_to_one, mpmath.log1p)
    sample64("log_f64 (0, 1]", 2, 10 ** rng.uniform(-323, 0, n), mpmath.log)
    for g in (0.3, 1.7, 5.5):
        q = 10 ** rng.uniform(-300 / g, 0, n)
        sample64(f"pow_f64 q in (0, 1], g={g}", 3, q, lambda x, g=g: x ** mpmath.mpf(g), g)
    print(f"({time.time() - t:.0f} s)")


if __name__ == "__main__":
    main()
