"""``exp(-|x|)``, ``sigmoid(|x|)`` and ``log1p(exp(-|x|))`` for the logit kernels, float32 compute
sized for float32 results; the float64 compute type keeps :mod:`.vecmath`'s general helpers.

The general :func:`.vecmath.exp_f32` serves any argument: both clamps, a NaN select, a degree-7
Taylor polynomial and a two-factor scaling by ``2**k`` (overflow and gradual underflow right), and
:func:`.vecmath.log1p_unit_f32` a degree-10 polynomial. Here the exp argument is never positive
and the log1p argument is that exp, so:

* ``a = min(|x|, 104)`` written so that NaN passes through (exp(-104) is below half the smallest
  subnormal: it rounds to 0, as every larger ``|x|`` must);
* ``n = round(a / ln2)`` by the 1.5 * 2**23 trick, read back from the sum's low bits (no
  conversion instruction); ``u = a - n ln2`` in two FMA steps (Cody-Waite: ``n * ln2_hi`` exact);
* ``exp(-u) = 1 + u P(u)``, P of degree 5 (fit error 0.29 x 2**-24 relative), its coefficients
  scaled by 2**-64 so that the product by ``2**(64 - n)`` (always a normal number) is the one
  rounding, gradual into the subnormals;
* ``log1p(e) = 2 atanh(t)``, ``t = e/(2 + e)`` in [0, 1/3]: ``2t + 2t z R(z)``, ``z = t*t``, R of
  degree 3 (fit error 0.09 x 2**-24), evaluated in ``v = 2t = 2e/(2 + e)`` so that a subnormal e
  is not halved (rounded) on the way: six multiplies or FMAs, two adds and a division where the
  polynomial in e takes eleven multiply-adds (the divider runs beside the FMA pipes, which bound
  this loop); 0.8 ulp less accurate than that polynomial (2.33 against 1.46 ulp end to end).

``benchmarks/cpu_fit_sigmoid_terms.py`` recomputes both fits; the end-to-end error of the BCE with
logits results built on them is measured against float64, next to torch's own float32 results, in
``tests/backends/cpu/test_bce_with_logits_ulp.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .intrinsics import f32_from_bits, float_bits, fma, inline_me
from .vecmath import exp_f64, log1p_unit_f64

_JIT = dict(error_model="numpy")

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)  # 9 significant bits: n * _LN2_HI exact for n <= 150
_LN2_LO = np.float32(-2.1219444005469057e-04)
_ROUND = np.float32(12582912.0)  # 1.5 * 2**23; low 9 bits of its pattern 0: bits(rn) << 23 is -n << 23 mod 2**32
_A_MAX = np.float32(104.0)
_SCALE_BIAS = np.int32((127 + 64) << 23)  # bits of 2**64: added to -n << 23 gives 2**(64 - n)
_POST = 2.0**-64
# exp(-u) = 1 + u*P(u), |u| <= ln2/2; P from benchmarks/cpu_fit_sigmoid_terms.py, times 2**-64 (exact)
_P = tuple(np.float32(c * _POST) for c in (
    -1.0, 0.4999999403953552, -0.1666642129421234, 0.04166772589087486, -0.008374770171940327,
    0.0013859285973012447))
_ONE_SCALED = np.float32(_POST)
# log1p(e) = 2 atanh(t) = 2t + 2t z R(z), z = t*t; R from benchmarks/cpu_fit_sigmoid_terms.py. Taken in
# v = 2t = 2e/(2 + e) (no halving of a subnormal e) and v*v = 4z: S(v*v) = R(v*v/4)/4, S_k = R_k / 4**(k+1)
_S = tuple(np.float32(c / 4.0 ** (k + 1)) for k, c in enumerate(
    (0.3333320617675781, 0.2001080960035324, 0.1400042325258255, 0.14007562398910522)))


@njit(**_JIT)
def exp_neg_abs_f32(x):
    """exp(-|x|) for float32 x: 1 at 0, 0 for |x| >= 104 and at infinities, subnormals rounded once,
    NaN for NaN."""
    inline_me()
    a = abs(x)
    a = _A_MAX if a > _A_MAX else a  # NaN: the comparison is false, NaN goes on
    rn = fma(a, -_LOG2E, _ROUND)  # 1.5 * 2**23 - n: rounded to an integer by the sum
    kf = rn - _ROUND  # -n, exact
    u = fma(kf, _LN2_HI, a)  # a - n ln2_hi, exact
    u = fma(kf, _LN2_LO, u)
    p = _P[5]
    p = fma(p, u, _P[4])
    p = fma(p, u, _P[3])
    p = fma(p, u, _P[2])
    p = fma(p, u, _P[1])
    p = fma(p, u, _P[0])
    p = fma(p, u, _ONE_SCALED)  # 2**-64 exp(-u)
    return p * f32_from_bits((float_bits(rn) << 23) + _SCALE_BIAS)


# the same polynomial in v = -u: Horner's partial results alternate in sign, so do the coefficients (exact)
_P_ALT = tuple(np.float32(c if k % 2 == 0 else -c) for k, c in enumerate(_P))


@njit(**_JIT)
def exp_nonpositive_f32(d):
    """exp(d) for float32 ``d <= 0``: the bits of :func:`exp_neg_abs_f32` at ``-d``, in terms of ``d`` itself
    (every step there negated exactly), which saves the ``abs``: one instruction of the ~18 per vector of
    the cross entropy's exp walk. NaN gives NaN (the input's sign kept, where exp(-|x|) clears it)."""
    inline_me()
    d = -_A_MAX if d < -_A_MAX else d  # NaN: the comparison is false, NaN goes on
    rn = fma(d, _LOG2E, _ROUND)  # the same sum as fma(-d, -_LOG2E, _ROUND)
    kf = rn - _ROUND
    v = fma(kf, -_LN2_HI, d)  # -u, exactly
    v = fma(kf, -_LN2_LO, v)
    p = _P_ALT[5]
    p = fma(p, v, _P_ALT[4])
    p = fma(p, v, _P_ALT[3])
    p = fma(p, v, _P_ALT[2])
    p = fma(p, v, _P_ALT[1])
    p = fma(p, v, _P_ALT[0])
    p = fma(-p, v, _ONE_SCALED)  # 2**-64 exp(-u): the partial result above is the original's
    return p * f32_from_bits((float_bits(rn) << 23) + _SCALE_BIAS)


@njit(**_JIT)
def sigmoid_terms_f32(x, c):
    """``(e, r, l)`` = (exp(-|x|), c/(1 + e) = c sigmoid(|x|), log1p(e)) for float32 x and c: a factor
    the caller applies to the sigmoid anyway rides on the division (one rounding, no multiply)."""
    inline_me()
    one = np.float32(1.0)
    e = exp_neg_abs_f32(x)
    r = c / (one + e)
    v = (e + e) / (np.float32(2.0) + e)  # 2t: 2e exact, so a subnormal e is not halved and rounded
    vv = v * v
    q = fma(fma(fma(_S[3], vv, _S[2]), vv, _S[1]), vv, _S[0])
    return e, r, fma(v, vv * q, v)


@njit(**_JIT)
def sigmoid_terms_f64(x, c):
    """The same for float64 x, from :mod:`.vecmath`'s general exp and log1p (which takes 1/(1 + e))."""
    inline_me()
    e = exp_f64(-abs(x))
    r = 1.0 / (1.0 + e)
    return e, c * r, log1p_unit_f64(e, r)


def vexp_nonpositive(x):
    """exp(x) for x <= 0 (or NaN) in x's float type: :func:`exp_nonpositive_f32` (exp(-|x|)'s bits),
    :func:`.vecmath.exp_f64` for float64 (compiled only)."""
    raise TypeError("vexp_nonpositive() dispatches on Numba types at compile time; call it from @njit code")


@overload(vexp_nonpositive)
def _vexp_nonpositive(x):
    fn = {types.float32: exp_nonpositive_f32, types.float64: exp_f64}.get(x)
    if fn is None:
        return None

    def impl(x):
        inline_me()
        return fn(x)

    return impl


def sigmoid_terms(x, c):
    """(exp(-|x|), c sigmoid(|x|), log1p(exp(-|x|))) in x's float type (compiled only)."""
    raise TypeError("sigmoid_terms() dispatches on Numba types at compile time; call it from @njit code")


@overload(sigmoid_terms)
def _sigmoid_terms(x, c):
    fn = {types.float32: sigmoid_terms_f32, types.float64: sigmoid_terms_f64}.get(x)
    if fn is None:
        return None

    def impl(x, c):
        inline_me()
        return fn(x, c)

    return impl
