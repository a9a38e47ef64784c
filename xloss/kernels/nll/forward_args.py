"""The validated arguments of the NLL-loss forward (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


def layout(ndim: int) -> str:
    """The ``input`` axis value of a ``self`` of ``ndim`` dims: (C), (N, C) or (N, C, d1, ..., dk)."""
    return "C" if ndim == 1 else "NC" if ndim == 2 else "NCd"


@dataclass(frozen=True)
class NLLLossArgs:
    """NLL-loss forward (PyTorch's ``nll_loss_forward`` / ``nll_loss2d_forward``).

    ``self``: (C), (N, C) or (N, C, d1, ..., dk), float, C-contiguous. ``target``: (), (N) or (N, d1, ..., dk),
    int64/int32/uint8, C-contiguous, every entry in [0, C) or equal to ``ignore_index`` (checked).
    ``weight``: None or (C) in self's dtype. ``out``: target's shape for ``none``, () otherwise, self's dtype.
    ``total_weight_out``: (), self's dtype: the sum of ``weight[target]`` over the positions not ignored,
    accumulated in float32 or wider and rounded once; 0 for ``none`` on batched input (PyTorch's).
    ``mean`` divides by the accumulated sum, not by its rounded copy.
    """

    self: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    reduction: str
    ignore_index: int
    out: np.ndarray
    total_weight_out: np.ndarray

    @property
    def classes(self) -> int:
        return int(self.self.shape[1] if self.self.ndim >= 2 else self.self.shape[0])

    @property
    def inner(self) -> int:
        """Positions per sample after the class axis (1 unless the input is (N, C, d1, ..., dk))."""
        return int(np.prod(self.self.shape[2:], dtype=np.int64)) if self.self.ndim > 2 else 1

    def request(self) -> Request:
        return Request("nll_loss", float_name(self.self.dtype), self.reduction,
                       {"input": layout(self.self.ndim), "weight": self.weight is not None,
                        "target_dtype": self.target.dtype.name}, self.self.size)
