"""The public functions of the cross-entropy rows (``xloss.cross_entropy_loss``, ``xloss.cross_entropy_loss_grad``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .validate import (
    cross_entropy_args,
    cross_entropy_grad_args,
    cross_entropy_with_grad_args,
    softmax_cross_entropy_args,
)

__all__ = ["cross_entropy_loss", "cross_entropy_loss_grad", "CrossEntropyLossOut", "softmax_cross_entropy_with_logits",
           "SoftmaxCrossEntropyOut", "cross_entropy_loss_with_grad"]


class CrossEntropyLossOut(NamedTuple):
    """The forward's outputs, in the order of CANN's aclnnCrossEntropyLoss (input's dtype)."""

    loss: Any  # (N) for reduction "none", else 0-d; includes the z-loss term when its scale is nonzero
    log_prob: Any  # (N, C) log-softmax, or None when return_log_prob=False
    zloss: Any  # the z-loss term alone, reduced like the loss; None unless return_zloss
    lse_for_zloss: Any  # (N) log-sum-exp per row (the backward's lse_for_zloss); None when the scale is 0


def cross_entropy_loss(input, target, *, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                       lse_square_scale_for_zloss=0.0, return_zloss=False, return_log_prob=True, backend=None,
                       loss_out=None, log_prob_out=None) -> CrossEntropyLossOut:
    """Cross entropy of (N, C) logits ``input`` with class indices ``target`` (N), PyTorch's semantics
    (``weight`` per class, ``ignore_index``, ``label_smoothing`` over all C classes, ``mean`` over
    the summed weights of the rows kept), plus CANN's z-loss ``scale * lse**2`` per kept row (its
    ``mean`` over the number of kept rows), added to the loss and, with ``return_zloss``, returned
    alone. Returns :class:`CrossEntropyLossOut`; feed its ``log_prob`` to :func:`cross_entropy_loss_grad`.
    """
    a = cross_entropy_args(input, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, lse_square_scale_for_zloss=lse_square_scale_for_zloss,
                           return_zloss=return_zloss, return_log_prob=return_log_prob, loss_out=loss_out,
                           log_prob_out=log_prob_out)
    dispatch.run(a, backend, loss_out, log_prob_out)
    kind = kind_of(input)
    return CrossEntropyLossOut(
        loss_out if loss_out is not None else from_numpy(a.loss_out, kind),
        None if a.log_prob_out is None else log_prob_out if log_prob_out is not None else
        from_numpy(a.log_prob_out, kind),
        None if a.zloss_out is None else from_numpy(a.zloss_out, kind),
        None if a.lse_out is None else from_numpy(a.lse_out, kind))


def cross_entropy_loss_grad(grad, log_prob, target, *, weight=None, reduction="mean", ignore_index=-100,
                            label_smoothing=0.0, lse_square_scale_for_zloss=0.0, grad_zloss=None, lse_for_zloss=None,
                            backend=None, out=None):
    """d loss / d input (N, C) of :func:`cross_entropy_loss` from its ``log_prob``, times the upstream
    ``grad`` ((N) for ``none``, else a scalar); with a z-loss, ``lse_for_zloss`` (the forward's) and
    optionally ``grad_zloss``, the upstream gradient of the separate z-loss output. ``out`` may be
    ``log_prob`` itself: the gradient then overwrites the log-probabilities in place."""
    a = cross_entropy_grad_args(grad, log_prob, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                                label_smoothing=label_smoothing, lse_square_scale_for_zloss=lse_square_scale_for_zloss,
                                grad_zloss=grad_zloss, lse_for_zloss=lse_for_zloss, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(log_prob))


class SoftmaxCrossEntropyOut(NamedTuple):
    """Outputs of :func:`softmax_cross_entropy_with_logits`, in CANN's order (features' dtype)."""

    loss: Any  # (N)
    backprop: Any  # (N, C): softmax(features) - labels


def softmax_cross_entropy_with_logits(features, labels, *, backend=None, loss_out=None,
                                      backprop_out=None) -> SoftmaxCrossEntropyOut:
    """Cross entropy of (N, C) logits with dense (probability) labels of the same shape: the loss per row
    ``-sum_c labels * log_softmax(features)`` and ``backprop = softmax(features) - labels`` (its gradient
    when each row of labels sums to 1), as CANN's aclnnSoftmaxCrossEntropyWithLogits and TensorFlow's."""
    a = softmax_cross_entropy_args(features, labels, loss_out=loss_out, backprop_out=backprop_out)
    dispatch.run(a, backend, loss_out, backprop_out)
    kind = kind_of(features)
    return SoftmaxCrossEntropyOut(loss_out if loss_out is not None else from_numpy(a.loss_out, kind),
                                  backprop_out if backprop_out is not None else from_numpy(a.backprop_out, kind))


def cross_entropy_loss_with_grad(input, target, grad=1.0, *, weight=None, reduction="mean", ignore_index=-100,
                                 label_smoothing=0.0, backend=None, loss_out=None, grad_out=None):
    """``(loss, d loss / d input * grad)`` of :func:`cross_entropy_loss` (no z-loss) from the logits in one
    pass: no log-probabilities are written or read back. ``grad``: the upstream gradient ((N) or a scalar for
    ``none``, else a scalar); the loss as :func:`cross_entropy_loss`'s, the gradient as
    :func:`cross_entropy_loss_grad`'s. xloss's own (the vendors publish the forward and the backward apart)."""
    a = cross_entropy_with_grad_args(input, target, grad, weight=weight, reduction=reduction,
                                     ignore_index=ignore_index, label_smoothing=label_smoothing, loss_out=loss_out,
                                     grad_out=grad_out)
    dispatch.run(a, backend, loss_out, grad_out)
    kind = kind_of(input)
    return (loss_out if loss_out is not None else from_numpy(a.loss_out, kind),
            grad_out if grad_out is not None else from_numpy(a.grad_out, kind))
