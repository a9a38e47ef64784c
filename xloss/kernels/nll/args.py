"""The validated arguments of the NLL-loss backward (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


@dataclass(frozen=True)
class NLLArgs:
    """NLL-loss backward (SPEC kernel 3).

    ``self``: (N, C) or (C), float, C-contiguous (its values are not needed, only its shape
    and dtype; C ABIs still receive it). ``target``: (N) or (), int64/int32/uint8,
    C-contiguous, every entry in [0, C) or equal to ``ignore_index`` (checked).
    ``weight``: None or (C) in self's dtype. ``grad``: a Python float, or, only for
    ``none`` with 2-D self, a C-contiguous (N) array of self's dtype. ``total_weight``: a
    Python float, the caller's or, by default, the sum of ``weight[target]`` (float64) over the
    rows not ignored, resolved by validation (only ``mean`` uses it). ``out``: self's shape.
    """

    self: np.ndarray
    target: np.ndarray
    weight: np.ndarray | None
    grad: np.ndarray | float
    reduction: str
    ignore_index: int
    total_weight: float
    out: np.ndarray

    def request(self) -> Request:
        return Request("nll_loss_grad", float_name(self.self.dtype), self.reduction,
                       {"ndim": self.self.ndim, "weight": self.weight is not None,
                        "target_dtype": self.target.dtype.name}, self.self.size)
