"""The public focal loss functions (exported as ``xloss.focal_loss`` etc.)."""

from __future__ import annotations

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .validate import focal_args


def focal_loss(x, y, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Sigmoid focal loss of logits ``x`` against targets ``y`` (binary or soft).

    ``alpha < 0`` disables the class weighting; ``weight`` broadcasts to x (per-anchor
    weights). Returns x's shape for ``reduction="none"``, else a 0-d array/tensor, in x's dtype.
    """
    a = focal_args(x, y, None, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="forward", out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.loss_out, kind_of(x))


def focal_loss_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Gradient of :func:`focal_loss` w.r.t. ``x``, times the upstream ``grad``; x's shape and dtype."""
    a = focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="grad", grad_out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.grad_out, kind_of(x))


def focal_loss_with_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None,
                         grad_out=None):
    """``(loss, dx)`` from one pass over ``x`` and ``y``; ``grad_out``: where dx goes (x's shape and dtype)."""
    a = focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                   mode="forward+grad", grad_out=grad_out)
    dispatch.run(a, backend, grad_out)
    kind = kind_of(x)
    return from_numpy(a.loss_out, kind), grad_out if grad_out is not None else from_numpy(a.grad_out, kind)
