"""xloss's fused cross entropy on the CPU: the loss and d loss / d logits from one pass over the logits
(the ``cross_entropy_loss_with_grad`` row), what a training step needs and nothing more: no
log-probabilities are written, and none are read back.

Per row, three walks, the first from memory and the other two from cache (a row of 32000 float32 is
125 KiB, L2-resident with its scratch):

1. the max of the non-NaN logits (:mod:`.row_max`: one vector ``max`` per vector of logits);
2. ``e_c = exp(x_c - max)`` (vectorized; the argument is never positive, so for float32 compute the
   short exp of :mod:`.sigmoid_terms`: one clamp, a degree-6 fit, one scaling, about half the
   instructions of the general one), kept in a per-block row scratch in the compute type, and summed
   (reassociable sum); with label smoothing also ``sum_c weight_c (x_c - max)``. Taken in runs of
   :data:`PF_RUN` logits, each first prefetching the same stretch of the next row (:mod:`.prefetch`), so
   the next row's first walk finds it in cache: its memory traffic overlaps this walk's arithmetic;
3. the gradient, written once: ``out_c = e_c * (a / sum) - s * weight_c``, minus ``b`` at the target,
   computed in the compute type (float32; float64 for float64) and rounded once to the logits' dtype;
   into a large gradient buffer already in use, staged and written with streaming stores
   (:mod:`.streaming`: no read of the gradient's lines before they are written, the same bits).

The row coefficients ``a, b, s`` (upstream gradient, class weights, smoothing, ``mean``'s divisor) are
those of the backward from the log-probabilities (:mod:`.cross_entropy`), formed in float64 with NumPy
(N values) and rounded once to the compute type: the mean's divisor depends on the targets alone, so it is
known before the pass. The per-row loss terms land in float64 arrays and are reduced with NumPy's float64
sum in row order, as the forward's. Half-precision logits are widened in registers (:mod:`.access`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .access import load, storage_view, store, writeable
from .intrinsics import inline_me, like, radd
from .layout import threads_for
from .prefetch import LINE, prefetch_line
from .row_max import row_max
from .sigmoid_terms import vexp_nonpositive
from .streaming import STAGE, line_head, sfence, stream_run, use_streaming

#: logits per run of the exp walk, each run prefetching its share of the next row: whole lines of every
#: element size, a few lines per run so the prefetches do not crowd the memory queues (runs of 256 to
#: 1024 measured alike; prefetching the next row in the gradient walk's 4096-element runs instead was slower)
PF_RUN = 512


@njit(error_model="numpy")
def _grad_run(scratch, sb, r, si, weight, w0, dst, d0, n):
    """``dst[d0 + j] = scratch[sb + j] * r - si * weight[w0 + j]`` for ``j < n`` (without the weight term
    when ``si`` is 0), computed in the compute type and rounded once to ``dst``'s storage type."""
    inline_me()
    if si == 0:
        for j in range(n):
            store(dst, np.uint64(d0 + j), scratch[np.uint64(sb + j)] * r)
    else:
        for j in range(n):
            store(dst, np.uint64(d0 + j), scratch[np.uint64(sb + j)] * r - si * weight[np.uint64(w0 + j)])


