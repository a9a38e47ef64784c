"""Gradient of binary cross entropy with respect to the probabilities, in float64.

``dx = grad * weight * (x - y) / denom`` where ``denom`` is

* ``max(x*(1-x), eps)`` (``eps_mode="clamp"``: PyTorch and Ascend), or
* ``x*(1-x) + eps``      (``eps_mode="add"``: the FT78NE/MT7004 manual, seed 001).

``mean`` also divides by the element count.
"""

from __future__ import annotations

import numpy as np

from ._common import apply_reduction, as_f64, scale_grad


def bce_denominator(x, eps=1e-12, eps_mode="clamp"):
    x = as_f64(x)
    if eps_mode == "clamp":
        return np.maximum(x * (1.0 - x), eps)
    if eps_mode == "add":
        return x * (1.0 - x) + eps
    raise ValueError(f"eps_mode must be 'clamp' or 'add' (validated by the API); got {eps_mode!r}")


def bce_grad(x, y, grad=1.0, *, weight=None, reduction="mean", eps=1e-12, eps_mode="clamp"):
    """d BCE(x, y) / dx times the upstream gradient (float64), shape of x."""
    x, y = as_f64(x), as_f64(y)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dx = (x - y) / bce_denominator(x, eps, eps_mode)
    if weight is not None:
        dx = dx * as_f64(weight)
    return scale_grad(np.broadcast_to(dx, x.shape), grad, reduction)


def binary_cross_entropy(x, y, *, weight=None, reduction="mean"):
    """The forward loss ``-w (y log x + (1-y) log(1-x))`` with PyTorch's log clamp at -100."""
    x, y = as_f64(x), as_f64(y)
    with np.errstate(divide="ignore"):
        log_x = np.maximum(np.log(x), -100.0)
        log_1mx = np.maximum(np.log1p(-x), -100.0)
    loss = -(y * log_x + (1.0 - y) * log_1mx)
    if weight is not None:
        loss = loss * as_f64(weight)
    return apply_reduction(np.broadcast_to(loss, x.shape), reduction)
