"""The public kernel functions: validate, pick the backend, run, hand back in the caller's container."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import dispatch, validation
from .containers import from_numpy, kind_of

__all__ = [
    "focal_loss", "focal_loss_grad", "focal_loss_with_grad", "bce_grad",
    "fused_linear_cross_entropy_grad", "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum",
    "OnlineMaxSum", "LossWithMaxSum",
]


def focal_loss(x, y, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Sigmoid focal loss of logits ``x`` against targets ``y`` (binary or soft).

    ``alpha < 0`` disables the class weighting; ``weight`` broadcasts to x (per-anchor
    weights). Returns x's shape for ``reduction="none"``, else a 0-d array/tensor, in x's dtype.
    """
    a = validation.focal_args(x, y, None, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="forward", out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.loss_out, kind_of(x))


def focal_loss_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None, out=None):
    """Gradient of :func:`focal_loss` w.r.t. ``x``, times the upstream ``grad``; x's shape and dtype."""
    a = validation.focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="grad", grad_out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.grad_out, kind_of(x))


def focal_loss_with_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none", backend=None):
    """``(loss, dx)`` from one pass over ``x`` and ``y``."""
    a = validation.focal_args(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                              mode="forward+grad")
    dispatch.run(a, backend)
    kind = kind_of(x)
    return from_numpy(a.loss_out, kind), from_numpy(a.grad_out, kind)


def bce_grad(x, y, grad=1.0, *, weight=None, reduction="mean", eps=1e-12, eps_mode="clamp", backend=None, out=None):
    """Gradient of binary cross entropy w.r.t. the probabilities ``x``.

    ``grad * weight * (x - y) / max(x(1-x), eps)`` (``eps_mode="clamp"``, PyTorch/Ascend) or
    ``/ (x(1-x) + eps)`` (``"add"``, FT78NE/MT7004); ``mean`` divides by the element count.
    """
    a = validation.bce_args(x, y, grad, weight=weight, reduction=reduction, eps=eps, eps_mode=eps_mode, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(x))


def fused_linear_cross_entropy_grad(grad, input, weight, target_mask, masked_target, *, logits_max=None,
                                    sum_exp_logits=None, softmax=None, label_smoothing=0.0, vocab_size=None,
                                    backend=None, input_grad_out=None, weight_grad_out=None):
    """``(input_grad, weight_grad)`` of cross entropy through ``input @ weight.T`` for one vocabulary shard.

    Give ``softmax`` (BT, V), or the global ``logits_max`` and ``sum_exp_logits`` (BT) to
    recompute it. ``target_mask`` is bool per token or uint8 bit-packed LSB first (True: the
    token's target is not in this shard); ``masked_target`` the local target index.
    ``input_grad_out`` / ``weight_grad_out``: buffers to write the results into (as ``out=``).
    """
    a = validation.flce_args(grad, input, weight, target_mask, masked_target, logits_max=logits_max,
                             sum_exp_logits=sum_exp_logits, softmax=softmax, label_smoothing=label_smoothing,
                             vocab_size=vocab_size, input_grad_out=input_grad_out, weight_grad_out=weight_grad_out)
    dispatch.run(a, backend, input_grad_out, weight_grad_out)
    kind = kind_of(input)
    return (input_grad_out if input_grad_out is not None else from_numpy(a.input_grad_out, kind),
            weight_grad_out if weight_grad_out is not None else from_numpy(a.weight_grad_out, kind))


class OnlineMaxSum(NamedTuple):
    """One vocabulary shard's statistics, in the order of CANN's aclnnFusedLinearOnlineMaxSum outputs."""

    logits_max_local: Any  # (BT,) float32 (float64 for float64 input): the shard's row max
    sum_exp_logits_local: Any  # (BT,) sum of exp(logits - logits_max_local)
    predicted_logits_local: Any  # (BT,) logits[target - vocab_start] - logits_max_local; 0 where masked
    target_mask: Any  # uint8 ((BT + 7) // 8,) bit-packed LSB first, padding bits target 0's mask; or bool (BT,)
    masked_target: Any  # (BT,) target - vocab_start, 0 where masked; target's dtype
    vocab_parallel_logits: Any  # (BT, V) in input's dtype, or None unless return_logits


class LossWithMaxSum(NamedTuple):
    loss: Any  # (BT,) float32 (float64 for float64 statistics)
    softmax: Any  # (BT, V) float32, or None unless vocab_parallel_logits was given


def fused_linear_online_max_sum(input, weight, target, vocab_start, vocab_end=None, *, return_logits=False,
                                mask_format="bitpacked", backend=None):
    """One vocabulary shard of the vocabulary-parallel cross-entropy forward, before the all-reduce.

    The shard holds the global vocabulary rows ``[vocab_start, vocab_end)`` (``vocab_end`` defaults
    to ``vocab_start + V``) as ``weight`` (V, H); ``input`` (BT, H); ``target`` (BT) int32/int64
    global indices. Returns :class:`OnlineMaxSum`; reduce it across shards (max of the maxes, sum of
    the rescaled sums and predicted logits) and pass the result to
    :func:`fused_cross_entropy_loss_with_max_sum`; its mask and masked target feed
    :func:`fused_linear_cross_entropy_grad`. ``mask_format``: ``"bitpacked"`` (CANN's) or ``"bool"``.
    """
    a = validation.online_max_sum_args(input, weight, target, vocab_start, vocab_end, return_logits=return_logits,
                                       mask_format=mask_format)
    dispatch.run(a, backend)
    kind = kind_of(input)
    return OnlineMaxSum(*(from_numpy(o, kind) for o in (a.logits_max_out, a.sum_exp_out, a.predicted_out,
                                                         a.target_mask_out, a.masked_target_out)),
                        None if a.logits_out is None else from_numpy(a.logits_out, kind))


def fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, *, vocab_parallel_logits=None,
                                          label_smoothing=0.0, backend=None):
    """The per-token loss ``log(sum_exp_logits) - predicted_logits`` from the all-reduced statistics
    (``predicted_logits`` relative to ``logits_max``), and with a shard's ``vocab_parallel_logits``
    (BT, V) its softmax ``exp(logits - logits_max) / sum_exp_logits``. Returns :class:`LossWithMaxSum`.
    The loss is per token: reduce it (and drop ignored tokens) yourself. ``label_smoothing`` must be 0.
    """
    a = validation.loss_with_max_sum_args(logits_max, sum_exp_logits, predicted_logits,
                                          vocab_parallel_logits=vocab_parallel_logits, label_smoothing=label_smoothing)
    dispatch.run(a, backend)
    kind = kind_of(logits_max)
    return LossWithMaxSum(from_numpy(a.loss_out, kind),
                          None if a.softmax_out is None else from_numpy(a.softmax_out, kind))
