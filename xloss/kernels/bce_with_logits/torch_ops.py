"""BCE with logits as ``torch.library`` custom ops (see :mod:`xloss.torch.ops`):
``torch.ops.xloss.bce_with_logits`` (the loss) and ``..._with_grad`` (the loss and d loss/d input for
upstream gradient 1, from one pass); :mod:`.torch_api` builds the autograd function on them."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.torch import grad_buffers
from xloss.torch.ops import backend_of, register_op

from . import api


@custom_op("xloss::bce_with_logits", mutates_args=())
def bce_with_logits(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                    pos_weight: torch.Tensor | None, reduction: str, backend: str | None) -> torch.Tensor:
    """Loss only (no gradient needed)."""
    return api.bce_with_logits(input, target, weight=weight, pos_weight=pos_weight, reduction=reduction,
                               backend=backend_of(backend))


@bce_with_logits.register_fake
def _(input, target, weight, pos_weight, reduction, backend):
    return input.new_empty(input.shape if reduction == "none" else ())


@custom_op("xloss::bce_with_logits_with_grad", mutates_args=())
def bce_with_logits_with_grad(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                              pos_weight: torch.Tensor | None, reduction: str,
                              backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, dx)`` from one pass, dx for upstream gradient 1 (the backward scales it); ``dx`` comes from
    :mod:`xloss.torch.grad_buffers` (reused once nothing holds it)."""
    return api.bce_with_logits_with_grad(input, target, 1.0, weight=weight, pos_weight=pos_weight,
                                         reduction=reduction, backend=backend_of(backend),
                                         grad_out=grad_buffers.empty(input.shape, input.dtype))


@bce_with_logits_with_grad.register_fake
def _(input, target, weight, pos_weight, reduction, backend):
    return input.new_empty(input.shape if reduction == "none" else ()), torch.empty_like(input)


register_op(bce_with_logits, bce_with_logits_with_grad)
