"""Accuracy of the vectorizable exp/log helpers over their whole input range, and proof that
a loop calling them really vectorizes.

float32 helpers: a strided sweep over the float32 bit patterns of the whole domain (every
1021st pattern: every binade, about two million inputs for exp; every 211th in [0, 1] for
log1p), against NumPy in float64 (whose own error, < 1 ulp of float64, is invisible at
float32 resolution). float64 helpers: against mpmath
at 50 digits on log-uniform samples covering every binade, plus the edges.
"""

import platform
import re

import numpy as np
import pytest
from numba import njit

from xloss.backends.cpu_onednn import vecmath as vm

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 50


@njit(error_model="numpy")
def _apply32(fn_id, a, out):
    for i in range(a.size):
        v = a[i]
        if fn_id == 0:
            out[i] = vm.exp_f32(v)
        else:
            out[i] = vm.log1p_unit_f32(v, np.float32(1.0) / (np.float32(1.0) + v))


@njit(error_model="numpy")
def _pow32(a, g, out):
    for i in range(a.size):
        out[i] = vm.pow_f32(a[i], g)


@njit(error_model="numpy")
def _apply64(fn_id, a, g, out):
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


def _sweep32(lo: float, hi: float, step: int) -> np.ndarray:
    """Every ``step``-th float32 bit pattern that lies in [lo, hi] (both signs), plus the ends."""
    x = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[(x >= lo) & (x <= hi)]  # drops NaN
    return np.concatenate([x, np.array([lo, hi], np.float32)])


