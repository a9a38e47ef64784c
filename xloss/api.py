"""The public kernel functions: validate, pick the backend, run, hand back in the caller's container."""

from __future__ import annotations

from . import dispatch, validation
from .containers import from_numpy, kind_of

__all__ = [
    "focal_loss", "focal_loss_grad", "focal_loss_with_grad", "bce_grad", "nll_loss_grad",
]


def focal_loss(x, y, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Sigmoid focal loss of logits ``x`` against targets ``y`` (binary or soft).

    ``alpha < 0`` disables the class weighting; ``weight`` broadcasts to x (per-anchor
    weights). Returns x's shape for ``reduction="none"``, else a 0-d array/tensor, in x's dtype.
    """
    a = validation.focal_args(x, y, None, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="forward", out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.loss_out, kind_of(x))


def focal_loss_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Gradient of :func:`focal_loss` w.r.t. ``x``, times the upstream ``grad``; x's shape and dtype."""
    a = validation.focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="grad", grad_out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.grad_out, kind_of(x))


def focal_loss_with_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None):
    """``(loss, dx)`` from one pass over ``x`` and ``y``."""
    a = validation.focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="forward+grad")
    dispatch.run(a, backend)
    kind = kind_of(x)
    return from_numpy(a.loss_out, kind), from_numpy(a.grad_out, kind)


def bce_grad(x, y, grad=1.0, *, weight=None, reduction="mean", eps=1e-12, eps_mode="clamp", backend=None, out=None):
    """Gradient of binary cross entropy w.r.t. the probabilities ``x``.

    ``grad * weight * (x - y) / max(x(1-x), eps)`` (``eps_mode="clamp"``, PyTorch/Ascend) or
    ``/ (x(1-x) + eps)`` (``"add"``, FT78NE/MT7004); ``mean`` divides by the element count.
    """
    a = validation.bce_args(x, y, grad, weight=weight, reduction=reduction, eps=eps, eps_mode=eps_mode, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(x))


def nll_loss_grad(grad, self, target, *, weight=None, reduction="mean", ignore_index=-100, total_weight=None,
                  backend=None, out=None):
    """Backward of NLL loss w.r.t. the log-probabilities ``self`` ((N, C) or (C)); PyTorch semantics."""
    a = validation.nll_args(grad, self, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                            total_weight=total_weight, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(self))
