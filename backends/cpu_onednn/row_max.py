"""The largest non-NaN element of a run of a float32, float64 or bfloat16 (``uint16``) array, as one
plain vector ``max`` per vector of elements.

LLVM's ``maxnum`` (what :func:`.vp_rows.maxnum` emits) must return the non-NaN operand whichever one
is NaN; a vectorized reduction of it costs a NaN test and a blend beside every ``max``, and the loop
vectorizer does not vectorize the plain ``x > m ? x : m`` reduction without fast-math flags. Written here
as an explicit vector loop, that select is one ``max`` instruction: ``m`` starts at ``-inf`` and only ever
takes a non-NaN ``x``, so NaN elements are skipped as ``maxnum`` skips them (the result differs from it
at most in the sign of a zero maximum). A row of NaN or ``-inf`` only gives ``-inf``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from .access import load
from .intrinsics import inline_me, like
from .vp_rows import maxnum

#: elements per vector: one 64-byte vector of float32 (two 32-byte ones without AVX-512)
LANES = 16
#: independent running maxima (a ``max`` has a latency of a few cycles: one chain would wait on it)
CHAINS = 4


@intrinsic
def _vector_max(typingctx, arr, start, groups):
    """max over ``arr[start : start + LANES * CHAINS * groups]`` (float32 compute for bf16 storage),
    ``-inf`` for no groups; ``arr`` 1-d C-contiguous float32, float64 or uint16 (bfloat16 bits)."""
    if not isinstance(arr, types.Array) or arr.dtype not in (types.float32, types.float64, types.uint16):
        return None
    out = types.float64 if arr.dtype == types.float64 else types.float32

    def codegen(context, builder, signature, args):
        aty = signature.args[0]
        a = context.make_array(aty)(context, builder, value=args[0])
        start = context.cast(builder, args[1], signature.args[1], types.uint64)
        groups = context.cast(builder, args[2], signature.args[2], types.uint64)
        i64, i32 = ir.IntType(64), ir.IntType(32)
        ft = ir.DoubleType() if out == types.float64 else ir.FloatType()
        vt = ir.VectorType(ft, LANES)
        elt = context.get_data_type(aty.dtype)
        minus_inf = ir.Constant(vt, [ir.Constant(ft, float("-inf"))] * LANES)
        pre = builder.block
        loop = builder.append_basic_block("vmax.loop")
        done = builder.append_basic_block("vmax.done")
        builder.cbranch(builder.icmp_unsigned("!=", groups, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        accs = [builder.phi(vt) for _ in range(CHAINS)]
        first = builder.add(start, builder.mul(k, ir.Constant(i64, LANES * CHAINS)))
        news = []
        for c, acc in enumerate(accs):
            p = builder.gep(a.data, [builder.add(first, ir.Constant(i64, c * LANES))])
            v = builder.load(builder.bitcast(p, ir.VectorType(elt, LANES).as_pointer()),
                             align=context.get_abi_sizeof(elt))
            if aty.dtype == types.uint16:  # bfloat16 bits: the float32 with those high 16 bits
                iv = ir.VectorType(i32, LANES)
                v = builder.bitcast(builder.shl(builder.zext(v, iv), ir.Constant(iv, [ir.Constant(i32, 16)] * LANES)),
                                    vt)
            news.append(builder.select(builder.fcmp_ordered(">", v, acc), v, acc))
        nk = builder.add(k, ir.Constant(i64, 1))
        k.add_incoming(ir.Constant(i64, 0), pre)
        k.add_incoming(nk, loop)
        for acc, nacc in zip(accs, news):
            acc.add_incoming(minus_inf, pre)
            acc.add_incoming(nacc, loop)
        builder.cbranch(builder.icmp_unsigned("<", nk, groups), loop, done)
        builder.position_at_end(done)
        res = []
        for nacc in news:
            r = builder.phi(vt)
            r.add_incoming(minus_inf, pre)
            r.add_incoming(nacc, loop)
            res.append(r)
        v = res[0]
        for r in res[1:]:
            v = builder.select(builder.fcmp_ordered(">", r, v), r, v)
        m = builder.extract_element(v, ir.Constant(i32, 0))
        for lane in range(1, LANES):
            e = builder.extract_element(v, ir.Constant(i32, lane))
            m = builder.select(builder.fcmp_ordered(">", e, m), e, m)
        return m

    return out(arr, start, groups), codegen


def row_max(x, base, n, ref):
    """max over the non-NaN ``x[base : base + n]`` in the compute type (``ref``'s), ``-inf`` if none; float16
    storage takes a ``maxnum`` loop (compiled only)."""
    raise TypeError("row_max() is compiled by Numba only; call it from @njit code")


@njit(error_model="numpy")
def _vector_row_max(x, base, n, ref):
    inline_me()
    groups = np.uint64(n) // np.uint64(LANES * CHAINS)
    m = _vector_max(x, np.uint64(base), groups)
    for j in range(groups * np.uint64(LANES * CHAINS), np.uint64(n)):
        v = load(x, np.uint64(base) + j)
        m = v if v > m else m
    return m


@njit(error_model="numpy")
def _maxnum_row_max(x, base, n, ref):
    inline_me()
    m = like(-np.inf, ref)
    for j in range(np.uint64(n)):
        m = maxnum(m, load(x, np.uint64(base) + j))
    return m


@overload(row_max)
def _row_max(x, base, n, ref):
    if not isinstance(x, types.Array):
        return None
    if x.dtype in (types.float32, types.float64, types.uint16):
        return lambda x, base, n, ref: _vector_row_max(x, base, n, ref)
    return lambda x, base, n, ref: _maxnum_row_max(x, base, n, ref)
