"""Cross entropy as ``torch.library`` custom ops, registered with :func:`xloss.torch.ops.register_op`: the
vendor pair (``xloss::cross_entropy_loss_forward`` / ``xloss::cross_entropy_loss_backward``, the backward from
the log-probabilities) and xloss's fused ``xloss::cross_entropy_loss_with_grad`` (the loss and the gradient
for upstream gradient 1 from one pass), which :mod:`.torch_api`'s autograd function runs; its no-grad calls
take the forward alone."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.errors import UnsupportedRequestError
from xloss.torch import grad_buffers
from xloss.torch.ops import backend_of, register_op, scalar_or

from . import api


@custom_op("xloss::cross_entropy_loss_forward", mutates_args=())
def cross_entropy_loss_forward(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                               ignore_index: int, reduction: str, label_smoothing: float, want_log_prob: bool,
                               backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, log_prob)`` of (N, C) logits; ``log_prob`` is empty unless ``want_log_prob`` (the
    backward's input: only a call that will be differentiated asks for it). Checks the class indices."""
    r = api.cross_entropy_loss(input, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                               label_smoothing=label_smoothing, return_log_prob=want_log_prob,
                               backend=backend_of(backend))
    return r.loss, r.log_prob if want_log_prob else input.new_empty((0,))


@cross_entropy_loss_forward.register_fake
def _(input, target, weight, ignore_index, reduction, label_smoothing, want_log_prob, backend):
    loss = input.new_empty(target.shape if reduction == "none" else ())
    return loss, input.new_empty(input.shape if want_log_prob else (0,))


@custom_op("xloss::cross_entropy_loss_backward", mutates_args=())
def cross_entropy_loss_backward(grad: torch.Tensor, log_prob: torch.Tensor, target: torch.Tensor,
                                weight: torch.Tensor | None, ignore_index: int, reduction: str, label_smoothing: float,
                                backend: str | None) -> torch.Tensor:
    """d loss / d input from the forward's ``log_prob``, in a buffer from :mod:`xloss.torch.grad_buffers`."""
    g = scalar_or(grad) if reduction != "none" else grad.contiguous()
    return api.cross_entropy_loss_grad(g, log_prob, target, weight=weight, reduction=reduction,
                                       ignore_index=ignore_index, label_smoothing=label_smoothing,
                                       backend=backend_of(backend),
                                       out=grad_buffers.empty(log_prob.shape, log_prob.dtype))


@cross_entropy_loss_backward.register_fake
def _(grad, log_prob, target, weight, ignore_index, reduction, label_smoothing, backend):
    return torch.empty_like(log_prob)


@custom_op("xloss::cross_entropy_loss_with_grad", mutates_args=())
def cross_entropy_loss_with_grad(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                                 ignore_index: int, reduction: str, label_smoothing: float,
                                 backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, dx)`` of (N, C) logits from one pass (xloss's fused row), ``dx`` for upstream gradient 1
    (the autograd backward only scales it). Checks the class indices. A backend that does not declare the
    fused row (the vendor-ABI ones) runs its vendor pair instead, the gradient written over the
    log-probabilities (refused before anything ran: the pair then says what that backend can do). ``dx`` (on
    the pair, the log-probabilities' buffer) comes from :mod:`xloss.torch.grad_buffers` (reused once nothing
    holds it)."""
    kw = dict(weight=weight, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing,
              backend=backend_of(backend))
    dx = grad_buffers.empty(input.shape, input.dtype)
    try:
        return api.cross_entropy_loss_with_grad(input, target, 1.0, grad_out=dx, **kw)
    except UnsupportedRequestError:  # refused before anything ran: dx takes the pair's log-probabilities
        loss = api.cross_entropy_loss(input, target, log_prob_out=dx, **kw).loss
        return loss, api.cross_entropy_loss_grad(1.0, dx, target, out=dx, **kw)


@cross_entropy_loss_with_grad.register_fake
def _(input, target, weight, ignore_index, reduction, label_smoothing, backend):
    return input.new_empty(target.shape if reduction == "none" else ()), torch.empty_like(input)


register_op(cross_entropy_loss_forward, cross_entropy_loss_backward, cross_entropy_loss_with_grad)
