"""Row passes over a chunk of bfloat16 or float32 logits for ``xloss.torch``'s FLCE with the cpu
backend (:mod:`.flce_engine`): one pass for the statistics, one that turns the logits into G in place
(rounded once to the storage type) or, from float32 logits, rounded once into 16-bit storage
(:func:`gradient_narrow`). Each reads a row (bf16 widened exactly to
float32) while it is in cache, so a pass costs one sweep over the chunk instead of the five to
seven float32 sweeps of the same arithmetic in PyTorch ops.

Arrays: ``z`` (rows, V) uint16 (the bf16 bits) or float32; per-row float32 ``m``, ``s``, ``g``...; ``tcol``
int64, the target's column in this shard or -1; ``cw`` float32 class weights of this shard's
columns (length V) or length 0 for none.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, store
from .intrinsics import radd
from .vecmath import vexp


@njit(parallel=True, cache=True, error_model="numpy")
def row_stats(z, m, tcol, cw, want_smooth, s_out, zt_out, smooth_out):
    """Per row, given its max ``m`` (PyTorch's ``amax``: a vectorised max; a running max here would
    not vectorise): sum of exp(z - m), target logit (0 if none here), and the smoothing sum (sum of
    z, or of cw * z) when ``want_smooth``. The sums use ``radd`` so that they vectorise."""
    rows, v = z.shape
    weighted = cw.size > 0
    for r in prange(rows):
        row = z[r]
        mr = m[r]
        s = np.float32(0.0)
        for j in range(v):
            s = radd(s, vexp(load(row, np.uint64(j)) - mr))
        sm = np.float32(0.0)
        if want_smooth:
            if weighted:
                for j in range(v):
                    sm = radd(sm, cw[np.uint64(j)] * load(row, np.uint64(j)))
            else:
                for j in range(v):
                    sm = radd(sm, load(row, np.uint64(j)))
        t = tcol[r]
        s_out[r], smooth_out[r] = s, sm
        zt_out[r] = load(row, t) if t >= 0 else np.float32(0.0)


@njit(parallel=True, cache=True, error_model="numpy")
def gradient_in_place(z, m, inv_s, ga, g_share, hit_scale, tcol, cw):
    """z[r, j] <- round_bf16(ga[r] * exp(z - m[r]) * inv_s[r] - g_share[r] * cw[j] - hit_scale[r] [j == t])
    (cw[j] = 1 when cw is empty): G of :mod:`xloss.torch.flce_chunks` with the upstream folded in."""
    rows, v = z.shape
    weighted = cw.size > 0
    for r in prange(rows):
        row = z[r]
        mr, k, sh = m[r], ga[r] * inv_s[r], g_share[r]
        t = tcol[r]
        lt = load(row, max(t, 0))
        if weighted:
            for j in range(v):
                store(row, np.uint64(j), vexp(load(row, np.uint64(j)) - mr) * k - sh * cw[np.uint64(j)])
        else:
            for j in range(v):
                store(row, np.uint64(j), vexp(load(row, np.uint64(j)) - mr) * k - sh)
        if t >= 0:
            wt = cw[t] if weighted else np.float32(1.0)
            store(row, t, vexp(lt - mr) * k - sh * wt - hit_scale[r])


_NARROW_BLOCK = 512  # columns per block: read into a float32 scratch, then written out narrowed


@njit(parallel=True, cache=True, error_model="numpy")
def gradient_narrow(z, out, m, inv_s, ga, g_share, hit_scale, tcol, cw):
    """:func:`gradient_in_place`'s G of the float32 logits ``z``, rounded once into ``out`` (uint16 bf16
    bits or int16 float16 bits, (rows, >= V)). ``out``'s row r may be the first half of z's row r, the
    same memory (16-bit logits never exist: G takes the storage of the float32 logits it replaces):
    each block of a row is read whole before it is written, and its 16-bit values land on columns of
    that row already read."""
    rows, v = z.shape
    weighted = cw.size > 0
    for r in prange(rows):
        row = z[r]
        dst = out[r]
        tmp = np.empty(_NARROW_BLOCK, np.float32)
        mr, k, sh = m[r], ga[r] * inv_s[r], g_share[r]
        t = tcol[r]
        for j0 in range(0, v, _NARROW_BLOCK):
            n = min(_NARROW_BLOCK, v - j0)
            if weighted:
                for j in range(n):
                    tmp[j] = vexp(row[np.uint64(j0 + j)] - mr) * k - sh * cw[np.uint64(j0 + j)]
            else:
                for j in range(n):
                    tmp[j] = vexp(row[np.uint64(j0 + j)] - mr) * k - sh
            # the target's column within its block: Numba marks z and out noalias, so a z value read
            # before an earlier block's stores could be reloaded after them by the compiler
            if j0 <= t < j0 + n:
                wt = cw[t] if weighted else np.float32(1.0)
                tmp[t - j0] = vexp(row[t] - mr) * k - sh * wt - hit_scale[r]
            for j in range(n):
                store(dst, np.uint64(j0 + j), tmp[j])
