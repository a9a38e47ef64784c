"""Softmax cross entropy on the ``ft78ne``/``mt7004`` backends, through the manual's
``softmax_cross_entropy_with_logits`` (dense labels: loss per row and ``softmax - labels``) and
``sparse_softmax_cross_entropy_with_logits`` (class-index labels: ``-log softmax[label]`` per row).

``softmax_cross_entropy_with_logits`` (the dense row) is the dense page itself: its ``output`` is the loss
per row, its ``grads`` the backprop; ``probs`` and ``sum_data`` are the adapter's scratch.

``cross_entropy_loss`` (the class-index forward) calls the sparse page without a gradient. The page has
no weight, smoothing, z-loss or ignore_index (declared so); a row whose target is ignore_index is called
with label 0 and its loss dropped here. The log-probabilities the row returns come from the page's loss by
the softmax identity ``log p[j] = (x[j] - m) - loss_m``, where ``loss_m`` is the page's loss of a second call
labelled with each row's largest logit ``m`` (``ln sum e^(x - m)``: the target's loss would cancel), and the
``sum``/``mean`` over the kept rows in float64 too, each result rounded once: with float16 logits the
``fp_`` form runs on exact float32 copies where the library has it, so that no loss is rounded twice.

Private memory: tiles of whole rows (a row that does not fit the arena is refused, naming the bytes).
"""

from __future__ import annotations

import math

import numpy as np

from . import abi
from .staging import fit, ranges


def _rows(b, op: str, x: np.ndarray, y: np.ndarray, grads: bool):
    """(loss (N), gradient (N, C) or None) of the page ``op`` over the rows of ``x`` (its dtype) with dense
    labels ``y`` (x's dtype) or int32 class indices ``y`` (N), from the library."""
    n, c = x.shape
    dt = x.dtype
    loss = np.full(n, np.nan, dt)
    grad = np.full((n, c), np.nan, dt) if grads else None
    if n == 0:
        return loss, grad
    dense = op == abi.SOFTMAX_CE
    fname, ct = b._names(dt, op)
    lt = ct if dense else "int"
    null = b.ffi.NULL

    def call(xp, yp, gp, lp, sp, wp, m, *mask):
        if dense:  # logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes, need_grads
            b._invoke(fname, xp, yp, wp, gp, lp, sp, m, c, int(grads), *mask)
        else:  # input, losses, sum_data, inner, outer, axis, labels, is_grad, output, batch, classes, partial
            b._invoke(fname, xp, lp, sp, 1, m, c, yp, int(grads), gp, m, c, wp, *mask)

    if b.memory == "shared":
        work = np.empty((n, c) if dense else n, dt)  # probs (dense) or partial_losses (sparse): scratch
        sums = np.empty(n, dt)
        call(b._ptr(x, ct), b._ptr(y, lt), b._ptr(grad, ct) if grads else null, b._ptr(loss, ct), b._ptr(sums, ct),
             b._ptr(work, ct), n, b.core_mask)
        return loss, grad
    es = dt.itemsize

    def need(r):
        mats = (3 if dense else 1) + (1 if grads else 0)
        return mats * b._blk(r * c * es) + 3 * b._blk(r * es) + (0 if dense else b._blk(r * 4))

    t = fit(b._budget(), need, n)
    if t == 0:
        raise b._too_big(f"{fname} on one row of {c} classes", need(1))
    tiles = ranges(n, t)
    specs = {"x": (ct, dt, t * c), "y": (lt, dt if dense else np.int32, t * c if dense else t),
             "loss": (ct, dt, t), "sums": (ct, dt, t), "work": (ct, dt, t * c if dense else t)}
    if grads:
        specs["grad"] = (ct, dt, t * c)

    def stage(i, bufs):
        lo, hi = tiles[i]
        m = hi - lo
        bufs["x"].arr[:m * c] = x[lo:hi].reshape(-1)
        bufs["y"].arr[:m * c if dense else m] = y[lo:hi].reshape(-1)
        call(bufs["x"].ptr, bufs["y"].ptr, bufs["grad"].ptr if grads else null, bufs["loss"].ptr, bufs["sums"].ptr,
             bufs["work"].ptr, m)
        loss[lo:hi] = bufs["loss"].arr[:m]
        if grads:
            grad[lo:hi] = bufs["grad"].arr[:m * c].reshape(m, c)

    b._run_private(specs, len(tiles), stage)
    return loss, grad


def softmax_cross_entropy_with_logits(b, a) -> None:
    b._require(a.request())
    abi.c_int("batch_size", a.features.shape[0])
    abi.c_int("num_of_classes", a.features.shape[1])
    loss, grad = _rows(b, abi.SOFTMAX_CE, a.features, a.labels, True)
    # results reach the caller's buffers only after every call succeeded
    a.loss_out[...] = loss
    a.backprop_out[...] = grad


def cross_entropy_loss(b, a) -> None:
    b._require(a.request())
    x = a.input
    n, c = x.shape
    abi.c_int("batch_size", n)
    t = a.target.astype(np.int64)
    keep = t != a.ignore_index
    labels = np.where(keep, t, 0).astype(np.int32)
    fname, _ = b._names(x.dtype, abi.SPARSE_SOFTMAX_CE)
    if x.dtype == np.float16 and b.lib.has("fp" + fname[2:]):
        x = x.astype(np.float32)  # exact copies: the host arithmetic below rounds each result once
    loss, _ = _rows(b, abi.SPARSE_SOFTMAX_CE, x, labels, False)
    loss64 = loss.astype(np.float64)
    kept = loss64[keep]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if a.reduction == "none":
            out = np.where(keep, loss64, 0.0)
        else:
            total = math.fsum(kept.tolist()) if np.isfinite(kept).all() else float(kept.sum())
            out = np.float64(total / kept.size if kept.size else np.nan) if a.reduction == "mean" else total
        log_prob = None
        if a.log_prob_out is not None and n:
            # a second call labelled with each row's largest logit m: its loss is ln sum e^(x - m), small and
            # computed by the library itself (from the target's loss it would cancel against m - x[target])
            top = np.argmax(x, axis=1).astype(np.int32)
            lse_shift, _ = _rows(b, abi.SPARSE_SOFTMAX_CE, x, top, False)
            x64 = x.astype(np.float64)
            log_prob = (x64 - x64[np.arange(n), top][:, None]) - lse_shift.astype(np.float64)[:, None]
        a.loss_out[...] = np.asarray(out).astype(a.loss_out.dtype)
        if a.log_prob_out is not None:
            a.log_prob_out[...] = log_prob.astype(a.log_prob_out.dtype) if n else 0
