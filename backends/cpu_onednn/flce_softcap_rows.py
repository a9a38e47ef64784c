"""Row passes of the soft-capped FLCE (``softcap``: Gemma-2's final-logit cap ``cap * tanh(z / cap)``)
over a chunk's float32 logits, for :mod:`.flce_engine`: one pass caps the logits in place, one turns the
capped logits into G times the cap's derivative ``1 - (capped / cap)**2``.

They replace eleven PyTorch elementwise ops per vocabulary block (``div_``/``tanh_``/``mul_`` for the cap,
then copy, ``sub_``/``exp_``/``mul_``/``mul_``, the derivative's ``div``/``square_``/``neg_``/``add_``, the
product and the narrowing copy): each was a full sweep over the chunk's float32 logits and a parallel
region of its own, where these are one sweep each. ``tanh`` is computed in float64 from the exact
float32 logit and rounded once (PyTorch's float32 chain rounded three times); plain arithmetic and
:func:`.vecmath.exp_f64`, so the loops vectorise.

Arrays as in :mod:`.flce_rows`: ``z`` (rows, V) float32; ``out`` float32 (``z`` itself) or 16-bit storage
(uint16 bf16 bits / int16 float16 bits), possibly the first half of ``z``'s rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import store
from .intrinsics import inline_me
from .vecmath import exp_f32, exp_f64

_SMALL = 1e-4  # below, tanh(y) = y - y**3/3 to float64 precision (the next term is 2 y**5 / 15)


@njit(error_model="numpy", cache=True)
def capped(z, cap):
    """``cap * tanh(z / cap)`` for a float32 ``z``: float64 arithmetic, one rounding to float32
    (inf -> +-cap, NaN -> NaN)."""
    inline_me()
    y = np.float64(z) / cap
    a = abs(y)
    big = 1.0 - 2.0 / (exp_f64(2.0 * a) + 1.0)  # tanh(|y|), accurate where |y| is not small
    big = big if y >= 0.0 else -big  # (NaN stays NaN)
    t = y * (1.0 - y * y / 3.0) if a < _SMALL else big  # (odd in y: -0 stays -0)
    return np.float32(cap * t)


@njit(parallel=True, cache=True, error_model="numpy")
def softcap_in_place(z, cap):
    """z[r, j] <- cap * tanh(z[r, j] / cap)."""
    rows, v = z.shape
    for r in prange(rows):
        row = z[r]
        for j in range(v):
            row[np.uint64(j)] = capped(row[np.uint64(j)], cap)


_BLOCK = 512  # columns per block: read into a float32 scratch, then written out


@njit(parallel=True, cache=True, error_model="numpy")
def gradient_capped(z, out, m, inv_s, ga, g_share, hit_scale, tcol, cw, cap):
    """G of :func:`.flce_rows.gradient_narrow` from the capped logits ``z``, times the cap's derivative
    ``1 - (z / cap)**2``, rounded once into ``out`` (``z`` itself, or 16-bit storage over the first half of
    its rows: each block of a row is read whole before it is written)."""
    rows, v = z.shape
    weighted = cw.size > 0
    capf = np.float32(cap)
    one = np.float32(1.0)
    for r in prange(rows):
        row = z[r]
        dst = out[r]
        tmp = np.empty(_BLOCK, np.float32)
        mr, k, sh = m[r], ga[r] * inv_s[r], g_share[r]
        t = tcol[r]
        for j0 in range(0, v, _BLOCK):
            n = min(_BLOCK, v - j0)
            if weighted:
                for j in range(n):
                    zc = row[np.uint64(j0 + j)]
                    q = zc / capf
                    tmp[j] = (exp_f32(zc - mr) * k - sh * cw[np.uint64(j0 + j)]) * (one - q * q)
            else:
                for j in range(n):
                    zc = row[np.uint64(j0 + j)]
                    q = zc / capf
                    tmp[j] = (exp_f32(zc - mr) * k - sh) * (one - q * q)
            if j0 <= t < j0 + n:  # within its block, as flce_rows.gradient_narrow (z and out are noalias)
                wt = cw[t] if weighted else one
                zt = row[t]
                q = zt / capf
                tmp[t - j0] = (exp_f32(zt - mr) * k - sh * wt - hit_scale[r]) * (one - q * q)
            for j in range(n):
                store(dst, np.uint64(j0 + j), tmp[j])
