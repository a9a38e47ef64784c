"""The BCE custom ops (``torch.ops.xloss.binary_cross_entropy`` and ``..._backward``), registered with
:func:`xloss.torch.ops.register_op`; :mod:`xloss.torch.bce` builds the autograd function on them."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.errors import UnsupportedRequestError, XLossValueError
from xloss.torch import grad_buffers
from xloss.torch.ops import backend_of, compute_dtype, register_op, scalar_or

from .api import bce_grad
from .api import binary_cross_entropy as forward_api


def _check_probabilities(x: torch.Tensor) -> None:
    if not x.numel():
        return
    low, high = torch.aminmax(x)  # one pass (the comparisons and their `&` took four); NaN fails both tests
    if not (bool(low >= 0) and bool(high <= 1)):
        raise XLossValueError("input must hold probabilities in [0, 1] (every element); "
                              "use binary_cross_entropy_with_logits for logits")


def _reduce(values: torch.Tensor, reduction: str, dtype: torch.dtype) -> torch.Tensor:
    if reduction == "none":
        return values.to(dtype)
    total = values.sum(dtype=torch.float64)
    if reduction == "mean":
        total = total / values.numel() if values.numel() else torch.tensor(float("nan"), dtype=torch.float64)
    return total.to(dtype)


@custom_op("xloss::binary_cross_entropy", mutates_args=())
def binary_cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                         reduction: str, backend: str | None = None) -> torch.Tensor:
    """The forward kernel on the backend (``xloss.binary_cross_entropy``); checks the [0, 1] domain."""
    _check_probabilities(input)
    try:
        return forward_api(input, target, weight=weight, reduction=reduction, backend=backend_of(backend))
    except UnsupportedRequestError:  # a backend without the forward kernel: PyTorch's formula, as before it
        return _formula(input, target, weight, reduction)


def _formula(input, target, weight, reduction):
    """PyTorch's formula (each log clamped at -100) in float32 or wider, for backends without the forward kernel."""
    cdt = compute_dtype(input.dtype)
    x, y = input.to(cdt), target.to(cdt)
    loss = -(y * torch.log(x).clamp_min(-100.0) + (1.0 - y) * torch.log1p(-x).clamp_min(-100.0))
    if weight is not None:
        loss = loss * weight.to(cdt)
    return _reduce(loss, reduction, input.dtype)


@binary_cross_entropy.register_fake
def _(input, target, weight, reduction, backend=None):
    return input.new_empty(input.shape if reduction == "none" else ())


@custom_op("xloss::binary_cross_entropy_backward", mutates_args=())
def binary_cross_entropy_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                                  weight: torch.Tensor | None, reduction: str, eps: float, eps_mode: str,
                                  backend: str | None) -> torch.Tensor:
    """d loss / d input (``xloss.bce_grad``), from :mod:`xloss.torch.grad_buffers` (reused once nothing holds it)."""
    return bce_grad(input, target, scalar_or(grad), weight=weight, reduction=reduction, eps=eps,
                    eps_mode=eps_mode, backend=backend_of(backend), out=grad_buffers.empty(input.shape, input.dtype))


@binary_cross_entropy_backward.register_fake
def _(grad, input, target, weight, reduction, eps, eps_mode, backend):
    return torch.empty_like(input)


register_op(binary_cross_entropy, binary_cross_entropy_backward)
