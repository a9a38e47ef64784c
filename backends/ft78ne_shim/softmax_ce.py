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

Option ``softmax_ce_losses`` (:mod:`.options`): ``one`` calls a library that writes one loss per call a row at
a time. Private memory: tiles of whole rows; a row too long for a core's arena is called in chunks of its classes, whose
log-sum-exps (from the page's own outputs) are combined here in float64 (:func:`_class_chunks`).
"""

from __future__ import annotations

import math

import numpy as np

from . import abi, options
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

    per_call = options.rows_per_call(b._given) or n
    if b.memory == "shared":
        work = np.empty((n, c) if dense else n, dt)  # probs (dense) or partial_losses (sparse): scratch
        sums = np.empty(n, dt)
        for lo, hi in ranges(n, per_call):
            call(b._ptr(x[lo:hi], ct), b._ptr(y[lo:hi], lt), b._ptr(grad[lo:hi], ct) if grads else null,
                 b._ptr(loss[lo:hi], ct), b._ptr(sums[lo:hi], ct), b._ptr(work[lo:hi], ct), hi - lo, b.core_mask)
        return loss, grad
    es = dt.itemsize

    def need(r):
        mats = (3 if dense else 1) + (1 if grads else 0)
        return mats * b._blk(r * c * es) + 3 * b._blk(r * es) + (0 if dense else b._blk(r * 4))

    t = fit(b._budget(), need, per_call)
    if t == 0:  # a row does not fit a core's private memory: class chunks, combined here
        return _class_chunks(b, op, fname, ct, x, y, grads)
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


def _class_chunks(b, op, fname, ct, x, y, grads):
    """(loss, gradient) of rows too long for private memory, from calls on chunks of their classes.

    Each chunk's call is the page on those classes alone; its log-sum-exp ``lse_c`` comes from the page's own
    outputs: for the sparse page the loss of the chunk's largest logit (``lse_c - max_c``), for the dense page
    the probability of that logit (``e^(max_c - lse_c)``, at least 1/chunk: no cancellation). In float64 here:
    ``lse`` of the row from the chunks', the sparse loss ``lse - x[label]``, the dense loss
    ``sum_c output_c + (lse - lse_c) sum_c y`` and gradient ``probs_c e^(lse_c - lse) - y``, each rounded once."""
    n, c = x.shape
    out_dt = x.dtype
    dense = op == abi.SOFTMAX_CE
    if out_dt == np.float16 and b.lib.has("fp" + fname[2:]):
        # half chunk results would be rounded before they are combined: exact float32 copies
        fname, ct = "fp" + fname[2:], "float"
        x, y = x.astype(np.float32), (y.astype(np.float32) if dense else y)
    dt, es = x.dtype, x.dtype.itemsize
    budget = b._budget()

    def need(r, cc):
        if dense:
            return 3 * b._blk(r * cc * es) + 2 * b._blk(r * es)
        return b._blk(r * cc * es) + 3 * b._blk(r * es) + b._blk(r * 4)

    cc = fit(budget, lambda k: need(1, k), c)
    if cc == 0:
        raise b._too_big(f"{fname} on one row and one class", need(1, 1))
    rmax = fit(budget, lambda r: need(r, cc), options.rows_per_call(b._given) or n)
    bounds = ranges(c, cc)  # balanced: chunk j starts where it starts, not at j * cc
    tiles = [(lo, hi, j) for lo, hi in ranges(n, rmax) for j in range(len(bounds))]
    chunks = len(bounds)
    lse_c = np.zeros((n, chunks))
    out_c = np.zeros((n, chunks))
    probs = np.zeros((n, c)) if dense else None
    x64 = x.astype(np.float64)
    specs = {"x": (ct, dt, rmax * cc), "loss": (ct, dt, rmax), "sums": (ct, dt, rmax),
             "work": (ct, dt, rmax * cc if dense else rmax)}
    specs["y"] = (ct, dt, rmax * cc) if dense else ("int", np.int32, rmax)
    null = b.ffi.NULL

    def stage(i, bufs):
        lo, hi, j = tiles[i]
        (c0, c1), m = bounds[j], hi - lo
        k = c1 - c0
        part = x[lo:hi, c0:c1]
        top = np.argmax(part, axis=1)
        bufs["x"].arr[:m * k] = part.reshape(-1)
        if dense:
            bufs["y"].arr[:m * k] = y[lo:hi, c0:c1].reshape(-1)
            b._invoke(fname, bufs["x"].ptr, bufs["y"].ptr, bufs["work"].ptr, null, bufs["loss"].ptr, bufs["sums"].ptr,
                      m, k, 0)
            p = bufs["work"].arr[:m * k].reshape(m, k).astype(np.float64)
            probs[lo:hi, c0:c1] = p
            with np.errstate(divide="ignore"):
                lse_c[lo:hi, j] = part[np.arange(m), top].astype(np.float64) - np.log(p[np.arange(m), top])
        else:
            bufs["y"].arr[:m] = top
            b._invoke(fname, bufs["x"].ptr, bufs["loss"].ptr, bufs["sums"].ptr, 1, m, k, bufs["y"].ptr, 0, null, m, k,
                      bufs["work"].ptr)
            lse_c[lo:hi, j] = bufs["loss"].arr[:m].astype(np.float64) + part[np.arange(m), top]
        out_c[lo:hi, j] = bufs["loss"].arr[:m]

    b._run_private(specs, len(tiles), stage)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        top = lse_c.max(axis=1, keepdims=True)
        lse = (top + np.log(np.exp(lse_c - np.where(np.isfinite(top), top, 0.0)).sum(axis=1, keepdims=True)))[:, 0]
        if not dense:
            return (lse - x64[np.arange(n), y]).astype(out_dt), None
        y64 = y.astype(np.float64)
        ysum = np.stack([y64[:, c0:c1].sum(axis=1) for c0, c1 in bounds], axis=1)
        loss = (out_c + (lse[:, None] - lse_c) * ysum).sum(axis=1)
        grad = None
        if grads:
            scale = np.concatenate([np.repeat(np.exp(lse_c[:, [j]] - lse[:, None]), c1 - c0, axis=1)
                                    for j, (c0, c1) in enumerate(bounds)], axis=1)
            grad = (probs * scale - y64).astype(out_dt)
        return loss.astype(out_dt), grad


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


#: the page's calls over whole rows, for the gradient row (:mod:`.softmax_ce_grad`)
page_rows = _rows
