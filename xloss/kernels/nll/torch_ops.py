"""The NLL loss as ``torch.library`` custom ops (``xloss::nll_loss_forward`` / ``xloss::nll_loss_backward``),
registered with :func:`xloss.torch.ops.register_op`; :mod:`xloss.torch.nll` calls them."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.errors import UnsupportedRequestError
from xloss.torch import grad_buffers
from xloss.torch.ops import backend_of, compute_dtype, register_op, scalar_or

from . import api


@custom_op("xloss::nll_loss_forward", mutates_args=())
def nll_loss_forward(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                     reduction: str, backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, total_weight)`` of (C), (N, C) or (N, C, d1, ..., dk) input on the backend (``xloss.nll_loss``);
    total_weight (0-d, float64 here) is the divisor of ``mean``, the sum of the weights of the positions not
    ignored (the kernel's, in input's dtype; 0 for ``none`` on batched input).

    The class indices are checked once, by ``api.nll_loss``'s validator (``forward_validate``), before any
    output exists and before a backend can refuse the call (so ``_formula`` only sees checked targets); the
    body runs at call time under torch.compile too, where the op is opaque."""
    try:
        loss, total_weight = api.nll_loss(input, target, weight=weight, reduction=reduction,
                                          ignore_index=ignore_index, backend=backend_of(backend))
    except UnsupportedRequestError:  # a backend without the forward kernel: PyTorch's formula, as before it
        return _formula(input, target, weight, ignore_index, reduction)
    return loss, total_weight.to(torch.float64)


def _formula(input, target, weight, ignore_index, reduction):
    """The forward in torch operations (float32 or wider), for backends that implement only the backward."""
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    cdt = compute_dtype(input.dtype)
    rows = input.reshape(1, -1) if input.ndim == 1 else input.movedim(1, -1).reshape(-1, classes)
    t = target.reshape(-1).to(torch.int64)
    valid = t != ignore_index
    safe = torch.where(valid, t, 0)
    w_t = valid.to(cdt) if weight is None else torch.where(valid, weight.to(cdt)[safe], 0.0)
    per_row = torch.where(valid, -w_t * rows.gather(1, safe[:, None]).squeeze(1).to(cdt), 0.0)
    total_weight = w_t.sum(dtype=torch.float64)
    if reduction == "none":
        return per_row.reshape(target.shape).to(input.dtype), total_weight
    total = per_row.sum(dtype=torch.float64)
    if reduction == "mean":
        total = total / total_weight if float(total_weight) else total * float("nan")
    return total.to(input.dtype), total_weight


@nll_loss_forward.register_fake
def _(input, target, weight, ignore_index, reduction, backend=None):
    loss = input.new_empty(target.shape if reduction == "none" else ())
    return loss, input.new_empty((), dtype=torch.float64)


@custom_op("xloss::nll_loss_backward", mutates_args=())
def nll_loss_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                      total_weight: torch.Tensor, ignore_index: int, reduction: str,
                      backend: str | None) -> torch.Tensor:
    """The gradient w.r.t. (C), (N, C) or (N, C, d1, ..., dk) input (``xloss.nll_loss_grad``); a backend that
    declares the backward for (C) and (N, C) input only gets an N-d one as rows (the class axis last), as PyTorch
    defines them, and its gradient moved back. The gradient (and those rows) come from
    :mod:`xloss.torch.grad_buffers` (reused once nothing holds it)."""
    g = scalar_or(grad)
    kw = dict(weight=weight, reduction=reduction, ignore_index=ignore_index, total_weight=float(total_weight),
              backend=backend_of(backend))
    dx = grad_buffers.empty(input.shape, input.dtype)
    try:
        return api.nll_loss_grad(g, input, target, out=dx, **kw)
    except UnsupportedRequestError:  # refused before anything ran
        if input.ndim <= 2:
            raise
    classes = input.shape[1]
    x_rows = input.movedim(1, -1).reshape(-1, classes)
    dx_rows = api.nll_loss_grad(g.reshape(-1) if isinstance(g, torch.Tensor) else g, x_rows, target.reshape(-1),
                                out=grad_buffers.empty(x_rows.shape, input.dtype), **kw)
    return dx.copy_(dx_rows.reshape(input.shape[0], *input.shape[2:], classes).movedim(-1, 1))


@nll_loss_backward.register_fake
def _(grad, input, target, weight, total_weight, ignore_index, reduction, backend):
    return torch.empty_like(input)


register_op(nll_loss_forward, nll_loss_backward)
