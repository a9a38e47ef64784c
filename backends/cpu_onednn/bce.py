"""Binary-cross-entropy gradient: ``dx = grad * weight * (x - y) / denom`` in one parallel pass.

``denom`` is ``max(x(1-x), eps)`` (``eps_mode="clamp"``, PyTorch/Ascend) or ``x(1-x) + eps``
(``"add"``, FT78NE/MT7004); both forms are declared. The weight is walked as described in
:mod:`.layout` (never expanded for the usual per-row / per-column patterns); ``mean`` folds
``1/n`` into the scalar upstream gradient.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store
from .intrinsics import inline_me, like
from .layout import BLOCK as _BLOCK
from .layout import broadcast_plan, ones_block, stretch, threads_for


@njit(error_model="numpy")
def _run(x, y, i0, m, w, wo, wk, g, go, gk, eps, add_eps, out):
    inline_me()
    for j in range(m):
        i = i0 + j
        xv = load(x, i)
        e = like(eps, xv)
        d = xv * (like(1.0, xv) - xv)
        d = d + e if add_eps else (e if d < e else d)  # NaN stays NaN
        store(out, i, (xv - load(y, i)) / d * (load(w, wo + j) * wk) * (load(g, go + j) * gk))


@njit(parallel=True, cache=True, error_model="numpy")
def bce_kernel(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, eps, add_eps, out):
    """Flat arrays of one storage type; ``g`` is ``ones`` when the upstream gradient is the
    scalar ``g_scale``."""
    n = x.size
    x0 = load(x, 0)
    gk = like(g_scale, x0)
    for b in prange((n + _BLOCK - 1) // _BLOCK):
        end_block = min(n, (b + 1) * _BLOCK)
        pos = b * _BLOCK
        while pos < end_block:
            end, wo, wi = stretch(pos, end_block, w_rep, w_period)
            go = pos if g_full else 0
            if wi < 0:
                _run(x, y, pos, end - pos, w, wo, like(1.0, x0), g, go, gk, eps, add_eps, out)
            else:
                _run(x, y, pos, end - pos, ones, 0, load(w, wi), g, go, gk, eps, add_eps, out)
            pos = end


def run(a, backend=None) -> None:
    """Fill ``a.out`` of a validated :class:`xloss.kernels.bce.args.BCEArgs`."""
    n = a.x.size
    if n == 0:
        return
    ones = ones_block(a.x.dtype)
    w = broadcast_plan(a.weight, a.x.shape, ones)
    if isinstance(a.grad, np.ndarray):
        g, g_full, g_scale = storage_view(a.grad).reshape(-1), True, 1.0
    else:
        g, g_full, g_scale = ones, False, a.grad / n if a.reduction == "mean" else a.grad
    with threads_for(n):
        bce_kernel(storage_view(a.x).reshape(-1), storage_view(a.y).reshape(-1), w.values, w.rep, w.period, ones,
                   g, g_full, g_scale, a.eps, a.eps_mode == "add", storage_view(a.out).reshape(-1))
