"""The public functions of the BCE family: ``xloss.bce_grad`` and ``xloss.binary_cross_entropy``."""

from __future__ import annotations

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .forward_validate import bce_loss_args
from .validate import bce_args

__all__ = ["bce_grad", "binary_cross_entropy"]


def bce_grad(x, y, grad=1.0, *, weight=None, reduction="mean", eps=1e-12, eps_mode="clamp", backend=None, out=None):
    """Gradient of binary cross entropy w.r.t. the probabilities ``x``.

    ``grad * weight * (x - y) / max(x(1-x), eps)`` (``eps_mode="clamp"``, PyTorch/Ascend) or
    ``/ (x(1-x) + eps)`` (``"add"``, FT78NE/MT7004); ``mean`` divides by the element count.
    """
    a = bce_args(x, y, grad, weight=weight, reduction=reduction, eps=eps, eps_mode=eps_mode, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(x))


def binary_cross_entropy(x, y, *, weight=None, reduction="mean", backend=None, out=None):
    """Binary cross entropy of probabilities ``x`` against targets ``y`` (PyTorch's):
    ``-weight * (y log x + (1-y) log(1-x))``, each log clamped at -100; ``weight`` broadcasts to x.
    Returns x's shape for ``none``, else a 0-d array/tensor (``mean``: over every element), in x's dtype.
    """
    a = bce_loss_args(x, y, weight=weight, reduction=reduction, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(x))
