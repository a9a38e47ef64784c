"""The validated arguments of the BCE forward (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


@dataclass(frozen=True)
class BCELossArgs:
    """Binary cross entropy on probabilities (PyTorch's ``binary_cross_entropy``).

    ``x``: probabilities in [0, 1] (NaN passes), float, C-contiguous, any shape. ``y``: x's shape and dtype.
    ``weight``: None, or an array of x's dtype and ndim whose every dim is 1 or x's (not expanded).
    ``out``: x's shape for ``none``, () otherwise; ``mean`` divides by ``x.size`` (NaN when empty).
    """

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    reduction: str
    out: np.ndarray

    def request(self) -> Request:
        return Request("binary_cross_entropy", float_name(self.x.dtype), self.reduction,
                       {"weight": self.weight is not None}, self.x.size)
