"""Argument checking of the BCE forward: the caller's arguments to :class:`~.forward_args.BCELossArgs`."""

from __future__ import annotations

from xloss.containers import to_numpy
from xloss.memory import one_call
from xloss.validation import broadcast_weight, contiguous, float_array, operand, output, reduction_name, unit_interval

from .forward_args import BCELossArgs


@one_call
def bce_loss_args(x, y, *, weight, reduction, out=None) -> BCELossArgs:
    x_raw = float_array(x, "x")
    x = contiguous(x_raw, "x")
    unit_interval(x, "x", "BCE takes probabilities, as torch.nn.functional.binary_cross_entropy")
    dt = x.dtype
    y_raw = to_numpy(y, "y")
    y = operand(y_raw, "y", dt, x.shape, allow_int=True)
    reduction = reduction_name(reduction)
    weight = None if weight is None else broadcast_weight(weight, "weight", x.shape, dt)
    inputs = {"x": x_raw, "y": y_raw, "weight": weight}
    return BCELossArgs(x=x, y=y, weight=weight, reduction=reduction,
                       out=output(out, "out", x.shape if reduction == "none" else (), dt, inputs))
