"""Binary-cross-entropy forward: ``-w (y max(log x, -100) + (1-y) max(log1p(-x), -100))`` in one parallel pass.

Compute type: float64 (the logs of float32 and 16-bit data by :func:`.vecmath.log_short_f64`, which
vectorizes). ``none`` stores each loss rounded once; the reductions add float64 partial sums of
:data:`_SUB` elements per fixed block, blocks in order (the result does not depend on the thread count).
The weight is walked as in :mod:`.bce` (:mod:`.layout`: never expanded for the usual per-row /
per-column patterns).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .access import load, storage_view, store
from .intrinsics import inline_me, like, radd
from .layout import BLOCK as _BLOCK
from .layout import broadcast_plan, ones_block, stretch, threads_for
from .vecmath import log_short_f64

_SUB = 64  # elements per float64 partial


def _loss(xv, yv):
    """One element's loss (compiled only; the overload below picks the form by ``xv``'s type)."""
    raise TypeError("_loss() is compiled by Numba only")


@overload(_loss)
def _loss_typed(xv, yv):
    if xv == types.float32:
        # float32 and 16-bit data: both logs in float64 by the vectorizable log_short_f64 (libm's scalar
        # calls kept the loop from vectorizing: 4x slower; its error, 2**-37, is far below half a float32
        # ulp); log1p(-x) = log(u) + c with u = 1 - x rounded and c = (1 - u) - x its exact error, which is
        # 0 for x >= 2**-29 (1 - x is then exact) and otherwise stands for c/u to a relative 2**-29
        # (x < 2**-53 leaves u = 1, log(u) = 0, c = -x); the loss is rounded once, on store
        def impl(xv, yv):
            inline_me()
            x, y = np.float64(xv), np.float64(yv)
            lx = log_short_f64(x) if x > 0.0 else -np.inf  # x in [0, 1] (validated) or NaN
            lx = lx if x == x else x
            u = 1.0 - x
            l1 = log_short_f64(u) + ((1.0 - u) - x)
            l1 = -np.inf if u == 0.0 else l1
            l1 = l1 if u == u else u
            lx = -100.0 if lx < -100.0 else lx  # NaN stays NaN
            l1 = -100.0 if l1 < -100.0 else l1
            return -(y * lx + (1.0 - y) * l1)

        return impl
    if xv == types.float64:
        def impl(xv, yv):  # 1 - x is not exact in float64: libm's log1p
            inline_me()
            lx = np.log(xv)
            l1 = np.log1p(-xv)
            lx = -100.0 if lx < -100.0 else lx
            l1 = -100.0 if l1 < -100.0 else l1
            return -(yv * lx + (1.0 - yv) * l1)

        return impl
    return None


@njit(error_model="numpy")
def _run(x, y, i0, m, w, wo, wk, per_elem, out):
    inline_me()
    acc = 0.0
    for s0 in range(0, m, _SUB):
        sub = 0.0
        if per_elem:  # two loops, not a test per element: each vectorizes
            for j in range(s0, min(m, s0 + _SUB)):
                v = _loss(load(x, i0 + j), load(y, i0 + j)) * (load(w, wo + j) * wk)
                store(out, i0 + j, v)
                sub = radd(sub, np.float64(v))  # reassociable: the loop vectorizes
        else:
            for j in range(s0, min(m, s0 + _SUB)):
                v = _loss(load(x, i0 + j), load(y, i0 + j)) * (load(w, wo + j) * wk)
                sub = radd(sub, np.float64(v))
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
