"""Focal loss as ``torch.library`` custom ops (see :mod:`xloss.torch.ops`)."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.torch import grad_buffers
from xloss.torch.ops import backend_of, register_op

from . import api


@custom_op("xloss::sigmoid_focal_loss", mutates_args=())
def sigmoid_focal_loss(inputs: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None, alpha: float,
                       gamma: float, reduction: str, backend: str | None) -> torch.Tensor:
    """Loss only (no gradient needed)."""
    return api.focal_loss(inputs, targets, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                          backend=backend_of(backend))


@sigmoid_focal_loss.register_fake
def _(inputs, targets, weight, alpha, gamma, reduction, backend):
    return inputs.new_empty(inputs.shape if reduction == "none" else ())


@custom_op("xloss::sigmoid_focal_loss_with_grad", mutates_args=())
def sigmoid_focal_loss_with_grad(inputs: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None,
                                 alpha: float, gamma: float, reduction: str,
                                 backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, dx)`` from one pass, dx for upstream gradient 1 (the backward scales it); ``dx`` comes from
    :mod:`xloss.torch.grad_buffers` (reused once nothing holds it)."""
    return api.focal_loss_with_grad(inputs, targets, 1.0, alpha=alpha, gamma=gamma, weight=weight,
                                    reduction=reduction, backend=backend_of(backend),
                                    grad_out=grad_buffers.empty(inputs.shape, inputs.dtype))


@sigmoid_focal_loss_with_grad.register_fake
def _(inputs, targets, weight, alpha, gamma, reduction, backend):
    return inputs.new_empty(inputs.shape if reduction == "none" else ()), torch.empty_like(inputs)


register_op(sigmoid_focal_loss, sigmoid_focal_loss_with_grad)
