"""``cross_entropy_loss_grad`` on the ``ft78ne``/``mt7004`` backends, through the manual's
``sparse_softmax_cross_entropy_with_logits`` with ``is_grad = 1`` (its ``output``: ``softmax(input) - onehot(label)``
per element).

The row's gradient is ``exp(log_prob) - onehot(target)`` scaled per row; the page is called on the log-probabilities
themselves. Its softmax re-normalises them: with ``s = sum_j exp(log_prob[j])`` it gives ``exp(log_prob) / s``, and
``s`` is 1 only for exact log-probabilities. Rounded to the dtype they miss it by up to the entropy times half an
ulp (float16: a flat row of 3418 classes, whose ``-ln C`` rounds by 4e-3, is three times the row's allowance off), so
the adapter undoes it from the page's own output (:func:`_log_sum`): ``L = ln s`` in float64, the element ``o`` of a
class other than the label becomes ``o * e^L`` and the label's ``o * e^L + (e^L - 1)``, no cancellation.

The page has no weight, smoothing or z-loss (declared so). Ignored rows are left out of the call (zeros here); the
upstream gradient and the mean's divisor (the kept rows) are applied here in float64 with the ``s`` correction, each
element rounded once: float16 runs through the ``fp_`` form on exact float32 copies (float16 is declared only where the
library has it). Private memory: tiles of whole rows (:func:`.softmax_ce.page_rows`); a row too long for a core's
arena is called in chunks of its classes, each its own softmax, whose ``L`` of the chunk scales it to
``exp(log_prob)`` directly (:func:`_chunked`).
"""

from __future__ import annotations

import numpy as np

from . import abi
from .softmax_ce import page_rows
from .staging import fit, ranges


def _log_sum(lp: np.ndarray, o: np.ndarray, label: np.ndarray) -> np.ndarray:
    """``ln sum_j exp(lp[r, j])`` per row, in float64, from the page's output ``o`` of the call labelled ``label``.

    ``o[j] = e^(lp[j] - L)`` for ``j != label`` and ``o[label] = e^(lp[label] - L) - 1``. The label's probability
    when it is at least 1/2 (``L = lp - log1p(o)``, ``o`` small and exact enough), else the largest other class's,
    which is then at least ``1 / (2 (C - 1))``: never a probability formed by cancellation or underflowed."""
    m = len(label)
    rows = np.arange(m)
    lp64, o64 = lp.astype(np.float64), o.astype(np.float64)
    o_label = o64[rows, label]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out = lp64[rows, label] - np.log1p(o_label)
        far = ~(o_label >= -0.5)  # NaN rows take this path too: their L is NaN either way
        if far.any() and o.shape[1] > 1:
            other = o64[far].copy()
            other[np.arange(int(far.sum())), label[far]] = -np.inf
            j = np.argmax(other, axis=1)
            out[far] = lp64[far][np.arange(len(j)), j] - np.log(other[np.arange(len(j)), j])
    return out


def _exp_gradient(lp: np.ndarray, o: np.ndarray, label: np.ndarray, is_target: np.ndarray) -> np.ndarray:
    """``exp(lp) - onehot(target)`` (float64) of rows whose call was labelled ``label``: the target where
    ``is_target``, else a class the caller wants no one-hot at (a chunk without the target), whose element
    ``e^lp`` is then taken directly (the page gives it only as ``p - 1``, which cancels)."""
    m = len(label)
    rows = np.arange(m)
    big_l = _log_sum(lp, o, label)
    with np.errstate(invalid="ignore", over="ignore"):
        f = np.exp(big_l)
        g = o.astype(np.float64) * f[:, None]
        at = o[rows, label].astype(np.float64)
        g[rows, label] = np.where(is_target, at * f + np.expm1(big_l), np.exp(lp[rows, label].astype(np.float64)))
    return g


def _chunk_width(b, c: int, es: int) -> int:
    """The most classes a call on one row can take in a core's arena (the page's buffers with the gradient:
    ``softmax_ce.page_rows``'s count); C in shared memory."""
    if b.memory == "shared":
        return c

    def need(k):
        return 2 * b._blk(k * es) + 3 * b._blk(es) + b._blk(4)

    return fit(b._budget(), need, c)


def _chunked(b, lp: np.ndarray, target: np.ndarray, width: int) -> np.ndarray:
    """``exp(lp) - onehot(target)`` (float64) from calls on chunks of at most ``width`` classes: a chunk holding a
    row's target is labelled with it, another with its largest log-probability."""
    n, c = lp.shape
    g = np.empty((n, c))
    for c0, c1 in ranges(c, width):
        part = np.ascontiguousarray(lp[:, c0:c1])
        inside = (target >= c0) & (target < c1)
        label = np.where(inside, target - c0, np.argmax(part, axis=1)).astype(np.int32)
        _, o = page_rows(b, abi.SPARSE_SOFTMAX_CE, part, label, True)
        g[:, c0:c1] = _exp_gradient(part, o, label, inside)
    return g


def cross_entropy_loss_grad(b, a) -> None:
    b._require(a.request())
    lp = a.log_prob
    n, c = lp.shape
    abi.c_int("batch_size", n)
    t = a.target.astype(np.int64)
    keep = t != a.ignore_index
    fname, _ = b._names(lp.dtype, abi.SPARSE_SOFTMAX_CE)
    x = lp[keep]
    if x.dtype == np.float16:  # exact float32 copies (the declaration asks for the fp_ form): one rounding here
        x = x.astype(np.float32)
    x = np.ascontiguousarray(x)
    label = t[keep].astype(np.int32)
    if len(label):
        width = _chunk_width(b, c, x.dtype.itemsize)
        if width == 0:
            raise b._too_big(f"{fname} on one row and one class", 2 * b._blk(x.dtype.itemsize))
        if width >= c:
            _, o = page_rows(b, abi.SPARSE_SOFTMAX_CE, x, label, True)
            kept = _exp_gradient(x, o, label, np.ones(len(label), bool))
        else:
            kept = _chunked(b, x, label.astype(np.int64), width)
    g = np.asarray(a.grad, np.float64).reshape(-1)
    g = np.broadcast_to(g, (n,)) if a.reduction == "none" else np.full(n, g[0] if g.size else 0.0)
    d = float(keep.sum()) if a.reduction == "mean" else 1.0
    out = np.zeros((n, c))
    if len(label):
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            out[keep] = kept * (g[keep] / d)[:, None]
    # every call succeeded: the caller's buffer (possibly log_prob itself) is written once, at the end
    a.out[...] = out.astype(a.out.dtype)
