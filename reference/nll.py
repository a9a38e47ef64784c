"""Backward of the negative log-likelihood loss, with PyTorch's semantics, in float64.

``self`` is (C), (N, C) or (N, C, d1, ..., dk); ``target`` is (), (N) or (N, d1, ..., dk). Every position
of the trailing dims is a row (the class axis moved last, as PyTorch defines it). The gradient is zero
everywhere except ``out[i, t_i] = -w[t_i] * g`` for rows whose target is not ``ignore_index``, where ``g``
is ``grad[i]`` (``none``; ``grad`` has target's shape), ``grad`` (``sum``) or ``grad / total_weight`` (``mean``).
``total_weight`` defaults to the sum of ``w[t_i]`` over the rows that are not ignored.
With ``mean`` and ``total_weight == 0`` the division gives inf/NaN in non-ignored rows, as
in PyTorch; if every row is ignored the result is all zeros.
"""

from __future__ import annotations

import numpy as np

from ._common import as_f64


def _indices(target):
    """The targets as a flat int64 array. Pure math: the API validates them first (each in [0, C) or
    ``ignore_index``, :func:`xloss.kernels.nll.validate.class_indices`); an out-of-range one fails NumPy's indexing."""
    return np.asarray(target).reshape(-1).astype(np.int64)


def nll_total_weight(target, classes, weight=None, ignore_index=-100):
    """The default ``total_weight``: sum of ``weight[target]`` over rows not ignored."""
    t = _indices(target)
    w = np.ones(classes) if weight is None else as_f64(weight)
    valid = t != ignore_index
    return float(w[t[valid]].sum())


def nll_loss_grad(grad, self, target, *, weight=None, reduction="mean", ignore_index=-100, total_weight=None):
    """d NLL / d self times the upstream gradient (float64), shape of ``self``."""
    shape = np.shape(self)
    classes = shape[1] if len(shape) >= 2 else shape[0]
    t = _indices(target)
    w = np.ones(classes) if weight is None else as_f64(weight)
    valid = t != ignore_index
    rows = np.nonzero(valid)[0]
    cols = t[valid]

    g = as_f64(grad).reshape(-1)
    if reduction == "none" and len(shape) >= 2:
        g_rows = np.broadcast_to(g, t.shape)[rows]  # a scalar grad is the same for every row
    else:
        g_rows = np.full(rows.shape, g[0])
    if reduction == "mean":
        tw = nll_total_weight(target, classes, weight, ignore_index) if total_weight is None else float(total_weight)
        with np.errstate(divide="ignore", invalid="ignore"):
            g_rows = g_rows / tw

    out = np.zeros((len(t), classes))  # one row per target position; (C) input has one
    with np.errstate(invalid="ignore"):
        out[rows, cols] = w[cols] * -g_rows  # PyTorch's order: weight * (-grad / total_weight)
    if len(shape) <= 2:
        return out.reshape(shape)
    # rows are (n, d1, ..., dk) in C order: back to (N, C, d1, ..., dk)
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape[0], *shape[2:], classes), -1, 1))


def rows_view(self, target):
    """``(x, t)``: the input as (rows, C) with the class axis last and the targets flat, for (C), (N, C)
    and (N, C, d1, ..., dk) input (every position of the trailing dims is a row, as PyTorch defines it)."""
    x = as_f64(self)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    elif x.ndim > 2:
        x = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
    return x, _indices(target)


def nll_loss(self, target, *, weight=None, reduction="mean", ignore_index=-100):
    """``(loss, total_weight)`` of the negative log-likelihood loss (float64), PyTorch's ``nll_loss_forward``.

    ``loss``: ``-w[t] * self[.., t, ..]`` per position (0 where ``t == ignore_index``), target's shape
    for ``none``, else its sum, divided for ``mean`` by ``total_weight`` (NaN when that is 0).
    ``total_weight``: the sum of ``w[t]`` over the positions not ignored, 0-d; 0 for ``none`` on
    batched input (PyTorch leaves it unset there; a (C) input computes it whatever the reduction).
    """
    x, t = rows_view(self, target)
    classes = x.shape[1]
    w = np.ones(classes) if weight is None else as_f64(weight)
    valid = t != ignore_index
    rows = np.nonzero(valid)[0]
    w_t = np.zeros(t.shape)
    w_t[rows] = w[t[rows]]
    per_row = np.zeros(t.shape)
    with np.errstate(invalid="ignore"):  # 0 * -inf: NaN, as PyTorch's
        per_row[rows] = -(w_t[rows] * x[rows, t[rows]])
    batched = np.ndim(self) >= 2
    total_weight = np.asarray(0.0 if reduction == "none" and batched else w_t.sum())
    if reduction == "none":
        return per_row.reshape(np.shape(target)), total_weight
    total = per_row.sum()
    if reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.float64(total) / np.float64(total_weight)
    return np.asarray(total), total_weight
