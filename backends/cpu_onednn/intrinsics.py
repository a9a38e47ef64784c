"""LLVM-level helpers that Numba does not expose, all inlined so loops around them vectorize.

* bit casts between floats and same-width integers (the exp/log helpers build and take
  apart IEEE numbers; bf16/fp16 arrive as 16-bit integers);
* ``like(value, ref)``: ``value`` converted to ``ref``'s type, so one generic formula
  serves float32 and float64 without Numba promoting float32 arithmetic to float64 (a
  Python float literal types as float64);
* ``fma``: the fused multiply-add instruction (exact products for compensated arithmetic);
* ``radd``: an addition LLVM may reassociate, and only that one: it lets the vectorizer
  split a sum into lanes while every other operation keeps strict IEEE semantics.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_INT_OF = {types.float32: types.int32, types.float64: types.int64}
_FLOAT_OF = {32: types.float32, 64: types.float64}


@intrinsic
def float_bits(typingctx, value):
    """The IEEE bit pattern of a float32/float64 as int32/int64."""
    if value not in _INT_OF:
        return None
    sig = _INT_OF[value](value)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(value.bitwidth))

    return sig, codegen


def _from_bits(width):
    @intrinsic
    def from_bits(typingctx, value):
        if not isinstance(value, types.Integer):
            return None
        sig = _FLOAT_OF[width](value)

        def codegen(context, builder, signature, args):
            v = args[0]
            if value.bitwidth > width:
                v = builder.trunc(v, ir.IntType(width))
            elif value.bitwidth < width:
                v = builder.zext(v, ir.IntType(width))
            return builder.bitcast(v, ir.FloatType() if width == 32 else ir.DoubleType())

        return sig, codegen

    return from_bits


#: float32 whose bits are the low 32 bits of an integer (wider integers are truncated).
f32_from_bits = _from_bits(32)
#: float64 whose bits are the low 64 bits of an integer.
f64_from_bits = _from_bits(64)


@intrinsic
def like(typingctx, value, ref):
    """``value`` converted to the (float) type of ``ref``; constants fold at compile time."""
    if not isinstance(ref, types.Float) or not isinstance(value, (types.Float, types.Integer)):
        return None
    sig = ref(value, ref)

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], signature.return_type)

    return sig, codegen


@intrinsic
def fma(typingctx, a, b, c):
    """``a*b + c`` with one rounding (the hardware instruction; same float type required)."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None
    sig = a(a, b, c)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@intrinsic
def radd(typingctx, a, b):
    """``a + b`` marked reassociable, so a running sum of it vectorizes (same float type)."""
    if not (isinstance(a, types.Float) and a == b):
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return sig, codegen


@intrinsic
def inline_me(typingctx):
    """Mark the function being compiled ``alwaysinline`` for LLVM (emits no code).

    Call it first thing in a small helper: LLVM then inlines the helper into every loop
    that calls it, which the vectorizer needs, without Numba re-typing the helper at each
    call site (what ``inline="always"`` would do, at a large cost in compile time).
    """
    sig = types.none()

    def codegen(context, builder, signature, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()

    return sig, codegen
