"""The validated arguments of the BCE gradient (the invariants of :mod:`xloss.kernel_args` hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


@dataclass(frozen=True)
class BCEArgs:
    """Binary-cross-entropy gradient (SPEC kernel 2).

    ``x``, ``y``, ``weight``, ``grad``: as in :class:`xloss.kernel_args.FocalArgs`. ``eps`` >= 0 and ``eps_mode``
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
