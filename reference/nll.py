"""Backward of the negative log-likelihood loss, with PyTorch's semantics, in float64.

``self`` is (N, C) or (C); ``target`` is (N) or (). The gradient is zero everywhere except
``out[i, t_i] = -w[t_i] * g`` for rows whose target is not ``ignore_index``, where ``g`` is
``grad[i]`` (``none``), ``grad`` (``sum``) or ``grad / total_weight`` (``mean``).
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
    classes = shape[-1]
    t = _indices(target)
    w = np.ones(classes) if weight is None else as_f64(weight)
    valid = t != ignore_index
    rows = np.nonzero(valid)[0]
    cols = t[valid]

    g = as_f64(grad).reshape(-1)
    if reduction == "none" and len(shape) == 2:
        g_rows = np.broadcast_to(g, t.shape)[rows]  # a scalar grad is the same for every row
    else:
        g_rows = np.full(rows.shape, g[0])
    if reduction == "mean":
        tw = nll_total_weight(target, classes, weight, ignore_index) if total_weight is None else float(total_weight)
        with np.errstate(divide="ignore", invalid="ignore"):
            g_rows = g_rows / tw

    out = np.zeros((len(t), classes))  # one row per target; (C) input has one
    with np.errstate(invalid="ignore"):
        out[rows, cols] = w[cols] * -g_rows  # PyTorch's order: weight * (-grad / total_weight)
    return out.reshape(shape)
