"""Negative log-likelihood loss with its backward on an xloss backend (``xloss.nll_loss_grad``).

The forward gathers ``-weight[t] * input[i, t]`` (rows whose target is ``ignore_index`` give 0)
in float32 or wider and remembers ``total_weight`` (the sum of ``weight[t]`` over rows not
ignored) for ``mean``; the backward hands both to the kernel, which writes the one nonzero
per row.
"""

from __future__ import annotations

import torch

from .. import api
from . import _checks as C


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


class _NLLLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, target, weight, ignore_index, reduction, backend):
        cdt = _compute_dtype(x.dtype)
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        t = target.reshape(-1).to(torch.int64)
        valid = t != ignore_index
        safe = torch.where(valid, t, 0)
        w_t = valid.to(cdt) if weight is None else torch.where(valid, weight.to(cdt)[safe], 0.0)
        picked = x2.gather(1, safe[:, None]).squeeze(1).to(cdt)
        per_row = torch.where(valid, -w_t * picked, 0.0)
        total_weight = float(w_t.sum(dtype=torch.float64))
        ctx.ignore_index, ctx.reduction, ctx.backend, ctx.total_weight = ignore_index, reduction, backend, total_weight
        ctx.save_for_backward(x, target, weight)
        if reduction == "none":
            return per_row.reshape(target.shape).to(x.dtype)
        total = per_row.sum(dtype=torch.float64)
        if reduction == "mean":
            total = total / total_weight if total_weight else total * float("nan")
        return total.to(x.dtype)

    @staticmethod
    @C.first_order_only("xloss.torch.nll_loss")
    def backward(ctx, grad):
        x, target, weight = ctx.saved_tensors
        g = C.scalar_value(grad)
        dx = api.nll_loss_grad(grad if g is None else g, x, target, weight=weight, reduction=ctx.reduction,
                               ignore_index=ctx.ignore_index, total_weight=ctx.total_weight, backend=ctx.backend)
        return dx, None, None, None, None, None


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean", *, backend=None):
    """``torch.nn.functional.nll_loss`` on (N, C) or (C) log-probabilities, backward on an xloss backend.

    ``target``: (N) or () class indices (int64/int32/uint8); ``weight``: optional (C) class
    weights (constant). ``mean`` divides by the sum of the weights of the rows not ignored
    (NaN when that is 0, as PyTorch).
    """
    input = C.float_tensor(input, "input")
    if input.ndim not in (1, 2):
        raise C.XLossValueError(f"input must have shape (N, C) or (C); got {C.shape_str(input.shape)}")
    target = C.index_tensor(target, "target")
    expected = (input.shape[0],) if input.ndim == 2 else ()
    if tuple(target.shape) != expected:
        raise C.XLossValueError(f"target must have shape {C.shape_str(expected)} for input of shape "
                                f"{C.shape_str(input.shape)}; got {C.shape_str(target.shape)}")
    ignore_index = C.integer(ignore_index, "ignore_index")
    classes = input.shape[-1]
    C.check_class_indices(target, classes, ignore_index)
    if weight is not None:
        weight = C.float_tensor(weight, "weight")
        if tuple(weight.shape) != (classes,):
            raise C.XLossValueError(f"weight must have shape ({classes},), one per class; "
                                    f"got {C.shape_str(weight.shape)}")
        C.no_grad_required(weight, "weight", "nll_loss gives no gradient w.r.t. the class weights")
    reduction = C.reduction(reduction)
    return _NLLLoss.apply(input, target, weight, ignore_index, reduction, backend)


class NLLLoss(torch.nn.Module):
    """:func:`nll_loss` as a module (``torch.nn.NLLLoss`` with ``backend=``)."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean", *, backend=None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.backend = ignore_index, C.reduction(reduction), backend

    def forward(self, input, target):
        return nll_loss(input, target, self.weight, self.ignore_index, self.reduction, backend=self.backend)
