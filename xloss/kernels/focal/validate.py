"""The caller's focal loss arguments, checked, as :class:`~.args.FocalArgs`."""

from __future__ import annotations

import numpy as np

from xloss.containers import to_numpy
from xloss.dtypes import float_name
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

from .args import FocalArgs


def alpha_value(alpha) -> float:
    a = real_number(alpha, "alpha")
    if a > 1.0:
        raise XLossValueError(f"alpha must be in [0, 1], or negative to disable the class weighting; got {a}")
    return a


#: The largest focusing parameter accepted: far beyond any use (papers use 0..5), small enough
#: that every backend's formulas (and a C float) stay finite.
GAMMA_MAX = 1000.0


def gamma_value(gamma) -> float:
    g = real_number(gamma, "gamma")
    if g < 0.0:
        raise XLossValueError(f"gamma must be >= 0; got {g}")
    if g > GAMMA_MAX:
        raise XLossValueError(f"gamma must be <= {GAMMA_MAX:g}; got {g}")
    return g


@one_call
def focal_args(x, y, grad, *, alpha, gamma, weight, reduction, mode, out=None, grad_out=None) -> FocalArgs:
    x_raw = float_array(x, "x")
    x = contiguous(x_raw, "x")
    dt = x.dtype
    y_raw = to_numpy(y, "y")
    y = operand(y_raw, "y", dt, x.shape, allow_int=True)
    unit_interval(y if y_raw.dtype.kind == "f" or float_name(y_raw.dtype) else y_raw, "y",
                  "focal targets are binary or soft labels, probabilities of the positive class")
    reduction = reduction_name(reduction)
    alpha, gamma = alpha_value(alpha), gamma_value(gamma)
    weight = None if weight is None else broadcast_weight(weight, "weight", x.shape, dt)
    g = None if mode == "forward" else upstream_grad(grad, reduction, x.shape, dt)
    inputs = {"x": x_raw, "y": y_raw, "weight": weight, "grad": g if isinstance(g, np.ndarray) else None}
    loss_out = grad_out_arr = None
    if mode in ("forward", "forward+grad"):
        loss_out = output(out, "out", x.shape if reduction == "none" else (), dt, inputs)
    if mode in ("grad", "forward+grad"):
        grad_out_arr = output(grad_out, "out" if mode == "grad" else "grad_out", x.shape, dt,
                              {**inputs, "the loss output": loss_out} if out is not None else inputs)
    return FocalArgs(x=x, y=y, weight=weight, alpha=alpha, gamma=gamma, reduction=reduction, mode=mode, grad=g,
                     loss_out=loss_out, grad_out=grad_out_arr)
