"""Cross entropy as ``torch.library`` custom ops (``xloss::cross_entropy_loss_forward`` /
``xloss::cross_entropy_loss_backward``), registered with :func:`xloss.torch.ops.register_op`;
:mod:`.torch_api` calls them."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.containers import to_numpy
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
    return _gradient(grad, log_prob, target, weight, ignore_index, reduction, label_smoothing, backend, None)


def cross_entropy_loss_backward_over_log_prob(grad, log_prob, target, weight, ignore_index, reduction,
                                              label_smoothing, backend) -> torch.Tensor:
    """:func:`cross_entropy_loss_backward` written over ``log_prob`` (returned): for the drop-in's own
    saved buffer in a plain eager call on CPU tensors (not an op: it runs only where :func:`xloss.torch.ops.call`
    would run an op's body directly). Written through a NumPy view, so autograd's version of ``log_prob``
    stays as saved: nobody else sees the buffer, and a second backward through a retained graph must
    still unpack it (and then recompute it)."""
    _gradient(grad, log_prob, target, weight, ignore_index, reduction, label_smoothing, backend,
              to_numpy(log_prob, "log_prob"))
    return log_prob


def _gradient(grad, log_prob, target, weight, ignore_index, reduction, label_smoothing, backend, out):
    g = scalar_or(grad) if reduction != "none" else grad.contiguous()
    return api.cross_entropy_loss_grad(g, log_prob, target, weight=weight, reduction=reduction,
                                       ignore_index=ignore_index, label_smoothing=label_smoothing,
                                       backend=backend_of(backend), out=out)


@cross_entropy_loss_backward.register_fake
def _(grad, log_prob, target, weight, ignore_index, reduction, label_smoothing, backend):
    return torch.empty_like(log_prob)


register_op(cross_entropy_loss_forward, cross_entropy_loss_backward)
