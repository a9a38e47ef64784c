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

from ..kernels.focal import torch_ops
from . import _checks as checks
from . import ops

_WHAT = "xloss.torch.sigmoid_focal_loss"


def _targets_grad(inputs, targets, weight, alpha, gamma, reduction, grad):
    """d loss / d targets in torch ops (torchvision differentiates its formula w.r.t. the targets
    too; a rare need, so no kernel): with m = 1 - p_t and ce the BCE with logits,
    d/dy [a_t ce m^g] = a_t (-x m^g + g ce m^(g-1) (1 - 2p)) + (2 alpha - 1) ce m^g."""
    cdt = torch.float64 if inputs.dtype == torch.float64 else torch.float32
    x, y = inputs.detach().to(cdt), targets.detach().to(cdt)
    p = torch.sigmoid(x)
    ce = torch.nn.functional.binary_cross_entropy_with_logits(x, y, reduction="none")
    m = 1.0 - (p * y + (1.0 - p) * (1.0 - y))
    m_g = m.pow(gamma)
    # g ce m^(g-1): 0 where m = 0 (ce vanishes there too) and for gamma = 0
    slope = torch.where(m > 0, gamma * ce * m_g / torch.where(m > 0, m, 1.0), 0.0) if gamma else torch.zeros_like(m)
    d = -x * m_g + slope * (1.0 - 2.0 * p)
    if alpha >= 0:
        d = (alpha * y + (1.0 - alpha) * (1.0 - y)) * d + (2.0 * alpha - 1.0) * ce * m_g
    if weight is not None:
        d = d * weight.to(cdt)
    if reduction == "mean":
        d = d / max(x.numel(), 1)
    return (d * grad.to(cdt)).to(targets.dtype)


