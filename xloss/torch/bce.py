"""Binary cross entropy on probabilities, forward and backward on an xloss backend.

Both run as ``torch.library`` custom ops (:mod:`xloss.kernels.bce.torch_ops`). The forward is
``xloss.binary_cross_entropy`` (PyTorch's ``-w (y log x + (1-y) log(1-x))``, each log clamped at
-100, summed in float32 or wider); it saves the inputs, and the backward is
``xloss.bce_grad``: ``g * w * (x - y) / max(x(1-x), eps)`` (``eps_mode="clamp"``, PyTorch and
Ascend) or ``/ (x(1-x) + eps)`` (``"add"``, the FT78NE/MT7004 form).
"""

from __future__ import annotations

import torch

from ..kernels.bce import ROW
from ..kernels.bce import torch_ops as bce_ops
from ..validation import real_number
from . import _checks as checks
from . import ops

_WHAT = "xloss.torch.binary_cross_entropy"


@checks.with_eager_twin
class _BinaryCrossEntropy(torch.autograd.Function):
    # vmap (vmap(grad(f)), jacfwd, jacrev): the generated rule runs forward, backward and jvp under
    # vmap; the ops have no batching rule, so PyTorch's fallback runs them once per entry (it warns)
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y, weight, reduction, eps, eps_mode, backend):
        return ops.call(bce_ops.binary_cross_entropy, x, y, weight, reduction, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, weight, reduction, eps, eps_mode, backend = inputs
        ctx.params = (reduction, eps, eps_mode, backend)
        ctx.save_for_backward(x, y, weight)
        ctx.save_for_forward(x, y, weight)

    @staticmethod
    @checks.first_order_only(_WHAT)
    def backward(ctx, grad):
        x, y, weight = ctx.saved_tensors
        # detached: under torch.func the op must not see tensors tracked at the transform's level
        dx = ops.call(bce_ops.binary_cross_entropy_backward, grad.detach(), x.detach(), y, weight, *ctx.params)
        return checks.first_order_result(_WHAT, dx, x), None, None, None, None, None, None

    @staticmethod
    def jvp_rule(ctx, t_x, *_):
        """Forward mode: the loss is elementwise, so its tangent is the backward kernel's ``dx``
        for upstream 1 (``mean``'s division included) times ``t_x``, reduced as the loss is."""
        x, y, weight = ctx.saved_tensors
        reduction = ctx.params[0]
        like = x.new_empty(x.shape if reduction == "none" else ())
        if t_x is None:
            return torch.zeros_like(like)
        one = torch.ones((), dtype=x.dtype)
        dx = ops.call(bce_ops.binary_cross_entropy_backward, one, x.detach(), y, weight, *ctx.params)
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        return checks.reduce_tangent(dx.to(cdt) * t_x.to(cdt), reduction, like)


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean", *, eps: float = 1e-12,
                         eps_mode: str = "clamp", backend=None):
    """``torch.nn.functional.binary_cross_entropy`` whose backward runs on an xloss backend.

    ``input``: probabilities in [0, 1] (float16/bfloat16/float32/float64); ``target``: same
    shape (constant); ``weight``: optional, broadcastable to ``input`` (constant). ``eps`` and
    ``eps_mode`` select the gradient's denominator (``"clamp"``: PyTorch's; ``"add"``: what
    the FT78NE/MT7004 library implements — pass it to run on those backends).
    """
    input = checks.float_tensor(input, "input", backend)
    target = checks.same_device(checks.tensor(target, "target", backend), "target", input, "input")
    if target.shape != input.shape:
        raise checks.XLossValueError(f"target must have the shape of input {checks.shape_str(input.shape)}; "
                                     f"got {checks.shape_str(target.shape)}")
    checks.no_grad_required(target, "target", "binary_cross_entropy gives no gradient w.r.t. the target")
    if weight is not None:
        weight = checks.same_device(checks.float_tensor(weight, "weight", backend), "weight", input, "input")
        checks.no_grad_required(weight, "weight", "binary_cross_entropy gives no gradient w.r.t. the weight")
        try:
            ok = torch.broadcast_shapes(weight.shape, input.shape) == input.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise checks.XLossValueError(f"weight of shape {checks.shape_str(weight.shape)} does not broadcast to "
                                         f"input {checks.shape_str(input.shape)}")
    reduction = checks.reduction(reduction)
    if eps_mode not in ROW.axes["eps_mode"]:
        raise checks.XLossValueError(f"eps_mode must be 'clamp' (max(x(1-x), eps)) or 'add' (x(1-x) + eps); "
                                     f"got {eps_mode!r}")
    eps = real_number(eps, "eps")
    if eps < 0:
        raise checks.XLossValueError(f"eps must be >= 0; got {eps}")
    # under CPU autocast: float32, as torch's binary_cross_entropy gives
    input, target, weight = (checks.autocast_float32(t) for t in (input, target, weight))
    # the [0, 1] check needs the data: it runs inside the op (no graph break under torch.compile)
    key = ops.backend_key(backend)
    if not checks.wants_derivative(input):
        return ops.call(bce_ops.binary_cross_entropy, input, target, weight, reduction, key)
    return _BinaryCrossEntropy.call(input, target.detach(), weight, reduction, eps, eps_mode, key)


class BCELoss(torch.nn.Module):
    """:func:`binary_cross_entropy` as a module (``torch.nn.BCELoss`` with ``backend=``)."""

    def __init__(self, weight=None, reduction: str = "mean", *, eps: float = 1e-12, eps_mode: str = "clamp",
                 backend=None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.reduction, self.eps, self.eps_mode, self.backend = checks.reduction(reduction), eps, eps_mode, backend

    def forward(self, input, target):
        return binary_cross_entropy(input, target, self.weight, self.reduction, eps=self.eps,
                                    eps_mode=self.eps_mode, backend=self.backend)
