"""Cross entropy from logits on the CPU: the forward (loss, log-probabilities, z-loss, log-sum-exp)
and the backward from the log-probabilities, each one parallel pass over the rows.

Forward, per row: the row streams through once in chunks of :data:`CHUNK` columns (L1-resident),
each chunk's max (``maxnum``, vectorized) merged into the running max and its sum of
``exp(x - max)`` (vectorized exp, reassociable sum) rescaled into the running sum: the online
max/sum. ``lse = max + log(sum)`` in the compute type (float32; float64 for float64). A second
walk of the row, while it is still in cache, writes ``log_prob = x - lse`` rounded once to the
input's dtype and, with label smoothing, sums ``weight_c * log_prob_c``; it is skipped when
neither is wanted. The per-row terms (NLL, smoothing sum, z-loss) land in float64 arrays and
the reduction is NumPy's float64 sum over them in row order (the same whatever the thread count).

Backward, per row: ``out_c = exp(log_prob_c) * a - s * weight_c`` minus ``b`` at the target, with
the row's coefficients ``a, b, s`` (upstream gradient, weights, smoothing, z-loss, the ``mean``
divisors) formed in float64 with NumPy (N values) in the reference's order and rounded once to
the compute type; each element is computed in the compute type and rounded once.

Half-precision arrays are read and written through their 16-bit views (:mod:`.access`); the
weight crosses in the compute type (ones when absent), targets as int64.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store, writeable
from .intrinsics import like, radd
from .layout import threads_for
from .vecmath import vexp
from .vp_rows import maxnum

#: columns per step of the online max/sum (a multiple of every SIMD width; 2-4 KiB, L1-resident)
CHUNK = 512


@njit(error_model="numpy")
def _row_stats(x, base, classes):
    """(max, sum of exp(x - max)) of one row, online over chunks; NaN anywhere gives a NaN sum."""
    z0 = load(x, np.uint64(base))
    m = like(-np.inf, z0)
    s = like(0.0, z0)
    for c0 in range(0, classes, CHUNK):
        c1 = min(classes, c0 + CHUNK)
        cm = like(-np.inf, z0)
        for j in range(c0, c1):
            cm = maxnum(cm, load(x, np.uint64(base + j)))
        mn = maxnum(m, cm)
        if mn == -np.inf:  # every logit so far -inf (maxnum skips NaN: look for one)
            for j in range(c0, c1):
                v = load(x, np.uint64(base + j))
                if v != v:
                    s = v
            continue
        acc = like(0.0, z0)
        for j in range(c0, c1):
            acc = radd(acc, vexp(load(x, np.uint64(base + j)) - mn))
        s = s * np.exp(m - mn) + acc  # m = -inf: exp(-inf) = 0
        m = mn
    return m, s


@njit(parallel=True, cache=True, error_model="numpy")
def forward_rows(x, classes, target, ignore_index, weight, smoothing, log_prob, write_log_prob, lse_row, nll_row,
                 smooth_row):
    """Per row: ``lse_row`` (float64), ``nll_row = -w_t * log_prob_t`` (0 for ignored rows),
    ``smooth_row = -sum_c w_c log_prob_c`` (only when ``smoothing``); ``log_prob`` written when
    ``write_log_prob``."""
    n = target.size
    for i in prange(n):
        base = i * classes
        m, s = _row_stats(x, base, classes)
        lse = m + np.log(s)
        lse_row[i] = lse
        if write_log_prob or smoothing:
            acc = like(0.0, lse)
            for j in range(classes):
                lp = load(x, np.uint64(base + j)) - lse
                if write_log_prob:
                    store(log_prob, np.uint64(base + j), lp)
                if smoothing:
                    acc = radd(acc, weight[np.uint64(j)] * lp)
            smooth_row[i] = -np.float64(acc)
        t = target[np.uint64(i)]
        if t != ignore_index:
            lpt = load(x, np.uint64(base + t)) - lse
            nll_row[i] = -np.float64(weight[np.uint64(t)]) * np.float64(lpt)
        else:
            nll_row[i] = 0.0


@njit(parallel=True, cache=True, error_model="numpy")
def backward_rows(log_prob, classes, target, ignore_index, weight, a, b, s, lp_target, out):
    """``out[i, c] = exp(log_prob[i, c]) * a[i] - s[i] * weight[c]``, minus ``b[i]`` at the target
    column of a row not ignored (coefficients in the compute type; ``lp_target[i]`` is ``log_prob`` at
    that column, gathered before the call); ``out`` may be ``log_prob``."""
    n = target.size
    for i in prange(n):
        base = i * classes
        ai, si = a[i], s[i]
        t = target[np.uint64(i)]
        kept = t != ignore_index
        k = np.uint64(base + t) if kept else np.uint64(base)
        # not read from log_prob here: Numba compiles a prange body with its arrays marked noalias, so
        # LLVM may move such a read past the row's stores, which breaks out = log_prob (seen for float64)
        lpt = load(lp_target, np.uint64(i))
        if si == 0:
            for j in range(classes):
                store(out, np.uint64(base + j), vexp(load(log_prob, np.uint64(base + j))) * ai)
        else:
            for j in range(classes):
                store(out, np.uint64(base + j), vexp(load(log_prob, np.uint64(base + j))) * ai -
                      si * weight[np.uint64(j)])
        if kept:
            store(out, k, vexp(lpt) * ai - si * weight[np.uint64(t)] - b[i])


def _weights(weight, classes, cdt) -> np.ndarray:
    return np.ones(classes, cdt) if weight is None else writeable(weight)


def _kept(a):
    t = a.target.astype(np.int64, copy=False)
    keep = t != a.ignore_index
    return writeable(np.ascontiguousarray(t)), keep


def _reduce(values, reduction, denominator):
    if reduction == "none":
        return values
    total = values.sum(dtype=np.float64)
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / denominator


def forward(a, backend=None) -> None:
    """Fill the outputs of a validated :class:`xloss.kernels.cross_entropy.args.CrossEntropyArgs`."""
    n, classes = a.input.shape
    cdt = np.float64 if a.input.dtype == np.float64 else np.float32
    w = _weights(a.weight, classes, cdt)
    t, keep = _kept(a)
    lse, nll, smooth = np.empty(n), np.empty(n), np.zeros(n)
    write = a.log_prob_out is not None
    log_prob = storage_view(a.log_prob_out if write else np.empty((1, 1), a.input.dtype)).reshape(-1)
    if n:
        with threads_for(a.input.size):
            forward_rows(storage_view(a.input).reshape(-1), classes, t, a.ignore_index, w,
                         a.label_smoothing != 0.0, log_prob, write, lse, nll, smooth)
    w_t = np.where(keep, w.astype(np.float64)[np.where(keep, t, 0)], 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        total_weight = w_t.sum()
        loss = (1.0 - a.label_smoothing) * _reduce(nll, a.reduction, total_weight)
        if a.label_smoothing:
            loss = loss + a.label_smoothing / classes * _reduce(np.where(keep, smooth, 0.0), a.reduction, total_weight)
        zl = np.where(keep, a.zloss_scale * lse * lse, 0.0)
        zloss = _reduce(zl, a.reduction, float(keep.sum()))
        if a.zloss_scale:
            loss = loss + zloss
        a.loss_out[...] = loss
        if a.zloss_out is not None:
            a.zloss_out[...] = zloss
        if a.lse_out is not None:
            a.lse_out[...] = lse


def backward(a, backend=None) -> None:
    """Fill ``out`` of a validated :class:`xloss.kernels.cross_entropy.args.CrossEntropyGradArgs`."""
    n, classes = a.log_prob.shape
    if n == 0:
        return
    cdt = np.float64 if a.log_prob.dtype == np.float64 else np.float32
    w = _weights(a.weight, classes, cdt)
    t, keep = _kept(a)
    w64 = w.astype(np.float64)
    w_t = np.where(keep, w64[np.where(keep, t, 0)], 0.0)
    g = a.grad.astype(np.float64) if isinstance(a.grad, np.ndarray) else np.full(n, float(a.grad))
    ls = a.label_smoothing
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = w_t.sum() if a.reduction == "mean" else 1.0
        g_nll = np.where(keep, g * (1.0 - ls) * w_t / d, 0.0)
        g_smooth = np.where(keep, g * ls / classes / d, 0.0)
        coef = g_nll + g_smooth * w64.sum()
        if a.zloss_scale:
            gz = g
            if a.grad_zloss is not None:
                gz = g + (a.grad_zloss.astype(np.float64) if isinstance(a.grad_zloss, np.ndarray) else a.grad_zloss)
            dz = float(keep.sum()) if a.reduction == "mean" else 1.0
            coef = coef + np.where(keep, 2.0 * a.zloss_scale * a.lse_for_zloss.astype(np.float64) * gz / dz, 0.0)
        coefs = [c.astype(cdt) for c in (coef, g_nll, g_smooth)]
    log_prob = storage_view(a.log_prob)
    lp_target = np.ascontiguousarray(log_prob[np.arange(n), np.where(keep, t, 0)])
    with threads_for(a.out.size):
        backward_rows(log_prob.reshape(-1), classes, t, a.ignore_index, w, *coefs, lp_target,
                      storage_view(a.out).reshape(-1))


@njit(parallel=True, cache=True, error_model="numpy")
def dense_rows(x, labels, classes, rows, loss, backprop):
    """Dense labels: ``loss[i] = -sum_c y_ic (x_ic - lse_i)`` (float64) and ``backprop = exp(x - lse) - y``
    rounded once to its dtype."""
    for i in prange(rows):
        base = i * classes
        m, s = _row_stats(x, base, classes)
        lse = m + np.log(s)
        acc = like(0.0, lse)
        for j in range(classes):
            k = np.uint64(base + j)
            lp = load(x, k) - lse
            y = load(labels, k)
            acc = radd(acc, y * lp)
            store(backprop, k, vexp(lp) - y)
        loss[i] = -np.float64(acc)


def dense(a, backend=None) -> None:
    """Fill the outputs of a validated :class:`xloss.kernels.cross_entropy.args.SoftmaxCrossEntropyArgs`."""
    n, classes = a.features.shape
    if n == 0:
        return
    loss = np.empty(n)
    with threads_for(a.features.size):
        dense_rows(storage_view(a.features).reshape(-1), storage_view(a.labels).reshape(-1), classes, n, loss,
                   storage_view(a.backprop_out).reshape(-1))
    with np.errstate(over="ignore"):
        a.loss_out[...] = loss