def _ulps32(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at ``exact`` (subnormal spacing below 2**-126)."""
    with np.errstate(over="ignore"):
        spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    spacing = np.where(np.isfinite(spacing), spacing, np.inf)
    return np.abs(got.astype(np.float64) - exact) / spacing


def _ulps64(got, exact_mp) -> float:
    worst = 0.0
    for g, e in zip(got, exact_mp):
        ef = float(e)
        if ef == 0.0:
            assert g == 0.0
            continue
        spacing = mpmath.mpf(float(np.spacing(abs(ef))))
        worst = max(worst, float(abs(mpmath.mpf(float(g)) - e) / spacing))
    return worst


def test_exp_f32_whole_range():
    x = _sweep32(-104.0, 89.0, 1021)
    out = np.empty_like(x)
    _apply32(0, x, out)
    exact = np.exp(x.astype(np.float64))
    finite = exact < float(np.finfo(np.float32).max)
    err = _ulps32(out[finite], exact[finite])
    assert err.max() <= 1.0, f"exp_f32 max error {err.max():.3f} ulp at x={x[finite][np.argmax(err)]!r}"
    assert np.all(np.isinf(out[~finite]))


def test_exp_f32_specials():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72283, 88.72284, -87.33655, -103.0, -104.0, -1e4, 1e4],
                 np.float32)
    out = np.empty_like(x)
    _apply32(0, x, out)
    assert out[0] == 1.0 and out[1] == 1.0
    assert out[2] == np.inf and out[3] == 0.0 and np.isnan(out[4])
    assert np.isfinite(out[5]) and out[6] == np.inf  # the overflow threshold
    assert out[7] > 0 and out[8] > 0  # smallest normal / subnormal results
    assert out[9] == 0.0 and out[10] == 0.0 and out[11] == np.inf


def test_log1p_f32_whole_unit_interval():
    t = _sweep32(0.0, 1.0, step=211)
    out = np.empty_like(t)
    _apply32(1, t, out)
    err = _ulps32(out, np.log1p(t.astype(np.float64)))
    assert err.max() <= 1.5, f"log1p_unit_f32 max error {err.max():.3f} ulp at t={t[np.argmax(err)]!r}"
    assert out[t == 0].max() == 0.0


@pytest.mark.parametrize("g", [0.1, 0.3, 0.999, 1.7, 2.2, 4.25, 7.9])
def test_pow_f32_is_the_correctly_rounded_float64_power(g):
    """float32 q over every binade (subnormals included): the result is np.power in float64
    rounded once, up to a rounding tie: at most half a float32 ulp from the exact power."""
    q = _sweep32(0.0, 1.0, 4099)
    out = np.empty_like(q)
    _pow32(q, g, out)
    exact = np.power(q.astype(np.float64), g)
    err = _ulps32(out, exact)
    assert err.max() <= 0.5 + 1e-4, f"pow_f32 max error {err.max():.6f} ulp at q={q[np.argmax(err)]!r}"


def test_pow_f32_edges():
    q = np.array([0.0, 1.0, np.nan, -0.5, 1e-45, np.inf], np.float32)
    for v, g, want in zip(q, (2.1, 3.3, 2.1, 1.5, 2.1, 0.7), (0.0, 1.0, np.nan, np.nan, 0.0, np.inf)):
        out = np.empty(1, np.float32)
        _pow32(np.array([v], np.float32), g, out)
        assert out[0] == want or (np.isnan(want) and np.isnan(out[0]))


def _samples64(rng, lo_exp, hi_exp, n):
    return np.concatenate([10.0 ** rng.uniform(lo_exp, hi_exp, n), rng.uniform(0, 1, n // 4)])


def test_exp_f64_against_mpmath():
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.uniform(-745, 709.7, 1500), rng.uniform(-1, 1, 300), [0.0, -708.5, -744.4, 709.78]])
    out = np.empty_like(x)
    _apply64(0, x, 0.0, out)
    assert _ulps64(out, [mpmath.exp(mpmath.mpf(v)) for v in x]) <= 1.0
    specials = np.array([np.inf, -np.inf, np.nan, 710.0, -746.0])
    out = np.empty_like(specials)
    _apply64(0, specials, 0.0, out)
    assert out[0] == np.inf and out[1] == 0.0 and np.isnan(out[2]) and out[3] == np.inf and out[4] == 0.0


def test_log1p_f64_against_mpmath():
    rng = np.random.default_rng(11)
    t = np.concatenate([_samples64(rng, -300, 0, 1600), [0.0, 1.0, 5e-324, 2.0**-53, np.sqrt(2) - 1]])
    t = t[t <= 1.0]
    out = np.empty_like(t)
    _apply64(1, t, 0.0, out)
    assert _ulps64(out, [mpmath.log1p(mpmath.mpf(v)) for v in t]) <= 1.0


def test_log_f64_against_mpmath_including_subnormals():
    rng = np.random.default_rng(12)
    q = np.concatenate([_samples64(rng, -323, 0, 1600), [5e-324, 2.2250738585072014e-308, 1.0, 0.5]])
    out = np.empty_like(q)
    _apply64(2, q, 0.0, out)
    assert _ulps64(out, [mpmath.log(mpmath.mpf(v)) for v in q]) <= 1.5
    specials = np.array([0.0, np.nan])
    out = np.empty_like(specials)
    _apply64(2, specials, 0.0, out)
    assert out[0] == -np.inf and np.isnan(out[1])


@pytest.mark.parametrize("g", [0.3, 0.999, 1.7, 2.5, 4.25])
def test_pow_f64_double_double_keeps_large_exponents_exact(g):
    """|g log q| up to ~745: a plain exp(g*log(q)) would lose ~9 bits here."""
    rng = np.random.default_rng(13)
    q = _samples64(rng, -320, 0, 600)
    q = q[np.log(q) * g > -744]  # keep results in the normal range (relative error is meaningful)
    out = np.empty_like(q)
    _apply64(3, q, g, out)
    assert _ulps64(out, [mpmath.mpf(v) ** mpmath.mpf(g) for v in q]) <= 2.0


def test_pow_f64_edges():
    q = np.array([0.0, np.inf, 1.0, np.nan, -0.5, 1e-300])
    g = [2.0, 0.5, 3.3, 2.0, 1.5, 2.0]
    out = np.empty_like(q)
    for i, (v, e) in enumerate(zip(q, g)):
        one = np.empty(1)
        _apply64(3, np.array([v]), e, one)
        out[i] = one[0]
    assert out[0] == 0.0 and out[1] == np.inf and out[2] == 1.0  # 0**g, inf**g, 1**g (g > 0)
    assert np.isnan(out[3]) and np.isnan(out[4])
    assert out[5] == 0.0  # underflows


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 SIMD instructions")
def test_a_loop_over_the_helpers_vectorizes():
    """The point of the helpers: LLVM turns the loop into packed SIMD code, with no libm calls."""

    @njit(error_model="numpy")
    def loop(a, out):
        for i in range(a.size):
            v = a[np.uint64(i)]
            out[np.uint64(i)] = vm.exp_f32(v) + vm.log1p_unit_f32(v, v)

    a = np.linspace(0, 1, 64, dtype=np.float32)
    out = np.empty_like(a)
    loop(a, out)
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(r"vfn?m(add|sub)\d*ps\s", asm), "no packed single-precision FMA: the loop did not vectorize"
    assert "expf" not in asm and "log1pf" not in asm
