"""bfloat16 and float16 as 16-bit integers: widening to float32, rounding back (nearest-even).

NumPy has no bfloat16 and Numba's CPU float16 support is thin, so half-precision arrays
reach the kernels as integer views: bfloat16 as ``uint16``, float16 as ``int16`` (distinct
integer types, so each gets its own compiled specialization). The conversions are integer
and float arithmetic with selects, no branches, so they vectorize; they are exact in the
widening direction and round to nearest, ties to even, in the narrowing one (overflow to
inf, gradual underflow to subnormals, NaN stays NaN). Exhaustively tested against
``ml_dtypes``/NumPy casts in ``tests/backends/cpu/test_halfbits.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .intrinsics import f32_from_bits, float_bits, inline_me

_JIT = dict(error_model="numpy")
_F16_SUB_SCALE = np.float32(2.0**-24)
_HALF = np.float32(0.5)
_HALF_BITS = 0x3F000000


@njit(**_JIT)
def bf16_to_f32(h):
    inline_me()
    return f32_from_bits(np.int64(h) << 16)


@njit(**_JIT)
def f32_to_bf16(v):
    inline_me()
    b = np.int64(float_bits(v)) & 0xFFFFFFFF
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return np.uint16((b >> 16) | 0x40 if nan else r)


@njit(**_JIT)
def f16_to_f32(h):
    inline_me()
    hb = np.int64(h) & 0xFFFF
    sign = (hb & 0x8000) << 16
    em = hb & 0x7FFF
    normal = f32_from_bits(((em << 13) + (112 << 23)) | sign)
    special = f32_from_bits((em << 13) | 0x7F800000 | sign)  # inf / NaN
    sub = f32_from_bits(float_bits(np.float32(em) * _F16_SUB_SCALE) | sign)  # em < 0x400: exact
    v = special if em >= 0x7C00 else normal
    return sub if em < 0x400 else v


@njit(**_JIT)
def f32_to_f16(v):
    inline_me()
    b = np.int64(float_bits(v)) & 0xFFFFFFFF
    sign = (b >> 16) & 0x8000
    a = b & 0x7FFFFFFF
    # normal range: add the rounding bias (0xFFF + the kept lsb) and drop 13 mantissa bits
    normal = (a - (112 << 23) + 0xFFF + ((a >> 13) & 1)) >> 13
    # below 2**-14: adding 0.5 leaves an ulp of 2**-24, so the FP add rounds to nearest-even
    sub = np.int64(float_bits(f32_from_bits(a) + _HALF)) - _HALF_BITS
    r = sub if a < 0x38800000 else normal
    r = 0x7C00 if a >= 0x477FF000 else r  # rounds past 65504: inf
    r = 0x7E00 if a > 0x7F800000 else r  # NaN
    return np.int16(r | sign)
