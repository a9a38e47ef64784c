"""A module with Liger-Kernel's calling convention, for code written against
``liger_kernel.transformers.LigerFusedLinearCrossEntropyLoss``: weight first in ``forward``
and Liger's constructor arguments, positional or by keyword.

Ours, named as a compatibility shim (it is not Liger-Kernel's class): the arithmetic is
:func:`xloss.torch.fused_linear_cross_entropy`'s. Why a separate module rather than accepting
both orders: with as many tokens as vocabulary rows (BT == V) ``input`` and ``weight`` have the
same shape, so nothing can tell the orders apart — passing Liger's order to
:class:`~xloss.torch.FusedLinearCrossEntropyLoss` computes another loss without an error.
"""

from __future__ import annotations

import torch

from . import _checks as checks
from .flce import fused_linear_cross_entropy


class LigerCompatFusedLinearCrossEntropyLoss(torch.nn.Module):
    """``loss_fn(lin_weight, _input, target, bias=None)`` with Liger-Kernel's constructor

    ``(ce_weight=None, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
    reduction="mean", softcap=None, return_z_loss=False, accum_dtype=None,
    use_token_scaling=False, return_token_accuracy=False)``

    and its return convention: the loss, or — with ``return_z_loss`` or ``return_token_accuracy`` —
    a :class:`~xloss.torch.FusedLinearCrossEntropyOutput` ``(loss, z_loss, token_accuracy)``
    (Liger's ``CrossEntropyOutput`` field names). xloss's own settings (``chunk_size``,
    ``backend``, ...) are keyword-only.
    """

    def __init__(self, ce_weight=None, ignore_index: int = -100, lse_square_scale: float = 0.0,
                 label_smoothing: float = 0.0, reduction: str = "mean", softcap=None, return_z_loss: bool = False,
                 accum_dtype=None, use_token_scaling: bool = False, return_token_accuracy: bool = False, *,
                 chunk_size=None, vocab_chunk_size=None, backend=None, process_group=None):
        super().__init__()
        self.register_buffer("ce_weight", ce_weight)
        self.ignore_index, self.lse_square_scale, self.label_smoothing = ignore_index, lse_square_scale, label_smoothing
        self.reduction, self.softcap, self.return_z_loss = checks.reduction(reduction), softcap, return_z_loss
        self.accum_dtype, self.use_token_scaling = accum_dtype, use_token_scaling
        self.return_token_accuracy = return_token_accuracy
        self.chunk_size, self.vocab_chunk_size, self.backend = chunk_size, vocab_chunk_size, backend
        self.process_group = process_group

    def forward(self, lin_weight, _input, target, bias=None):
        return fused_linear_cross_entropy(
            _input, lin_weight, target, bias, self.ignore_index, self.reduction, self.label_smoothing,
            self.chunk_size, self.backend, class_weight=self.ce_weight, vocab_chunk_size=self.vocab_chunk_size,
            process_group=self.process_group, softcap=self.softcap, lse_square_scale=self.lse_square_scale,
            return_z_loss=self.return_z_loss, accum_dtype=self.accum_dtype,
            return_token_accuracy=self.return_token_accuracy, use_token_scaling=self.use_token_scaling)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, lse_square_scale={self.lse_square_scale}, "
                f"label_smoothing={self.label_smoothing}, reduction={self.reduction!r}, softcap={self.softcap}, "
                f"backend={self.backend!r}")
