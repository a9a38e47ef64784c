"""Negative log-likelihood loss, forward (``xloss.nll_loss``) and backward (``xloss.nll_loss_grad``) on an
xloss backend.

The forward kernel gathers ``-weight[t] * input[i, t]`` (rows whose target is ``ignore_index`` give 0),
summing in float32 or wider, and returns ``total_weight`` (the sum of ``weight[t]`` over rows not
ignored) for ``mean``; the backward hands both to the kernel, which writes the one nonzero per row.
(N, C, d1, ..., dk) input runs both kernels as it is (a backend whose backward takes (N, C) only gets the
positions as rows, the class axis last: ``xloss.kernels.nll.torch_ops``).
"""

from __future__ import annotations

import torch

from ..kernels.nll import torch_ops as nll_ops
from . import _checks as checks
from . import ops

_WHAT = "xloss.torch.nll_loss"


@checks.with_eager_twin
class _NLLLoss(torch.autograd.Function):
    # vmap (vmap(grad(f)), jacfwd, jacrev): the generated rule runs forward, backward and jvp under
    # vmap; the ops have no batching rule, so PyTorch's fallback runs them once per entry (it warns)
    generate_vmap_rule = True

    @staticmethod
    def forward(x, target, weight, ignore_index, reduction, backend):
        return ops.call(nll_ops.nll_loss_forward, x, target, weight, ignore_index, reduction, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, target, weight, ignore_index, reduction, backend = inputs
        ctx.params = (ignore_index, reduction, backend)
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # total_weight's gradient stays None
        ctx.save_for_backward(x, target, weight, output[1])
        ctx.save_for_forward(target, weight)

    @staticmethod
    @checks.first_order_only(_WHAT)
    def backward(ctx, grad, _):
        if grad is None:  # no gradient reached the loss (grads are not materialised)
            return (None,) * 6
        x, target, weight, total_weight = ctx.saved_tensors
        # detached: under torch.func the op must not see tensors tracked at the transform's level
        dx = ops.call(nll_ops.nll_loss_backward, grad.detach(), x.detach(), target, weight, total_weight, *ctx.params)
        return checks.first_order_result(_WHAT, dx, x), None, None, None, None, None

    @staticmethod
    def jvp_rule(ctx, t_x, *_):
        """Forward mode: the loss is linear in the input, so its tangent is the same forward applied
        to ``t_x`` (same targets, weights and ``mean`` divisor); total_weight has none."""
        target, weight = ctx.saved_tensors
        ignore_index, reduction, backend = ctx.params
        if t_x is None:
            return None, None
        return ops.call(nll_ops.nll_loss_forward, t_x, target, weight, ignore_index, reduction, backend)[0], None


def _nll(input, target, weight, ignore_index, reduction, key):
    if checks.wants_derivative(input):
        return _NLLLoss.call(input, target, weight, ignore_index, reduction, key)[0]
    return ops.call(nll_ops.nll_loss_forward, input, target, weight, ignore_index, reduction, key)[0]


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean", *, backend=None):
    """``torch.nn.functional.nll_loss`` on (N, C), (C) or (N, C, d1, ..., dk) log-probabilities,
    backward on an xloss backend (``torch.ops.xloss.nll_loss_*`` custom ops underneath).

    ``target``: (N), () or (N, d1, ..., dk) class indices (int64/int32/uint8); ``weight``: optional (C) class
    weights (constant). ``mean`` divides by the sum of the weights of the rows not ignored
    (NaN when that is 0, as PyTorch).
    """
    input = checks.float_tensor(input, "input", backend)
    target = checks.same_device(checks.index_tensor(target, "target", backend), "target", input, "input")
    if input.ndim == 0:
        raise checks.XLossValueError("input must have shape (N, C), (C) or (N, C, d1, ..., dk); got ()")
    expected = (input.shape[0],) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
    if tuple(target.shape) != expected:
        raise checks.XLossValueError(f"target must have shape {checks.shape_str(expected)} for input of shape "
                                     f"{checks.shape_str(input.shape)}; got {checks.shape_str(target.shape)}")
    ignore_index = checks.int64(ignore_index, "ignore_index")
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    if weight is not None:
        weight = checks.same_device(checks.float_tensor(weight, "weight", backend), "weight", input, "input")
        if tuple(weight.shape) != (classes,):
            raise checks.XLossValueError(f"weight must have shape ({classes},), one per class; "
                                         f"got {checks.shape_str(weight.shape)}")
        checks.no_grad_required(weight, "weight", "nll_loss gives no gradient w.r.t. the class weights")
    reduction = checks.reduction(reduction)
    input, weight = checks.autocast_float32(input), checks.autocast_float32(weight)  # as torch's, under autocast
    return _nll(input, target, weight, ignore_index, reduction, ops.backend_key(backend))


class NLLLoss(torch.nn.Module):
    """:func:`nll_loss` as a module (``torch.nn.NLLLoss`` with ``backend=``)."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean", *, backend=None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.backend = ignore_index, checks.reduction(reduction), backend

    def forward(self, input, target):
        return nll_loss(input, target, self.weight, self.ignore_index, self.reduction, backend=self.backend)
