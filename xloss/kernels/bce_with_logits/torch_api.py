"""``xloss.torch.binary_cross_entropy_with_logits`` and ``BCEWithLogitsLoss``: torch's, with the loss and
d loss/d input from one xloss kernel pass.

With grad enabled the forward runs the ``forward+grad`` kernel (upstream gradient 1) and saves only
``dx``; the backward scales it by the upstream gradient (linear in it: an elementwise product for
``reduction="none"``, nothing at all for the scalar 1 that ``loss.backward()`` hands down). As in torch,
``target`` may require grad (its gradient, rarely wanted, comes from torch operations on x and y saved
for it only); ``weight`` and ``pos_weight`` may not (torch refuses them too).
"""

from __future__ import annotations

import torch

_WHAT = "xloss.torch.binary_cross_entropy_with_logits"


# The entry points come first, xloss.torch (and torch_ops, which imports it) after them: xloss.torch's own
# import reads them (the row's torch_exports), so importing this module first must have them defined by then.

def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's deprecated ``size_average``/``reduce`` pair, read as torch reads it."""
    if size_average is None and reduce is None:
        return reduction
    return torch.nn.modules.loss._Reduction.legacy_get_string(size_average, reduce)


def _constant(t, name, input, backend):
    if t is None:
        return None
    t = checks.same_device(checks.float_tensor(t, name, backend), name, input, "input")
    checks.no_grad_required(t, name, f"binary_cross_entropy_with_logits gives no gradient w.r.t. {name} (as torch)")
    return t


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None, *, backend=None):
    """``torch.nn.functional.binary_cross_entropy_with_logits`` with the loss and its gradient from one
    xloss kernel pass.

    ``input``: logits, float16/bfloat16/float32/float64 (computed in float32 or wider, returned in
    input's dtype; float32 under CPU autocast, as torch's). ``target``: input's shape (any real
    values, as torch; may require grad). ``weight``: broadcastable to input; ``pos_weight``: the
    positive class's weight, broadcastable to input (usually one per class, along the last dimension);
    both constants, taken in input's dtype. ``reduction``: ``"none" | "mean" | "sum"`` (the deprecated
    ``size_average``/``reduce`` as torch reads them). ``backend``: an xloss backend name or object
    (default: ``cpu`` where available). A ``torch.library`` custom op underneath
    (``torch.ops.xloss.bce_with_logits*``): ``torch.compile(fullgraph=True)`` traces through it.
    """
    input = checks.float_tensor(input, "input", backend)
    target = checks.same_device(checks.tensor(target, "target", backend), "target", input, "input")
    if target.shape != input.shape:
        raise checks.XLossValueError(f"Target size ({checks.shape_str(target.shape)}) must be the same as input "
                                     f"size ({checks.shape_str(input.shape)})")
    weight = _constant(weight, "weight", input, backend)
    pos_weight = _constant(pos_weight, "pos_weight", input, backend)
    reduction = checks.reduction(_legacy_reduction(size_average, reduce, reduction))
    # under CPU autocast: float32, as torch's binary_cross_entropy_with_logits gives
    input, target, weight, pos_weight = (checks.autocast_float32(t) for t in (input, target, weight, pos_weight))
    key = ops.backend_key(backend)
    if not checks.wants_derivative(input, target):
        return ops.call(torch_ops.bce_with_logits, input, target, weight, pos_weight, reduction, key)
    if not (target.requires_grad or checks.has_tangent(target)):
        target = target.detach()
    return _BCEWithLogits.call(input, target, weight, pos_weight, reduction, key)[0]


