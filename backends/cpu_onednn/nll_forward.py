"""NLL-loss forward: one pass over the targets, gathering ``-w[t] * x[.., t, ..]`` per position.

The input is read as (N, C, D) (D = 1 for (C) and (N, C) input; the dims after the class axis of
an N-d input folded into D), the targets as N*D positions. Each block of positions writes its
per-position losses (``none``, rounded once from the compute type, where the product of two 16-bit
values is exact) and/or its partial sums of ``w*x`` and of ``w`` in float64 (exact products);
the partials are added in block order, so the result does not depend on the thread count. Inside a
block the sums run in chunks of :data:`_CHUNK` positions (a two-level sum: a term sees about
``_CHUNK + _BLOCK / _CHUNK`` roundings, not ``_BLOCK``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store, writeable
from .layout import ones_block, threads_for

#: Positions per parallel block.
_BLOCK = 1 << 14
#: Positions per inner partial sum.
_CHUNK = 128


@njit(parallel=True, cache=True, error_model="numpy")
def nll_forward_kernel(x, target, w, weighted, classes, inner, ignore_index, per_row, out, part_loss, part_w):
    """``out`` (positions, storage type) when ``per_row``; ``part_loss``/``part_w`` (one float64 per block)
    always. ``w`` is read only when ``weighted`` (else every class weighs 1)."""
    n = target.size
    for b in prange((n + _BLOCK - 1) // _BLOCK):
        s_loss = 0.0
        s_w = 0.0
        end = min(n, (b + 1) * _BLOCK)
        for c0 in range(b * _BLOCK, end, _CHUNK):
            c_loss = 0.0
            c_w = 0.0
            for r in range(c0, min(end, c0 + _CHUNK)):
                t = np.int64(target[np.uint64(r)])
                if t == ignore_index:
                    if per_row:
                        store(out, r, 0.0)
                    continue
                if inner == 1:  # (C) and (N, C): no integer division per position
                    at = r * classes + t
                else:
                    sample = r // inner
                    at = (sample * classes + t) * inner + (r - sample * inner)
                xv = load(x, at)
                wv = load(w, t) if weighted else load(w, 0)
                if per_row:
                    store(out, r, -(wv * xv))
                c_loss += np.float64(wv) * np.float64(xv)
                c_w += np.float64(wv)
            s_loss += c_loss
            s_w += c_w
        part_loss[b] = s_loss
        part_w[b] = s_w


def run(a, backend=None) -> None:
    """Fill ``a.out`` and ``a.total_weight_out`` of a validated :class:`xloss.kernels.nll.forward_args.NLLLossArgs`."""
    n = a.target.size
    dt = a.self.dtype
    per_row = a.reduction == "none"
    blocks = max(1, (n + _BLOCK - 1) // _BLOCK)
    part_loss = np.zeros(blocks)
    part_w = np.zeros(blocks)
    if n:
        w = ones_block(dt) if a.weight is None else storage_view(a.weight)
        out = storage_view(a.out).reshape(-1) if per_row else ones_block(dt)
        with threads_for(n * 4):
            nll_forward_kernel(storage_view(a.self).reshape(-1), writeable(a.target).reshape(-1), w,
                               a.weight is not None, a.classes, a.inner, a.ignore_index, per_row, out,
                               part_loss, part_w)
    total_w = float(part_w.sum())
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if not per_row:
            total = -float(part_loss.sum())
            a.out[...] = np.asarray(np.float64(total) / np.float64(total_w) if a.reduction == "mean" else total,
                                    np.float64).astype(dt)
        batched = a.self.ndim >= 2
        a.total_weight_out[...] = np.asarray(0.0 if per_row and batched else total_w).astype(dt)
