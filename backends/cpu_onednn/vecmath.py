"""Vectorizable exp / log1p / log / pow for float32 and float64.

LLVM in Numba's wheels has no vector math library, so ``np.exp`` in a loop becomes one
scalar libm call per element. These helpers are plain arithmetic, comparisons and bit
casts, marked always-inline for LLVM (:func:`.intrinsics.inline_me`), so the loops that
call them vectorize.

Methods:

* ``exp``: ``x = k*ln2 + r`` with ``|r| <= ln2/2`` (``ln2`` split in a head with trailing
  zero bits, so ``k*head`` is exact; the reduction uses FMA), ``exp(r)`` by its Taylor
  polynomial (degree 7 for float32, 13 for float64: truncation far below half an ulp),
  then ``2**k`` applied as two factors ``2**(k//2) * 2**(k - k//2)``: each is a normal
  number, so overflow gives inf and results below the normal range round once, gradually,
  to subnormals or zero.
* ``log1p`` on [0, 1] (the softplus term ``log1p(exp(-|x|))``). float32: ``t * P(t)`` with
  a degree-10 least-squares polynomial (no division, no range reduction; fit error 0.14
  ulp, ``benchmarks/cpu_fit_log1p.py`` recomputes it). float64: ``u = 1 + t`` and its
  rounding error ``c = t - (u - 1)`` (exact), ``u = 2**k * m`` with ``m`` in
  [sqrt(1/2), sqrt(2)), ``log(m) = 2 atanh(f / (2 + f))`` with ``f = m - 1`` (series to
  ``s**21``), then ``+ c/u`` (callers pass ``1/u``, which they have for the sigmoid).
* ``pow(q, g)`` for q >= 0: ``exp(g * log(q))``. float64: carried in double-double (log as
  head + tail, the product by g through an exact FMA split), so the error of the large
  ``|g log q|`` does not turn into a relative error of the power. float32: in plain float64
  with shorter series, then rounded once (error far below half a float32 ulp).

The accuracy over the whole input range is asserted in ``tests/backends/cpu/test_vecmath.py``
and reported in this folder's README. NaN inputs give NaN.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .intrinsics import f32_from_bits, f64_from_bits, float_bits, fma, inline_me

_JIT = dict(error_model="numpy")

# --- float32 ---------------------------------------------------------------------------
_F_LOG2E = np.float32(1.4426950408889634)
_F_LN2_HI = np.float32(0.693359375)  # 9 significant bits: k * _F_LN2_HI is exact for |k| < 2**15
_F_LN2_LO = np.float32(-2.1219444005469057e-04)
_F_ROUND = np.float32(12582912.0)  # 1.5 * 2**23: adding and subtracting rounds to an integer
_F_EXP_LO = np.float32(-104.0)  # exp(-104) < half the smallest subnormal: rounds to 0
_F_EXP_HI = np.float32(89.0)  # exp(89) > FLT_MAX: overflows to inf
_FE = tuple(np.float32(1.0 / np.prod(np.arange(1, n + 1, dtype=np.float64))) for n in range(8))  # 1/n!
# log1p(t)/t on [0, 1]: least-squares fit at 400 Chebyshev nodes (mpmath, 50 digits), degree
# 10, rounded to float32 (benchmarks/cpu_fit_log1p.py recomputes it); fit error < 0.15 ulp.
_FP = tuple(np.float32(c) for c in (
    1.0, -0.4999998211860657, 0.33332568407058716, -0.24987392127513885, 0.19891537725925446,
    -0.1610863208770752, 0.12425103038549423, -0.08253533393144608, 0.04155762121081352,
    -0.013444830663502216, 0.0020376904867589474))


@njit(**_JIT)
def _scale2_f32(v, k):
    """v * 2**k for |k| <= 254, in two exact-or-once-rounded steps."""
    inline_me()
    k1 = k >> 1
    k2 = k - k1
    return v * f32_from_bits((k1 + 127) << 23) * f32_from_bits((k2 + 127) << 23)


@njit(**_JIT)
def exp_f32(x):
    """exp(x) for float32 x (any value; overflow -> inf, underflow -> subnormal/0, NaN -> NaN)."""
    inline_me()
    xc = x if x > _F_EXP_LO else _F_EXP_LO  # clamps as selects (NaN is restored at the end)
    xc = xc if xc < _F_EXP_HI else _F_EXP_HI
    kf = (xc * _F_LOG2E + _F_ROUND) - _F_ROUND
    r = fma(-kf, _F_LN2_HI, xc)
    r = fma(-kf, _F_LN2_LO, r)
    p = _FE[7]
    p = fma(p, r, _FE[6])
    p = fma(p, r, _FE[5])
    p = fma(p, r, _FE[4])
    p = fma(p, r, _FE[3])
    p = fma(p, r, _FE[2])
    p = fma(p, r, _FE[1])
    p = fma(p, r, _FE[0])
    v = _scale2_f32(p, np.int32(kf))
    return v if x == x else x


@njit(**_JIT)
def log1p_unit_f32(t, rcp):
    """log1p(t) for float32 t in [0, 1] as ``t * P(t)``: no division, no range reduction
    (``rcp`` is unused; it keeps the signature of the float64 form)."""
    inline_me()
    p = _FP[10]
    p = fma(p, t, _FP[9])
    p = fma(p, t, _FP[8])
    p = fma(p, t, _FP[7])
    p = fma(p, t, _FP[6])
    p = fma(p, t, _FP[5])
    p = fma(p, t, _FP[4])
    p = fma(p, t, _FP[3])
    p = fma(p, t, _FP[2])
    p = fma(p, t, _FP[1])
    return fma(t, t * p, t)  # t + t*(t*(P(t) - 1)/t): the leading 1 added exactly last


# --- float64 ---------------------------------------------------------------------------
_D_LOG2E = 1.4426950408889634
_D_LN2_HI = 0.6931467056274414  # low 32 mantissa bits zero: k * _D_LN2_HI exact for |k| < 2**21
_D_LN2_LO = 4.7493250390316726e-07
_D_ROUND = 6755399441055744.0  # 1.5 * 2**52
_D_EXP_LO = -746.0  # exp(-746) rounds to 0
_D_EXP_HI = 710.0  # exp(710) overflows
_D_SQRT2 = 1.4142135623730951
_D_TINY = 2.2250738585072014e-308  # smallest normal
_D_2P54 = 18014398509481984.0
_DE = tuple(1.0 / float(np.prod(np.arange(1, n + 1, dtype=np.float64))) for n in range(14))  # 1/n!, n <= 13
_DL = tuple(2.0 / (2 * n + 1) for n in range(1, 11))  # 2/3 ... 2/21


@njit(**_JIT)
def _scale2_f64(v, k):
    inline_me()
    k1 = k >> 1
    k2 = k - k1
    return v * f64_from_bits((k1 + 1023) << 52) * f64_from_bits((k2 + 1023) << 52)


@njit(**_JIT)
def _expm_poly_f64(r):
    inline_me()
    p = _DE[13]
    p = fma(p, r, _DE[12])
    p = fma(p, r, _DE[11])
    p = fma(p, r, _DE[10])
    p = fma(p, r, _DE[9])
    p = fma(p, r, _DE[8])
    p = fma(p, r, _DE[7])
    p = fma(p, r, _DE[6])
    p = fma(p, r, _DE[5])
    p = fma(p, r, _DE[4])
    p = fma(p, r, _DE[3])
    p = fma(p, r, _DE[2])
    p = fma(p, r, _DE[1])
    return fma(p, r, _DE[0])


@njit(**_JIT)
def exp2sum_f64(xh, xl):
    """exp(xh + xl) for a double-double argument (|xl| tiny next to |xh|); NaN in xh -> NaN."""
    inline_me()
    xc = xh if xh > _D_EXP_LO else _D_EXP_LO
    xc = xc if xc < _D_EXP_HI else _D_EXP_HI
    kf = (xc * _D_LOG2E + _D_ROUND) - _D_ROUND
    r = fma(-kf, _D_LN2_HI, xc)
    r = fma(-kf, _D_LN2_LO, r) + xl
    v = _scale2_f64(_expm_poly_f64(r), np.int64(kf))
    return v if xh == xh else xh


@njit(**_JIT)
def exp_f64(x):
    """exp(x) for float64 x (any value)."""
    inline_me()
    return exp2sum_f64(x, 0.0)


@njit(**_JIT)
def _log_unit_parts_f64(f):
    """(f - hfsq, s*(hfsq + R)) for log(1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1]."""
    inline_me()
    s = f / (2.0 + f)
    z = s * s
    rr = _DL[9]
    rr = fma(rr, z, _DL[8])
    rr = fma(rr, z, _DL[7])
    rr = fma(rr, z, _DL[6])
    rr = fma(rr, z, _DL[5])
    rr = fma(rr, z, _DL[4])
    rr = fma(rr, z, _DL[3])
    rr = fma(rr, z, _DL[2])
    rr = fma(rr, z, _DL[1])
    rr = fma(rr, z, _DL[0]) * z
    hfsq = 0.5 * f * f
    return hfsq, s * (hfsq + rr)


@njit(**_JIT)
def log1p_unit_f64(t, rcp):
    """log1p(t) for float64 t in [0, 1], given ``rcp = 1/(1 + t)``."""
    inline_me()
    u = 1.0 + t
    c = t - (u - 1.0)
    big = u > _D_SQRT2
    m = u * 0.5 if big else u
    k = 1.0 if big else 0.0
    f = m - 1.0
    hfsq, sr = _log_unit_parts_f64(f)
    return k * _D_LN2_HI - ((hfsq - (sr + (k * _D_LN2_LO + c * rcp))) - f)


@njit(**_JIT)
def log2sum_f64(q):
    """log(q) as a double-double (head, tail) for finite q > 0 (subnormals included)."""
    inline_me()
    sub = q < _D_TINY
    qs = q * _D_2P54 if sub else q
    bits = float_bits(qs)
    e = (bits >> 52) - 1023
    m = f64_from_bits((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)  # [1, 2)
    big = m > _D_SQRT2
    m = m * 0.5 if big else m
    e = e + (1 if big else 0) - (54 if sub else 0)
    k = np.float64(e)
    f = m - 1.0  # exact
    hfsq, sr = _log_unit_parts_f64(f)
    lm = f - (hfsq - sr)  # log(m), |lm| < 0.35
    kh = k * _D_LN2_HI  # exact
    hi = kh + lm
    bb = hi - kh
    err = (kh - (hi - bb)) + (lm - bb)  # two-sum: kh + lm == hi + err exactly
    return hi, err + k * _D_LN2_LO


@njit(**_JIT)
def log_f64(q):
    """log(q) for float64 q >= 0 (0 -> -inf, NaN -> NaN; negative q is not supported)."""
    inline_me()
    hi, lo = log2sum_f64(q)
    v = hi + lo
    v = v if q > 0.0 else -np.inf
    return v if q == q else q


@njit(**_JIT)
def pow_f64(q, g):
    """q**g for float64 q >= 0 and g > 0 (no test on g, as in :func:`pow_f32`); NaN or q < 0 -> NaN."""
    inline_me()
    hi, lo = log2sum_f64(q)
    yh = g * hi
    yl = fma(g, hi, -yh) + g * lo
    v = exp2sum_f64(yh, yl)
    v = v if q > 0.0 else 0.0
    v = v if q != np.inf else np.inf
    return v if q >= 0.0 else np.nan


@njit(**_JIT)
def log_short_f64(q):
    """log(q) for a positive normal float64 q (no test for 0, inf, NaN or q < 0: the caller's),
    relative error below 2**-37: for results rounded to float32. ``k ln2 + 2 atanh(s)`` with the
    series to ``s**13`` (:func:`log2sum_f64`'s reduction, a third of its series, no double-double)."""
    inline_me()
    bits = float_bits(q)
    e = (bits >> 52) - 1023
    m = f64_from_bits((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)  # [1, 2)
    big = m > _D_SQRT2
    m = m * 0.5 if big else m
    k = np.float64(e + (1 if big else 0))
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    t = fma(fma(fma(fma(fma(_DL[5], z, _DL[4]), z, _DL[3]), z, _DL[2]), z, _DL[1]), z, _DL[0]) * z  # to 2/13 z^6
    return fma(k, _D_LN2_HI, fma(k, _D_LN2_LO, fma(s, t, s + s)))


@njit(**_JIT)
def pow_f32(q, g):
    """q**g for float32 q >= 0 and g > 0 (float64 g), rounded once to float32.

    float64 arithmetic with short series (log to s**13, exp to degree 10): the relative
    error before the final rounding stays below 2**-37 for every float32 q, far under half a
    float32 ulp, at a fraction of :func:`pow_f64`'s cost. No test on g inside (a select on a
    loop-invariant value makes LLVM unswitch the loop and give up vectorizing it): g = 0 is
    the caller's business (the focal kernels send it to the integer form).
    """
    inline_me()
    y = g * log_short_f64(np.float64(q))  # every float32, subnormals included, is a normal float64
    yc = y if y > _D_EXP_LO else _D_EXP_LO
    yc = yc if yc < _D_EXP_HI else _D_EXP_HI  # q = inf: inf
    kf = (yc * _D_LOG2E + _D_ROUND) - _D_ROUND
    r = fma(-kf, _D_LN2_LO, fma(-kf, _D_LN2_HI, yc))
    p = _DE[10]
    p = fma(p, r, _DE[9])
    p = fma(p, r, _DE[8])
    p = fma(p, r, _DE[7])
    p = fma(p, r, _DE[6])
    p = fma(p, r, _DE[5])
    p = fma(p, r, _DE[4])
    p = fma(p, r, _DE[3])
    p = fma(p, r, _DE[2])
    p = fma(p, r, _DE[1])
    p = fma(p, r, _DE[0])
    v = _scale2_f64(p, np.int64(kf))
    v = v if q > 0 else 0.0
    v = v if q >= 0 else np.nan  # NaN and negative q
    return np.float32(v)


# --- type-generic entry points (resolved at compile time) --------------------------------
def _compiled_only(name):
    raise TypeError(f"{name}() dispatches on Numba types at compile time; call it from @njit code "
                    f"(or call the typed helper, e.g. exp_f32, directly)")


def vexp(x):
    """exp for float32 or float64 (compiled only)."""
    _compiled_only("vexp")


def vlog1p_unit(t, rcp):
    """log1p on [0, 1] for float32 or float64, given rcp = 1/(1 + t) (compiled only)."""
    _compiled_only("vlog1p_unit")


def vpow(q, g):
    """q**g (q >= 0, float64 g) in q's type: :func:`pow_f32` or :func:`pow_f64` (compiled only)."""
    _compiled_only("vpow")


@overload(vpow)
def _vpow(q, g):
    fn = {types.float32: pow_f32, types.float64: pow_f64}.get(q)
    if fn is None:
        return None

    def impl(q, g):
        inline_me()  # the wrapper too: with the helper inlined it is too big for LLVM's own threshold
        return fn(q, g)

    return impl


@overload(vexp)
def _vexp(x):
    fn = {types.float32: exp_f32, types.float64: exp_f64}.get(x)
    if fn is None:
        return None

    def impl(x):
        inline_me()
        return fn(x)

    return impl


@overload(vlog1p_unit)
def _vlog1p_unit(t, rcp):
    fn = {types.float32: log1p_unit_f32, types.float64: log1p_unit_f64}.get(t)
    if fn is None:
        return None

    def impl(t, rcp):
        inline_me()
        return fn(t, rcp)

    return impl