class BCEWithLogitsLoss(torch.nn.Module):
    """:func:`binary_cross_entropy_with_logits` as a module (``torch.nn.BCEWithLogitsLoss`` with ``backend=``):
    ``weight`` and ``pos_weight`` are buffers, as torch's."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None, *,
                 backend=None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.reduction = checks.reduction(_legacy_reduction(size_average, reduce, reduction))
        self.backend = backend

    def forward(self, input, target):
        return binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                pos_weight=self.pos_weight, backend=self.backend)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, backend={self.backend!r}"


from xloss.torch import ops  # noqa: E402 (see above)
from xloss.torch.ops import checks  # noqa: E402

from . import torch_ops  # noqa: E402


def _compute(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _target_derivative(x, y, weight, pos_weight, reduction):
    """d loss/d target per element (``mean``'s division included), with torch operations: with
    sp = softplus(-x) = -log sigmoid(x), ``w (-x + (pw - 1) sp)``."""
    cdt = _compute(x)
    xc = x.detach().to(cdt)
    d = -xc
    if pos_weight is not None:
        d = d + (pos_weight.to(cdt) - 1.0) * torch.nn.functional.softplus(-xc)
    if weight is not None:
        d = d * weight.to(cdt)
    if reduction == "mean" and xc.numel():
        d = d / xc.numel()
    return d.expand(x.shape)


@checks.with_eager_twin
class _BCEWithLogits(torch.autograd.Function):
    # vmap (vmap(grad(f)), jacfwd, jacrev): the generated rule runs forward, backward and jvp under
    # vmap; the ops have no batching rule, so PyTorch's fallback runs them once per entry (it warns)
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y, weight, pos_weight, reduction, backend):
        return ops.call(torch_ops.bce_with_logits_with_grad, x, y, weight, pos_weight, reduction, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, weight, pos_weight, reduction, _ = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # else autograd builds a zero gradient for dx: a pass over x's size
        ctx.reduction = reduction
        if ctx.needs_input_grad[1]:  # the target's gradient (rare) needs x and the weights
            ctx.save_for_backward(output[1], x, y, weight, pos_weight)
        elif checks.functorch_active():  # the second-order guard needs x
            ctx.save_for_backward(output[1], x)
        else:
            ctx.save_for_backward(output[1])

    @staticmethod
    @checks.first_order_only(_WHAT)
    def backward(ctx, grad, _):
        if grad is None:  # no gradient reached the loss (grads are not materialised)
            return (None,) * 6
        dx, *rest = ctx.saved_tensors
        eager_cpu = grad.device.type == "cpu" and not (torch.compiler.is_compiling() or checks.functorch_active())
        g = checks.scalar_value(grad) if eager_cpu else None
        gx = checks.scaled(dx, g) if g is not None else dx * grad  # eager: no pass over memory for an upstream 1
        gy = None
        if rest:
            gx = checks.first_order_result(_WHAT, gx, rest[0])
        if ctx.needs_input_grad[1]:
            x, y, weight, pos_weight = rest
            dy = _target_derivative(x, y, weight, pos_weight, ctx.reduction) * grad.to(_compute(x))
            gy = checks.first_order_result(_WHAT, dy.to(y.dtype), x)
        return gx, gy, None, None, None, None

    @staticmethod
    def jvp_saved(inputs, output):
        """What ``jvp_rule`` reads, saved only in forward mode."""
        x, y, weight, pos_weight = inputs[:4]
        return output[1], x, weight, pos_weight

    @staticmethod
    def jvp_rule(ctx, t_x, t_y, *_):
        """Forward mode: the loss is elementwise, so its tangent is ``dx * t_x`` (plus the target's
        derivative times its tangent), reduced as the loss is; ``dx`` (upstream 1) came from the forward's
        kernel pass and already holds ``mean``'s division."""
        dx, x, weight, pos_weight = ctx.saved_tensors
        cdt = _compute(dx)
        like = dx.new_empty(dx.shape if ctx.reduction == "none" else ())
        per = dx.to(cdt) * t_x.to(cdt) if t_x is not None else torch.zeros(dx.shape, dtype=cdt)
        if t_y is not None:
            per = per + _target_derivative(x, None, weight, pos_weight, ctx.reduction) * t_y.to(cdt)
        return checks.reduce_tangent(per, ctx.reduction, like), None


