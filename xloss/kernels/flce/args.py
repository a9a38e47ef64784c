"""The validated arguments of the FLCE family's kernels (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


@dataclass(frozen=True)
class FLCEArgs:
    """Fused linear-cross-entropy gradients for one vocabulary shard (SPEC kernel 4).

    ``input`` (BT, H) and ``weight`` (V, H): same float dtype, C-contiguous. The per-token
    float operands ``grad`` (BT), ``logits_max`` (BT), ``sum_exp_logits`` (BT) and ``softmax``
    (BT, V) are C-contiguous in the compute dtype (float64 for float64 input, else float32).
    ``target_mask``: bool (BT) when ``mask_format == "bool"``, or uint8 (ceil(BT/8)) bit-packed
    LSB first when ``"bitpacked"``; True/1 means "target not in this shard".
    ``masked_target``: (BT) int32 or int64, every entry in [0, V) (checked; V == 0 only with
    BT == 0). ``mode`` "softmax" gives ``softmax``; "recompute" gives ``logits_max`` and
    ``sum_exp_logits``. ``label_smoothing`` in [0, 1) with the global ``vocab_size`` (>= V).
    ``input_grad_out`` (BT, H) and ``weight_grad_out`` (V, H) in input's dtype.
    """

    grad: np.ndarray
    input: np.ndarray
    weight: np.ndarray
    target_mask: np.ndarray
    mask_format: str  # "bool" | "bitpacked"
    masked_target: np.ndarray
    mode: str  # "softmax" | "recompute"
    logits_max: np.ndarray | None
    sum_exp_logits: np.ndarray | None
    softmax: np.ndarray | None
    label_smoothing: float
    vocab_size: int
    input_grad_out: np.ndarray
    weight_grad_out: np.ndarray
    outputs_given: bool = False  # the outputs are the caller's buffers (not to be left half-written)

    def request(self) -> Request:
        return Request("fused_linear_cross_entropy_grad", float_name(self.input.dtype), None,
                       {"mode": self.mode, "mask": self.mask_format,
                        "label_smoothing": self.label_smoothing != 0.0},
                       self._largest_operand())

    def _largest_operand(self) -> int:
        (bt, h), v = self.input.shape, self.weight.shape[0]
        return max(bt * v, bt * h, v * h)


@dataclass(frozen=True)
class OnlineMaxSumArgs:
    """One vocabulary shard's forward statistics (CANN's aclnnFusedLinearOnlineMaxSum).

    ``input`` (BT, H) and ``weight`` (V, H): same float dtype, C-contiguous, V >= 1. ``target``
    (BT) int32 or int64, C-contiguous, any values (those outside the shard are masked). The shard
    holds the global vocabulary rows ``vocab_start <= t < vocab_end``, with ``0 <= vocab_start <=
    vocab_end <= vocab_start + V``. Outputs: ``logits_max_out``, ``sum_exp_out``, ``predicted_out``
    (BT) in the compute dtype (float64 for float64 input, else float32): the row max of the logits
    ``input @ weight.T``, the sum of ``exp(logits - max)``, and ``logits[t - vocab_start] - max``
    (0 where masked); ``target_mask_out``: uint8 ((BT + 7) // 8) bit-packed LSB first with the
    padding bits the mask of target 0, as CANN's kernel pads (``mask_format == "bitpacked"``), or
    bool (BT) (``"bool"``), set where the target is not in the shard; ``masked_target_out`` (BT) in
    target's dtype, ``t - vocab_start`` or 0 where masked; ``logits_out`` (BT, V) in input's dtype, or
    None when not asked for.
    """

    input: np.ndarray
    weight: np.ndarray
    target: np.ndarray
    vocab_start: int
    vocab_end: int
    mask_format: str  # "bitpacked" | "bool"
    logits_max_out: np.ndarray
    sum_exp_out: np.ndarray
    predicted_out: np.ndarray
    target_mask_out: np.ndarray
    masked_target_out: np.ndarray
    logits_out: np.ndarray | None

    def request(self) -> Request:
        (bt, h), v = self.input.shape, self.weight.shape[0]
        return Request("fused_linear_online_max_sum", float_name(self.input.dtype), None,
                       {"logits": self.logits_out is not None, "mask": self.mask_format,
                        "target_dtype": self.target.dtype.name}, max(bt * v, bt * h, v * h), {"hidden": h})


@dataclass(frozen=True)
class LossWithMaxSumArgs:
    """The vocabulary-parallel loss after the all-reduce (CANN's aclnnFusedCrossEntropyLossWithMaxSum).

    ``logits_max``, ``sum_exp_logits``, ``predicted_logits`` (BT): C-contiguous, in the compute
    dtype of ``dtype`` (float64 for float64, else float32); ``predicted_logits`` is relative to
    ``logits_max``. ``vocab_parallel_logits``: None, or (BT, V) of ``dtype``, C-contiguous.
    ``dtype`` is the logits' dtype when they are given, else the statistics'. ``loss_out`` (BT)
    in the compute dtype: ``log(sum_exp_logits) - predicted_logits``; ``softmax_out`` (BT, V) in
    the compute dtype, ``exp(logits - logits_max) / sum_exp_logits``, present exactly when the
    logits are. ``label_smoothing`` is 0 (the only value any vendor computes).
    """

    logits_max: np.ndarray
    sum_exp_logits: np.ndarray
    predicted_logits: np.ndarray
    vocab_parallel_logits: np.ndarray | None
    dtype: str
    label_smoothing: float
    loss_out: np.ndarray
    softmax_out: np.ndarray | None

    def request(self) -> Request:
        bt = self.loss_out.shape[0]
        v = 0 if self.vocab_parallel_logits is None else self.vocab_parallel_logits.shape[1]
        return Request("fused_cross_entropy_loss_with_max_sum", self.dtype, None,
                       {"softmax": self.softmax_out is not None}, max(bt, bt * v))
