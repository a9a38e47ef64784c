"""Small helpers shared by the reference formulas."""

from __future__ import annotations

import numpy as np

REDUCTIONS = ("none", "mean", "sum")


def as_f64(a):
    """Any array-like (including ml_dtypes bfloat16) as a float64 ndarray."""
    return np.asarray(a).astype(np.float64, copy=False)


def apply_reduction(values, reduction):
    """``none`` keeps the array; ``mean``/``sum`` return a 0-d float64 array (mean of nothing is nan, as torch)."""
    if reduction == "none":
        return values
    if reduction == "sum":
        return np.asarray(values.sum(dtype=np.float64))
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(values.sum(dtype=np.float64) / values.size) if values.size else np.asarray(np.nan)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def scale_grad(dx, grad, reduction):
    """Multiply an elementwise gradient by the upstream gradient of a ``reduction``-reduced loss.

    ``none``: ``grad`` has dx's shape; ``sum``: a scalar; ``mean``: a scalar divided by the
    element count.
    """
    if reduction == "none":
        return dx * as_f64(grad)
    g = float(np.asarray(grad, dtype=np.float64).reshape(-1)[0]) if np.ndim(grad) else float(grad)
    if reduction == "mean" and dx.size:
        g = g / dx.size
    return dx * g
