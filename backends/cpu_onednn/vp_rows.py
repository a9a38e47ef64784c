"""Row passes of the vocabulary-parallel forward (:mod:`.vocab_parallel`): the online statistics
of one logits tile and the softmax from all-reduced statistics. Each reads a row while it is
in cache; the max uses LLVM's ``maxnum`` (it vectorizes; a compare-and-select running max does
not) and the sum ``radd``, so both loops vectorize.

NaN and infinities give what the float64 formulas give (``reference/flce.py``): ``maxnum``
skips NaN, so a NaN logit shows up as a NaN sum, and only then is the row scanned for it (a
NaN row max, as ``max`` gives); an all ``-inf`` row keeps max ``-inf`` and sum 0 here, and the
caller turns that sum into NaN (``exp(-inf - -inf)``) once every tile is in.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .access import load
from .intrinsics import like, radd
from .vecmath import vexp


@intrinsic
def maxnum(typingctx, a, b):
    """``llvm.maxnum``: the larger of a and b, the other one where one is NaN (same float type)."""
    if not (isinstance(a, types.Float) and a == b):
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [t], ir.FunctionType(t, [t, t]))
        return builder.call(fn, args)

    return sig, codegen


@njit(error_model="numpy")
def _has_nan(row, cols):
    for j in range(cols):
        if row[np.uint64(j)] != row[np.uint64(j)]:
            return True
    return False


@njit(parallel=True, cache=True, error_model="numpy")
def tile_stats(z, r0, c0, tcol, m, s, zt):
    """Merge the logits tile ``z`` (rows, cols; float32 or float64) of rows ``r0..``, columns
    ``c0..`` into the running row statistics. ``tcol``: each row's target column in the shard,
    or -1. ``m``, ``s``: running max and sum of exp(logit - max), merged here; ``zt``: the
    target logit."""
    rows, cols = z.shape
    for r in prange(rows):
        i = r0 + r
        row = z[r]
        mx = like(-np.inf, m[i])
        for j in range(cols):
            mx = maxnum(mx, row[np.uint64(j)])
        t = tcol[i] - c0
        if 0 <= t < cols:
            zt[i] = row[t]
        mo = m[i]
        if mo != mo:  # a NaN seen in an earlier tile stays
            continue
        mn = maxnum(mo, mx)
        if mn == -np.inf:  # every logit so far -inf (or NaN): no sum yet
            if _has_nan(row, cols):
                m[i] = s[i] = like(np.nan, mn)
            continue
        acc = like(0.0, mn)
        for j in range(cols):
            acc = radd(acc, vexp(row[np.uint64(j)] - mn))
        if acc != acc and _has_nan(row, cols):
            m[i] = s[i] = acc
            continue
        s[i] = s[i] * np.exp(mo - mn) + acc  # mo = -inf: 0 (a NaN only from +inf - +inf)
        m[i] = mn


@njit(parallel=True, cache=True, error_model="numpy")
def softmax_rows(z, m, s, out):
    """out[r, j] = exp(z[r, j] - m[r]) / s[r] in out's (compute) type; z float32, float64 or
    bfloat16 bits (widened as read), or out itself (in place)."""
    rows, v = z.shape
    for r in prange(rows):
        zr, orow = z[r], out[r]
        mr, sr = m[r], s[r]
        for j in range(v):
            orow[np.uint64(j)] = vexp(load(zr, np.uint64(j)) - mr) / sr
