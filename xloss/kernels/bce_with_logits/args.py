"""What a backend's BCE-with-logits implementation receives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xloss.dtypes import float_name
from xloss.kernel_args import Request


@dataclass(frozen=True)
class BCEWithLogitsArgs:
    """Binary cross entropy with logits, torch's semantics.

    ``x`` (logits) and ``y`` (targets): same shape, same float dtype, C-contiguous (any ndim, possibly
    empty). ``weight`` and ``pos_weight``: None, or arrays of x's dtype with x's ndim whose every dim is
    1 or x's (not expanded). Per element, with ``pw`` = pos_weight (1 if absent) and ``lw = 1 + (pw-1)y``:
    ``loss = w ((1-y) x + lw softplus(-x))`` and ``d loss/dx = w ((1-y) sigmoid(x) - pw y sigmoid(-x))``.
    ``grad`` (modes with a gradient): a Python float, or, only for ``reduction="none"``, a C-contiguous
    array of x's shape and dtype; ``mean``'s division by ``x.size`` is the backend's job. ``loss_out``:
    x's shape for ``none``, shape () otherwise; ``grad_out``: x's shape. The mode says which are present.
    """

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    pos_weight: np.ndarray | None
    reduction: str
    mode: str  # "forward" | "grad" | "forward+grad"
    grad: np.ndarray | float | None
    loss_out: np.ndarray | None
    grad_out: np.ndarray | None

    def request(self) -> Request:
        return Request("bce_with_logits", float_name(self.x.dtype), self.reduction,
                       {"mode": self.mode, "weight": self.weight is not None,
                        "pos_weight": self.pos_weight is not None}, self.x.size)
