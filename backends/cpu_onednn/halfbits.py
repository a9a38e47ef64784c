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
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .intrinsics import f32_from_bits, float_bits, inline_me

_JIT = dict(error_model="numpy")
_F16_SUB_SCALE = np.float32(2.0**-24)
_HALF = np.float32(0.5)
_HALF_BITS = 0x3F000000


# The bfloat16 conversions are written in LLVM IR on 32-bit integers: Numba types integer arithmetic
# as int64, and loops over the int64 form vectorize at half the width (the bf16 cross-entropy
# backward ran at half the float32 one's speed).


@intrinsic
def bf16_to_f32(typingctx, h):
    """The float32 of bfloat16 bits ``h`` (uint16): exact."""
    if h != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        return builder.bitcast(builder.shl(builder.zext(args[0], i32), i32(16)), ir.FloatType())

    return types.float32(h), codegen


@intrinsic
def f32_to_bf16(typingctx, v):
    """float32 ``v`` rounded to bfloat16 bits (uint16), nearest-even; NaN stays NaN (quietened, sign kept)."""
    if v != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        b = builder.bitcast(args[0], i32)
        high = builder.lshr(b, i32(16))
        # wraps past 2**32 only for NaN bit patterns, which the select replaces
        r = builder.lshr(builder.add(builder.add(b, i32(0x7FFF)), builder.and_(high, i32(1))), i32(16))
        nan = builder.fcmp_unordered("uno", args[0], args[0])
        return builder.trunc(builder.select(nan, builder.or_(high, i32(0x40)), r), ir.IntType(16))

    return types.uint16(v), codegen


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
