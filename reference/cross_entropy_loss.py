"""Cross entropy from logits with class-index targets, forward and backward, in float64.

PyTorch's ``F.cross_entropy`` semantics (class weights, ``ignore_index``, label smoothing spread
over all C classes and weighted by the class weights, ``mean`` dividing by the summed weights of
the rows not ignored) plus CANN's z-loss (``aclnnCrossEntropyLoss``'s ``lseSquareScaleForZloss``):

    lse_n  = log sum_c exp(x_nc)                 log_prob_nc = x_nc - lse_n
    m_n    = [t_n != ignore_index]               w_t(n) = weight[t_n] * m_n
    nll_n  = -w_t(n) * log_prob[n, t_n]          smooth_n = -m_n * sum_c weight_c * log_prob_nc
    zloss_n = scale * lse_n**2 * m_n

    loss = (1 - ls) * R(nll) + ls / C * R(smooth) + Rz(zloss)

with ``R`` the reduction (``mean``: the sum over the sum of ``w_t``) and ``Rz`` the same but its
``mean`` divides by the number of rows not ignored (CANN's aclnnCrossEntropyLossGrad divides the
z-loss gradient by ``sum(ignoreMask)``). The z-loss is part of ``loss`` (that gradient formula
feeds it the loss's upstream gradient) and is also returned on its own, reduced like the loss.

The backward takes ``log_prob`` (as CANN's does) and the upstream gradients of ``loss`` and,
optionally, of the separate ``zloss`` output.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._common import as_f64


class CrossEntropyOut(NamedTuple):
    loss: np.ndarray  # (N) for "none", else 0-d
    log_prob: np.ndarray  # (N, C)
    zloss: np.ndarray  # like loss: the z-loss term alone (zeros when scale is 0)
    lse: np.ndarray  # (N): log-sum-exp of each row


def _mask_and_weights(target, classes, weight, ignore_index):
    t = np.asarray(target).reshape(-1).astype(np.int64)
    keep = t != ignore_index
    w = np.ones(classes) if weight is None else as_f64(weight)
    w_t = np.where(keep, w[np.where(keep, t, 0)] if classes else 0.0, 0.0)
    return t, keep, w, w_t


def log_softmax_rows(x) -> tuple[np.ndarray, np.ndarray]:
    """``(log_prob, lse)`` of (N, C) logits, max-shifted; a row of -inf gives NaN (as PyTorch)."""
    x = as_f64(x)
    if x.shape[1] == 0:
        return x.copy(), np.full(x.shape[0], -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=1)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        lse = m_safe + np.log(np.exp(x - m_safe[:, None]).sum(axis=1))
        lse = np.where(np.isposinf(m), np.inf, lse)
        return x - lse[:, None], lse


def _reduce(values, reduction, denominator):
    if reduction == "none":
        return values
    total = values.sum(dtype=np.float64)
    if reduction == "sum":
        return np.asarray(total)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / denominator)


def cross_entropy_loss(input, target, *, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                       lse_square_scale_for_zloss=0.0) -> CrossEntropyOut:
    """Forward: loss, log-probabilities, the z-loss alone and the row log-sum-exp (float64)."""
    x = as_f64(input)
    n, classes = x.shape
    t, keep, w, w_t = _mask_and_weights(target, classes, weight, ignore_index)
    log_prob, lse = log_softmax_rows(x)
    with np.errstate(invalid="ignore"):
        picked = log_prob[np.arange(n), np.where(keep, t, 0)] if classes else np.zeros(n)
        nll = np.where(keep, -w_t * picked, 0.0)
        total_weight = w_t.sum()
        loss = (1.0 - label_smoothing) * _reduce(nll, reduction, total_weight)
        if label_smoothing:
            smooth = np.where(keep, -(log_prob * w).sum(axis=1), 0.0)
            loss = loss + label_smoothing / classes * _reduce(smooth, reduction, total_weight)
        zl = np.where(keep, lse_square_scale_for_zloss * lse * lse, 0.0)
        zloss = _reduce(zl, reduction, float(keep.sum()))
        if lse_square_scale_for_zloss:
            loss = loss + zloss
    return CrossEntropyOut(np.asarray(loss), log_prob, np.asarray(zloss), lse)


def cross_entropy_loss_grad(grad, log_prob, target, *, weight=None, reduction="mean", ignore_index=-100,
                            label_smoothing=0.0, lse_square_scale_for_zloss=0.0, grad_zloss=None,
                            lse_for_zloss=None) -> np.ndarray:
    """Backward: d loss / d input (N, C) from the forward's ``log_prob`` (float64).

    ``grad`` is (N) for ``none``, else a scalar; ``grad_zloss`` (same shapes) is the upstream
    gradient of the separate z-loss output, None for none; ``lse_for_zloss`` (N) the forward's
    log-sum-exp (needed only with a nonzero scale).
    """
    lp = as_f64(log_prob)
    n, classes = lp.shape
    t, keep, w, w_t = _mask_and_weights(target, classes, weight, ignore_index)
    g = as_f64(grad).reshape(-1)
    g = np.broadcast_to(g, (n,)) if reduction == "none" else np.full(n, g[0] if g.size else 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = w_t.sum() if reduction == "mean" else 1.0
        p = np.exp(lp)
        g_nll = np.where(keep, g * (1.0 - label_smoothing) * w_t / d, 0.0)
        g_smooth = np.where(keep, g * label_smoothing / classes / d, 0.0) if classes else np.zeros(n)
        out = p * (g_nll + g_smooth * w.sum())[:, None] - g_smooth[:, None] * w[None, :]
        out[np.arange(n)[keep], t[keep]] -= g_nll[keep]
        if lse_square_scale_for_zloss:
            gz = g.copy()
            if grad_zloss is not None:
                z = as_f64(grad_zloss).reshape(-1)
                gz = gz + (np.broadcast_to(z, (n,)) if reduction == "none" else z[0])
            dz = float(keep.sum()) if reduction == "mean" else 1.0
            lse = as_f64(lse_for_zloss).reshape(-1)
            g_lse = np.where(keep, 2.0 * lse_square_scale_for_zloss * lse * gz / dz, 0.0)
            out = out + p * g_lse[:, None]
    return out



def cross_entropy_loss_with_grad(input, target, grad=1.0, *, weight=None, reduction="mean", ignore_index=-100,
                                 label_smoothing=0.0) -> tuple[np.ndarray, np.ndarray]:
    """xloss's fused row: ``(loss, d loss / d input * grad)`` of :func:`cross_entropy_loss` (no z-loss),
    the gradient from the float64 log-probabilities, never rounded in between (float64)."""
    kw = dict(weight=weight, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
    r = cross_entropy_loss(input, target, **kw)
    return r.loss, cross_entropy_loss_grad(grad, r.log_prob, target, **kw)

def softmax_cross_entropy_with_logits(features, labels) -> tuple[np.ndarray, np.ndarray]:
    """Dense-label cross entropy (TensorFlow's and CANN's aclnnSoftmaxCrossEntropyWithLogits):
    ``loss_n = -sum_c labels_nc * log_softmax(features)_nc`` (N) and ``backprop = softmax(features) -
    labels`` (N, C), the gradient of the loss when each row of labels sums to 1 (the vendors' formula
    whatever the labels sum to)."""
    log_prob, _ = log_softmax_rows(features)
    y = as_f64(labels)
    with np.errstate(invalid="ignore", over="ignore"):
        return -(y * log_prob).sum(axis=1), np.exp(log_prob) - y
