"""The validated arguments of the cross-entropy rows (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


def _variants(weight, label_smoothing, zloss_scale, target) -> dict:
    return {"weight": weight is not None, "label_smoothing": label_smoothing != 0.0, "zloss": zloss_scale != 0.0,
            "target_dtype": target.dtype.name}


@dataclass(frozen=True)
class CrossEntropyArgs:
    """Cross-entropy forward (CANN's aclnnCrossEntropyLoss, PyTorch's semantics).

    ``input`` (N, C) float, C-contiguous; ``target`` (N) int64/int32, C-contiguous, every entry in
    [0, C) or ``ignore_index`` (checked); ``weight`` None or (C) in the compute dtype (float64 for
    float64 input, else float32: a float32 weight with 16-bit logits is not rounded, as CANN takes
    FLOAT weights); ``label_smoothing`` in [0, 1]; ``zloss_scale`` (CANN's lseSquareScaleForZloss)
    finite, >= 0. Outputs in input's dtype: ``loss_out`` (N) for ``none`` else (); ``log_prob_out``
    (N, C) or None when not asked for; ``zloss_out`` like ``loss_out`` when ``return_zloss``, else
    None; ``lse_out`` (N) when ``zloss_scale`` is nonzero (the backward's ``lse_for_zloss``), else None.
    """

    input: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    reduction: str
    ignore_index: int
    label_smoothing: float
    zloss_scale: float
    loss_out: np.ndarray
    log_prob_out: np.ndarray | None
    zloss_out: np.ndarray | None
    lse_out: np.ndarray | None

    def request(self) -> Request:
        return Request("cross_entropy_loss", float_name(self.input.dtype), self.reduction,
                       _variants(self.weight, self.label_smoothing, self.zloss_scale, self.target), self.input.size)


@dataclass(frozen=True)
class CrossEntropyGradArgs:
    """Cross-entropy backward from the forward's log-probabilities (CANN's aclnnCrossEntropyLossGrad).

    ``log_prob`` (N, C) float, C-contiguous; ``target`` and ``weight`` as the forward's; ``grad``
    a Python float, or for ``none`` a C-contiguous (N) array of log_prob's dtype; ``grad_zloss``
    None or the same form (the upstream gradient of the separate z-loss output); ``lse_for_zloss``
    (N) in log_prob's dtype when ``zloss_scale`` is nonzero, else None. ``out`` (N, C) in
    log_prob's dtype.
    """

    grad: np.ndarray | float
    log_prob: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    grad_zloss: np.ndarray | float | None
    lse_for_zloss: np.ndarray | None
    reduction: str
    ignore_index: int
    label_smoothing: float
    zloss_scale: float
    out: np.ndarray

    def request(self) -> Request:
        return Request("cross_entropy_loss_grad", float_name(self.log_prob.dtype), self.reduction,
                       _variants(self.weight, self.label_smoothing, self.zloss_scale, self.target),
                       self.log_prob.size)


@dataclass(frozen=True)
class SoftmaxCrossEntropyArgs:
    """Dense-label cross entropy (CANN's aclnnSoftmaxCrossEntropyWithLogits): ``features`` (N, C)
    float and ``labels`` (N, C) of the same dtype, both C-contiguous; outputs in their dtype:
    ``loss_out`` (N), ``backprop_out`` (N, C) = softmax(features) - labels."""

    features: np.ndarray
    labels: np.ndarray
    loss_out: np.ndarray
    backprop_out: np.ndarray

    def request(self) -> Request:
        return Request("softmax_cross_entropy_with_logits", float_name(self.features.dtype), None,
                       {"labels": "dense"}, self.features.size)


@dataclass(frozen=True)
class CrossEntropyWithGradArgs:
    """Cross entropy from logits and its gradient in one pass (xloss's own row; no vendor publishes it).

    ``input``, ``target``, ``weight``, ``label_smoothing`` as :class:`CrossEntropyArgs` (no z-loss);
    ``grad`` the upstream gradient as :class:`CrossEntropyGradArgs`' (a Python float, or for ``none`` a
    C-contiguous (N) array of input's dtype). Outputs in input's dtype: ``loss_out`` (N) for ``none``
    else (); ``grad_out`` (N, C), d loss / d input times ``grad`` (``mean``'s division included).
    """

    input: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    reduction: str
    ignore_index: int
    label_smoothing: float
    grad: np.ndarray | float
    loss_out: np.ndarray
    grad_out: np.ndarray

    def request(self) -> Request:
        v = _variants(self.weight, self.label_smoothing, 0.0, self.target)
        del v["zloss"]
        return Request("cross_entropy_loss_with_grad", float_name(self.input.dtype), self.reduction, v,
                       self.input.size)
