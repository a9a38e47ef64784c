"""The public BCE-with-logits functions (exported as ``xloss.bce_with_logits`` etc.)."""

from __future__ import annotations

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .validate import bce_with_logits_args


def bce_with_logits(x, y, *, weight=None, pos_weight=None, reduction="mean", backend=None, out=None):
    """Binary cross entropy of logits ``x`` against targets ``y``, as torch's
    ``binary_cross_entropy_with_logits``: ``w ((1-y) x + (1 + (pw-1) y) softplus(-x))``, evaluated without
    overflow. ``weight`` broadcasts to x; ``pos_weight`` (the positive class's weight) too, usually a
    vector along the last (class) dimension. x's shape for ``reduction="none"``, else 0-d; x's dtype.
    """
    a = bce_with_logits_args(x, y, None, weight=weight, pos_weight=pos_weight, reduction=reduction,
                             mode="forward", out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.loss_out, kind_of(x))


def bce_with_logits_grad(x, y, grad=1.0, *, weight=None, pos_weight=None, reduction="mean", backend=None,
                         out=None):
    """Gradient of :func:`bce_with_logits` w.r.t. ``x`` times the upstream ``grad``:
    ``grad * w ((1-y) sigmoid(x) - pw y sigmoid(-x))`` (over ``x.size`` for a mean); x's shape and dtype."""
    a = bce_with_logits_args(x, y, grad, weight=weight, pos_weight=pos_weight, reduction=reduction, mode="grad",
                             grad_out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.grad_out, kind_of(x))


def bce_with_logits_with_grad(x, y, grad=1.0, *, weight=None, pos_weight=None, reduction="mean", backend=None,
                              grad_out=None):
    """``(loss, dx)`` from one pass over ``x`` and ``y``; ``grad_out``: where dx goes (x's shape and dtype)."""
    a = bce_with_logits_args(x, y, grad, weight=weight, pos_weight=pos_weight, reduction=reduction,
                             mode="forward+grad", grad_out=grad_out)
    dispatch.run(a, backend, grad_out)
    kind = kind_of(x)
    return from_numpy(a.loss_out, kind), grad_out if grad_out is not None else from_numpy(a.grad_out, kind)
