"""Binary-cross-entropy forward: ``-w (y max(log x, -100) + (1-y) max(log1p(-x), -100))`` in one parallel pass.

Compute type: float64 for float64 data, float32 otherwise (16-bit inputs widen). ``none`` stores each
loss rounded once; the reductions add float64 partial sums of :data:`_SUB` elements per fixed block, blocks
in order (the result does not depend on the thread count). The weight is walked as in :mod:`.bce`
(:mod:`.layout`: never expanded for the usual per-row / per-column patterns).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store
from .intrinsics import inline_me, like
from .layout import BLOCK as _BLOCK
from .layout import broadcast_plan, ones_block, stretch, threads_for

_SUB = 64  # elements per float64 partial


@njit(error_model="numpy")
def _loss(xv, yv):
    inline_me()
    floor = like(-100.0, xv)
    lx = np.log(xv)
    l1 = np.log1p(-xv)
    lx = floor if lx < floor else lx  # NaN stays NaN
    l1 = floor if l1 < floor else l1
    return -(yv * lx + (like(1.0, xv) - yv) * l1)


@njit(error_model="numpy")
def _run(x, y, i0, m, w, wo, wk, per_elem, out):
    inline_me()
    acc = 0.0
    for s0 in range(0, m, _SUB):
        sub = 0.0
        for j in range(s0, min(m, s0 + _SUB)):
            i = i0 + j
            v = _loss(load(x, i), load(y, i)) * (load(w, wo + j) * wk)
            if per_elem:
                store(out, i, v)
            sub += np.float64(v)
        acc += sub
    return acc


@njit(parallel=True, cache=True, error_model="numpy")
def bce_forward_kernel(x, y, w, w_rep, w_period, ones, per_elem, out, partials):
    n = x.size
    x0 = load(x, 0)
    for b in prange((n + _BLOCK - 1) // _BLOCK):
        end_block = min(n, (b + 1) * _BLOCK)
        pos = b * _BLOCK
        acc = 0.0
        while pos < end_block:
            end, wo, wi = stretch(pos, end_block, w_rep, w_period)
            if wi < 0:
                acc += _run(x, y, pos, end - pos, w, wo, like(1.0, x0), per_elem, out)
            else:
                acc += _run(x, y, pos, end - pos, ones, 0, load(w, wi), per_elem, out)
            pos = end
        partials[b] = acc


def run(a, backend=None) -> None:
    """Fill ``a.out`` of a validated :class:`xloss.kernels.bce.forward_args.BCELossArgs`."""
    n = a.x.size
    per_elem = a.reduction == "none"
    partials = np.zeros(max(1, (n + _BLOCK - 1) // _BLOCK))
    if n:
        ones = ones_block(a.x.dtype)
        w = broadcast_plan(a.weight, a.x.shape, ones)
        out = storage_view(a.out).reshape(-1) if per_elem else ones
        with threads_for(n):
            bce_forward_kernel(storage_view(a.x).reshape(-1), storage_view(a.y).reshape(-1), w.values, w.rep,
                               w.period, ones, per_elem, out, partials)
    if not per_elem:
        total = float(partials.sum())
        with np.errstate(invalid="ignore", over="ignore"):
            value = (total / n if n else float("nan")) if a.reduction == "mean" else total
            a.out[...] = np.asarray(value).astype(a.out.dtype)