@checks.with_eager_twin
class _SigmoidFocalLoss(torch.autograd.Function):
    # vmap (vmap(grad(f)), jacfwd, jacrev): the generated rule runs forward, backward and jvp under
    # vmap; the ops have no batching rule, so PyTorch's fallback runs them once per entry (it warns)
    generate_vmap_rule = True

    @staticmethod
    def forward(inputs, targets, weight, alpha, gamma, reduction, backend):
        return ops.call(torch_ops.sigmoid_focal_loss_with_grad, inputs, targets, weight, alpha, gamma, reduction,
                        backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, targets, weight, alpha, gamma, reduction, _ = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # else autograd builds a zero gradient for dx: a pass over x's size
        ctx.params = (alpha, gamma, reduction)
        if ctx.needs_input_grad[1]:  # torchvision's targets may require grad: keep what d/dtargets needs
            ctx.save_for_backward(output[1], x, targets, weight)
        elif checks.functorch_active():  # the second-order guard needs x
            ctx.save_for_backward(output[1], x)
        else:
            ctx.save_for_backward(output[1])

    @staticmethod
    @checks.first_order_only(_WHAT)
    def backward(ctx, grad, _):
        if grad is None:  # no gradient reached the loss (grads are not materialised)
            return (None,) * 7
        dx, *rest = ctx.saved_tensors
        eager_cpu = grad.device.type == "cpu" and not (torch.compiler.is_compiling() or checks.functorch_active())
        g = checks.scalar_value(grad) if eager_cpu else None
        gx = checks.scaled(dx, g) if g is not None else dx * grad  # eager: no pass over memory for an upstream 1
        if rest:
            gx = checks.first_order_result(_WHAT, gx, rest[0])
        gy = None
        if ctx.needs_input_grad[1]:
            _, targets, weight = rest
            gy = checks.first_order_result(_WHAT, _targets_grad(rest[0], targets, weight, *ctx.params, grad), rest[0])
        return gx, gy, None, None, None, None, None

    @staticmethod
    def jvp_saved(inputs, output):
        """What ``jvp_rule`` reads, saved only in forward mode (x and targets are not kept otherwise)."""
        x, targets, weight = inputs[:3]
        return output[1], x, targets, weight

    @staticmethod
    def jvp_rule(ctx, t_inputs, t_targets, *_):
        """Forward mode: the loss is elementwise, so its tangent is ``dx * t_inputs`` (plus the
        targets' derivative times theirs), reduced as the loss is; ``dx`` (upstream 1) came from
        the forward's kernel pass and already holds ``mean``'s division."""
        dx, x, targets, weight = ctx.saved_tensors
        alpha, gamma, reduction = ctx.params
        cdt = torch.float64 if dx.dtype == torch.float64 else torch.float32
        per = 0.0
        if t_inputs is not None:
            per = dx.to(cdt) * t_inputs.to(cdt)
        if t_targets is not None:
            dy = _targets_grad(x, targets, weight, alpha, gamma, reduction, torch.ones((), dtype=cdt))
            per = per + dy.to(cdt) * t_targets.to(cdt)
        like = dx.new_empty(dx.shape if reduction == "none" else ())
        if not isinstance(per, torch.Tensor):  # no tangent reached this call
            return torch.zeros_like(like), None
        return checks.reduce_tangent(per, reduction, like), None


def sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none", *,
                       weight=None, backend=None):
    """Focal loss of RetinaNet (torchvision.ops.sigmoid_focal_loss), forward and backward on an xloss backend.

    ``inputs``: logits of any shape, float16/bfloat16/float32/float64 (computed in float32 or
    wider, returned in the inputs' dtype; float32 under CPU autocast, as torchvision's formula).
    ``targets``: same shape, binary or soft in [0, 1] (any float, int or bool dtype). As in
    torchvision, targets may require grad: their gradient is computed with torch operations (the
    kernel gives d/dinputs).
    ``alpha < 0`` disables the class weighting. ``weight``: optional per-element weight
    broadcastable to ``inputs`` (constant). ``reduction``: ``"none" | "mean" | "sum"``
    (anything else: ``ValueError("Invalid value for arg 'reduction' ...")`` as torchvision).
    ``backend``: an xloss backend name or object (default: ``cpu`` where available).

    A ``torch.library`` custom op underneath (``torch.ops.xloss.sigmoid_focal_loss*``):
    ``torch.compile(fullgraph=True)`` and ``torch.func.grad`` trace through it.
    """
    inputs = checks.float_tensor(inputs, "inputs", backend)
    targets = checks.same_device(checks.tensor(targets, "targets", backend), "targets", inputs, "inputs")
    if targets.shape != inputs.shape:
        raise checks.XLossValueError(f"targets must have the shape of inputs {checks.shape_str(inputs.shape)}; "
                                     f"got {checks.shape_str(targets.shape)}")
    if weight is not None:
        weight = checks.same_device(checks.float_tensor(weight, "weight", backend), "weight", inputs, "inputs")
        checks.no_grad_required(weight, "weight", "sigmoid_focal_loss gives no gradient w.r.t. the weight")
    reduction = checks.reduction_torchvision(reduction)
    # under CPU autocast: float32, as torchvision's formula (binary_cross_entropy_with_logits) gives
    inputs, targets, weight = (checks.autocast_float32(t) for t in (inputs, targets, weight))
    key = ops.backend_key(backend)
    if not checks.wants_derivative(inputs, targets):
        return ops.call(torch_ops.sigmoid_focal_loss, inputs, targets, weight, alpha, gamma, reduction, key)
    if not (targets.requires_grad or checks.has_tangent(targets)):
        targets = targets.detach()
    return _SigmoidFocalLoss.call(inputs, targets, weight, alpha, gamma, reduction, key)[0]


class SigmoidFocalLoss(torch.nn.Module):
    """:func:`sigmoid_focal_loss` as a module:
    ``SigmoidFocalLoss(alpha, gamma, reduction, backend=...)(inputs, targets)``."""

    def __init__(self, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none", *, backend=None):
        super().__init__()
        self.alpha, self.gamma, self.backend = alpha, gamma, backend
        self.reduction = checks.reduction_torchvision(reduction)

    def forward(self, inputs, targets, weight=None):
        return sigmoid_focal_loss(inputs, targets, self.alpha, self.gamma, self.reduction, weight=weight,
                                  backend=self.backend)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, gamma={self.gamma}, reduction={self.reduction!r}, backend={self.backend!r}"
