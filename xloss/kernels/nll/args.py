"""The validated arguments of the NLL-loss backward (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request

from .forward_args import layout


@dataclass(frozen=True)
class NLLArgs:
    """NLL-loss backward (SPEC kernel 3).

    ``self``: (C), (N, C) or (N, C, d1, ..., dk), float, C-contiguous (its values are not needed,
    only its shape and dtype; C ABIs still receive it). ``target``: (), (N) or (N, d1, ..., dk),
    int64/int32/uint8, C-contiguous, every entry in [0, C) or equal to ``ignore_index`` (checked).
    ``weight``: None or (C) in self's dtype. ``grad``: a Python float, or, only for
    ``none`` with batched self, a C-contiguous array of target's shape in self's dtype. ``total_weight``:
    a Python float, the caller's or, by default, the sum of ``weight[target]`` (float64) over the
    positions not ignored, resolved by validation (only ``mean`` uses it). ``out``: self's shape.
    """

    self: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    grad: np.ndarray | float
    reduction: str
    ignore_index: int
    total_weight: float
    out: np.ndarray

    @property
    def classes(self) -> int:
        return int(self.self.shape[1] if self.self.ndim >= 2 else self.self.shape[0])

    @property
    def inner(self) -> int:
        """Positions per sample after the class axis (1 unless the input is (N, C, d1, ..., dk))."""
        return int(np.prod(self.self.shape[2:], dtype=np.int64)) if self.self.ndim > 2 else 1

    def request(self) -> Request:
        return Request("nll_loss_grad", float_name(self.self.dtype), self.reduction,
                       {"input": layout(self.self.ndim), "weight": self.weight is not None,
                        "target_dtype": self.target.dtype.name}, self.self.size)
