"""What a backend's focal loss implementation receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import LazyVariant, Request, target_kind


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
