"""The validated, normalised arguments a backend kernel receives.

:mod:`xloss.validation` builds these from whatever the caller passed; a backend can rely on
every invariant stated here and must not re-validate. All arrays are NumPy arrays
(bfloat16 as ``ml_dtypes.bfloat16``); float operands share the primary input's dtype; the
output arrays are C-contiguous, writeable, of the stated shape and dtype, and do not
overlap any input. A backend writes its results into the ``*_out`` arrays and returns
nothing. It must not leave an output half-written: if it can still fail after it starts
writing, it computes into scratch memory and copies at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .dtypes import float_name


@dataclass(frozen=True)
class Request:
    """What a call asks of a backend, in the terms capabilities are declared in."""

    kernel: str
    dtype: str
    reduction: str | None
    variant: Mapping[str, object]
    numel: int
    params: Mapping[str, object] = field(default_factory=dict)  # scalars a backend may fix or bound (eps, hidden)


class LazyVariant(Mapping):
    """A request's variant values, some given as zero-argument functions evaluated on first use:
    a value that costs a pass over an input (are the focal targets binary?) is computed only for
    a backend whose declaration depends on it."""

    def __init__(self, values: dict):
        self._values = dict(values)

    def __getitem__(self, axis):
        v = self._values[axis]
        if callable(v):
            v = self._values[axis] = v()
        return v

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        return repr(dict(self))


def target_kind(y: np.ndarray) -> str:
    """``"binary"`` where every element of ``y`` is 0 or 1, else ``"soft"`` (NaN is soft)."""
    flat = y.reshape(-1)
    step = 1 << 20  # in blocks: a soft value usually shows early, and the temporaries stay small
    for start in range(0, flat.size, step):
        part = flat[start:start + step]
        if not ((part == 0) | (part == 1)).all():
            return "soft"
    return "binary"


@dataclass(frozen=True)
class FocalArgs:
    """Sigmoid focal loss (SPEC kernel 1).

    ``x`` and ``y``: same shape, same float dtype, C-contiguous (any ndim, possibly empty).
    ``weight``: None, or an array of x's dtype with ``weight.ndim == x.ndim`` whose every dim
    is 1 or x's (broadcast it yourself; it is not expanded). ``alpha`` < 0 disables the class
    weighting; 0 <= alpha <= 1 otherwise. ``gamma`` >= 0. ``grad`` (modes with a gradient): a Python
    float (the same upstream value for every element), or, only for ``reduction="none"``, a
    C-contiguous array of x's shape and dtype. The ``mean`` division by ``x.size`` is the
    backend's job. ``loss_out``: x's shape for
    ``none``, shape () otherwise. ``grad_out``: x's shape. The mode says which are present.
    """

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    alpha: float
    gamma: float
    reduction: str
    mode: str  # "forward" | "grad" | "forward+grad"
    grad: np.ndarray | float | None
    loss_out: np.ndarray | None
    grad_out: np.ndarray | None

    def request(self) -> Request:
        y = self.y
        kind: Callable[[], str] = lambda: target_kind(y)
        return Request("focal_loss", float_name(self.x.dtype), self.reduction,
                       LazyVariant({"mode": self.mode, "weight": self.weight is not None, "targets": kind}),
                       self.x.size)


@dataclass(frozen=True)
class BCEArgs:
    """Binary-cross-entropy gradient (SPEC kernel 2).

    ``x``, ``y``, ``weight``, ``grad``: as in :class:`FocalArgs`. ``eps`` >= 0 and ``eps_mode``
    ("clamp": ``max(x(1-x), eps)``, "add": ``x(1-x) + eps``). ``out``: x's shape.
    """

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    grad: np.ndarray | float
    reduction: str
    eps: float
    eps_mode: str
    out: np.ndarray

    def request(self) -> Request:
        return Request("bce_grad", float_name(self.x.dtype), self.reduction,
                       {"eps_mode": self.eps_mode, "weight": self.weight is not None}, self.x.size,
                       {"eps": self.eps})


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


def __getattr__(name):
    """The kernels' Args types live in their families (``xloss.kernels.<family>``); the names stay
    readable here for code written against this module."""
    from .kernels import KERNELS

    for row in KERNELS.values():
        found = row.load("args")
        if getattr(found, "__name__", None) == name:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
