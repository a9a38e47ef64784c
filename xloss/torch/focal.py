"""Sigmoid focal loss for autograd: torchvision's signature, an xloss kernel on each side.

With grad enabled the forward runs ``xloss.focal_loss_with_grad`` (loss and gradient from one
pass over inputs and targets, upstream gradient 1) and saves only ``dx``; the backward scales
it by the upstream gradient. The gradient is linear in the upstream gradient, so
``dx(1) * g`` is the gradient for any ``g`` (an elementwise product for ``reduction="none"``,
skipped entirely when the upstream is the scalar 1 or an expanded 1, as ``loss.sum()``
hands down). Nothing else is kept between forward and backward: no sigmoid, no BCE term,
no ``(1 - p_t) ** gamma``, which is what makes generated autograd slow and memory hungry.
"""

from __future__ import annotations

import torch

from .. import api
from . import _checks as C


class _SigmoidFocalLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, targets, weight, alpha, gamma, reduction, backend):
        kw = dict(alpha=alpha, gamma=gamma, weight=weight, reduction=reduction, backend=backend)
        if not ctx.needs_input_grad[0]:
            return api.focal_loss(inputs, targets, **kw)
        loss, dx = api.focal_loss_with_grad(inputs, targets, 1.0, **kw)
        ctx.reduction = reduction
        ctx.save_for_backward(dx)
        return loss

    @staticmethod
    @C.first_order_only("xloss.torch.sigmoid_focal_loss")
    def backward(ctx, grad):
        (dx,) = ctx.saved_tensors
        g = C.scalar_value(grad)
        if g is not None:
            return C.scaled(dx, g), None, None, None, None, None, None
        return dx * grad, None, None, None, None, None, None


def sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none", *,
                       weight=None, backend=None):
    """Focal loss of RetinaNet (torchvision.ops.sigmoid_focal_loss), forward and backward on an xloss backend.

    ``inputs``: logits of any shape, float16/bfloat16/float32/float64 (computed in float32 or
    wider, returned in the inputs' dtype). ``targets``: same shape, binary or soft in [0, 1]
    (any float, int or bool dtype; they are constants: no gradient flows to them).
    ``alpha < 0`` disables the class weighting. ``weight``: optional per-element weight
    broadcastable to ``inputs`` (constant). ``reduction``: ``"none" | "mean" | "sum"``.
    ``backend``: an xloss backend name or object (default: ``cpu`` where available).
    """
    inputs = C.float_tensor(inputs, "inputs")
    targets = C.tensor(targets, "targets")
    if targets.shape != inputs.shape:
        raise C.XLossValueError(f"targets must have the shape of inputs {C.shape_str(inputs.shape)}; "
                                f"got {C.shape_str(targets.shape)}")
    C.no_grad_required(targets, "targets", "sigmoid_focal_loss gives no gradient w.r.t. the targets")
    if weight is not None:
        weight = C.float_tensor(weight, "weight")
        C.no_grad_required(weight, "weight", "sigmoid_focal_loss gives no gradient w.r.t. the weight")
    reduction = C.reduction(reduction)
    return _SigmoidFocalLoss.apply(inputs, targets.detach(), weight, alpha, gamma, reduction, backend)


class SigmoidFocalLoss(torch.nn.Module):
    """:func:`sigmoid_focal_loss` as a module:
    ``SigmoidFocalLoss(alpha, gamma, reduction, backend=...)(inputs, targets)``."""

    def __init__(self, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none", *, backend=None):
        super().__init__()
        self.alpha, self.gamma, self.reduction, self.backend = alpha, gamma, C.reduction(reduction), backend

    def forward(self, inputs, targets, weight=None):
        return sigmoid_focal_loss(inputs, targets, self.alpha, self.gamma, self.reduction, weight=weight,
                                  backend=self.backend)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, gamma={self.gamma}, reduction={self.reduction!r}, backend={self.backend!r}"
