"""Argument checking of the BCE gradient (the generic helpers are :mod:`xloss.validation`'s)."""

from __future__ import annotations

import numpy as np

from xloss.containers import to_numpy
from xloss.errors import XLossValueError
from xloss.memory import one_call
from xloss.validation import (
    broadcast_weight,
    contiguous,
    float_array,
    operand,
    output,
    real_number,
    reduction_name,
    unit_interval,
    upstream_grad,
)

from . import ROW
from .args import BCEArgs


@one_call
def bce_args(x, y, grad, *, weight, reduction, eps, eps_mode, out=None) -> BCEArgs:
    x_raw = float_array(x, "x")
    x = contiguous(x_raw, "x")
    unit_interval(x, "x", "BCE takes probabilities, as torch.nn.functional.binary_cross_entropy")
    dt = x.dtype
    y_raw = to_numpy(y, "y")
    y = operand(y_raw, "y", dt, x.shape, allow_int=True)
    reduction = reduction_name(reduction)
    eps = real_number(eps, "eps")
    if eps < 0:
        raise XLossValueError(f"eps must be >= 0; got {eps}")
    if eps_mode not in ROW.axes["eps_mode"]:
        raise XLossValueError(f"eps_mode must be 'clamp' (max(x(1-x), eps)) or 'add' (x(1-x) + eps); got {eps_mode!r}")
    weight = None if weight is None else broadcast_weight(weight, "weight", x.shape, dt)
    g = upstream_grad(grad, reduction, x.shape, dt)
    inputs = {"x": x_raw, "y": y_raw, "weight": weight, "grad": g if isinstance(g, np.ndarray) else None}
    return BCEArgs(x=x, y=y, weight=weight, grad=g, reduction=reduction, eps=eps, eps_mode=eps_mode,
                   out=output(out, "out", x.shape, dt, inputs))
