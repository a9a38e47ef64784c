"""The caller's BCE-with-logits arguments, checked, as :class:`~.args.BCEWithLogitsArgs`."""

from __future__ import annotations

import numpy as np

from xloss.containers import to_numpy
from xloss.memory import one_call
from xloss.validation import broadcast_weight, contiguous, float_array, operand, output, reduction_name, upstream_grad

from .args import BCEWithLogitsArgs


@one_call
def bce_with_logits_args(x, y, grad, *, weight, pos_weight, reduction, mode, out=None,
                         grad_out=None) -> BCEWithLogitsArgs:
    x_raw = float_array(x, "x")
    x = contiguous(x_raw, "x")
    dt = x.dtype
    y_raw = to_numpy(y, "y")
    y = operand(y_raw, "y", dt, x.shape, allow_int=True)  # torch takes any real target: no [0, 1] check
    reduction = reduction_name(reduction)
    weight = None if weight is None else broadcast_weight(weight, "weight", x.shape, dt)
    pos_weight = None if pos_weight is None else broadcast_weight(pos_weight, "pos_weight", x.shape, dt)
    g = None if mode == "forward" else upstream_grad(grad, reduction, x.shape, dt)
    inputs = {"x": x_raw, "y": y_raw, "weight": weight, "pos_weight": pos_weight,
              "grad": g if isinstance(g, np.ndarray) else None}
    loss_out = grad_out_arr = None
    if mode in ("forward", "forward+grad"):
        loss_out = output(out, "out", x.shape if reduction == "none" else (), dt, inputs)
    if mode in ("grad", "forward+grad"):
        grad_out_arr = output(grad_out, "out", x.shape, dt,
                              {**inputs, "the loss output": loss_out} if out is not None else inputs)
    return BCEWithLogitsArgs(x=x, y=y, weight=weight, pos_weight=pos_weight, reduction=reduction, mode=mode,
                             grad=g, loss_out=loss_out, grad_out=grad_out_arr)