@njit(parallel=True, cache=True, error_model="numpy")
def fused_rows(x, classes, target, ignore_index, weight, weight_sum, smoothing, a, b, s, scratch, blocks, nll_row,
               smooth_row, out, stream, stage):
    """Per row ``i``: ``nll_row[i] = -w_t * log_prob_t`` (0 for an ignored row), ``smooth_row[i] =
    -sum_c w_c log_prob_c`` (only when ``smoothing``), and the gradient row written into ``out``.
    Rows are cut into ``blocks`` contiguous runs; run ``k`` keeps its exponentials in ``scratch[k]``.
    With ``stream``, each gradient row is finished in runs in ``stage`` (``STAGE + 64`` elements of
    ``out``'s storage type per block) and streamed to ``out`` (:mod:`.streaming`): the same values."""
    n = target.size
    for blk in prange(blocks):
        lo = blk * n // blocks
        hi = (blk + 1) * n // blocks
        sbase = blk * classes
        gbase = blk * (STAGE + 64)
        z0 = weight[np.uint64(0)]
        pf_step = LINE // x.itemsize
        for i in range(lo, hi):
            base = i * classes
            m = row_max(x, base, classes, z0)
            total = like(0.0, z0)
            wsum = like(0.0, z0)
            # in runs of PF_RUN logits, each first prefetching the same stretch of the next row (see .prefetch)
            nxt = base + classes if i + 1 < n else base
            for c0 in range(0, classes, PF_RUN):
                c1 = min(classes, c0 + PF_RUN)
                for q in range(c0, c1, pf_step):
                    prefetch_line(x, np.uint64(nxt + q))
                if smoothing:
                    for j in range(c0, c1):
                        d = load(x, np.uint64(base + j)) - m
                        e = vexp_nonpositive(d)
                        scratch[np.uint64(sbase + j)] = e
                        total = radd(total, e)
                        wsum = radd(wsum, weight[np.uint64(j)] * d)
                else:
                    for j in range(c0, c1):
                        e = vexp_nonpositive(load(x, np.uint64(base + j)) - m)
                        scratch[np.uint64(sbase + j)] = e
                        total = radd(total, e)
            log_total = np.log(total)
            smooth_row[i] = -(np.float64(wsum) - weight_sum * np.float64(log_total))
            t = target[np.uint64(i)]
            kept = t != ignore_index
            r = a[i] / total
            si = s[i]
            # the target column's gradient (``r`` stands in for an ignored row: never stored)
            tv = scratch[np.uint64(sbase + t)] * r - si * weight[np.uint64(t)] - b[i] if kept else r
            if stream:
                # first run up to STAGE elements past out's first 64-byte boundary in the row: the later
                # runs start on a boundary, so only the row's ends are written with normal stores
                c0 = 0
                c1 = min(classes, np.int64(line_head(out, base)) + STAGE)
                while c0 < classes:
                    _grad_run(scratch, sbase + c0, r, si, weight, c0, stage, gbase, c1 - c0)
                    if kept and c0 <= t < c1:
                        store(stage, np.uint64(gbase + t - c0), tv)
                    stream_run(out, base + c0, stage, gbase, c1 - c0)
                    c0 = c1
                    c1 = min(classes, c0 + STAGE)
            else:
                _grad_run(scratch, sbase, r, si, weight, 0, out, base, classes)
                if kept:
                    store(out, np.uint64(base + t), tv)
            if kept:
                lpt = (load(x, np.uint64(base + t)) - m) - log_total
                nll_row[i] = -np.float64(weight[np.uint64(t)]) * np.float64(lpt)
            else:
                nll_row[i] = 0.0
        if stream:
            sfence()


def _reduce(values, reduction, denominator):
    if reduction == "none":
        return values
    total = values.sum(dtype=np.float64)
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / denominator


def run(a, backend=None) -> None:
    """Fill ``loss_out`` and ``grad_out`` of a validated
    :class:`xloss.kernels.cross_entropy.args.CrossEntropyWithGradArgs`."""
    n, classes = a.input.shape
    cdt = np.float64 if a.input.dtype == np.float64 else np.float32
    w = np.ones(classes, cdt) if a.weight is None else writeable(a.weight)
    t = a.target.astype(np.int64, copy=False)
    keep = t != a.ignore_index
    w64 = w.astype(np.float64)
    w_t = np.where(keep, w64[np.where(keep, t, 0)], 0.0)
    g = a.grad.astype(np.float64) if isinstance(a.grad, np.ndarray) else np.full(n, float(a.grad))
    ls = a.label_smoothing
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total_weight = w_t.sum()
        d = total_weight if a.reduction == "mean" else 1.0
        g_nll = np.where(keep, g * (1.0 - ls) * w_t / d, 0.0)
        g_smooth = np.where(keep, g * ls / classes / d, 0.0)
        coefs = [c.astype(cdt) for c in (g_nll + g_smooth * w64.sum(), g_nll, g_smooth)]
    nll, smooth = np.zeros(n), np.zeros(n)
    if n:
        blocks = min(n, 4 * numba.get_num_threads())
        scratch = np.empty(blocks * classes, cdt)
        out = storage_view(a.grad_out).reshape(-1)
        stream = use_streaming(out.nbytes, out.ctypes.data, out.itemsize)
        stage = np.empty(blocks * (STAGE + 64) if stream else 1, out.dtype)
        with threads_for(a.input.size):
            fused_rows(storage_view(a.input).reshape(-1), classes, writeable(np.ascontiguousarray(t)), a.ignore_index,
                       w, float(w64.sum()), ls != 0.0, *coefs, scratch, blocks, nll, smooth, out, stream, stage)
    with np.errstate(invalid="ignore", over="ignore"):
        loss = (1.0 - ls) * _reduce(nll, a.reduction, total_weight)
        if ls:
            loss = loss + ls / classes * _reduce(np.where(keep, smooth, 0.0), a.reduction, total_weight)
        a.loss_out[...] = loss
