"""Argument checking of the NLL-loss forward: the caller's arguments to :class:`~.forward_args.NLLLossArgs`."""

from __future__ import annotations

from xloss.containers import to_numpy
from xloss.errors import XLossTypeError, XLossValueError
from xloss.memory import one_call
from xloss.validation import contiguous, float_array, integer, operand, output, reduction_name, shape_text

from .forward_args import NLLLossArgs
from .validate import class_indices


@one_call
def nll_loss_args(self, target, *, weight, reduction, ignore_index, out=None, total_weight_out=None) -> NLLLossArgs:
    s_raw = float_array(self, "self")
    if s_raw.ndim == 0:
        raise XLossValueError("self must have shape (C), (N, C) or (N, C, d1, ..., dk); got ()")
    s = contiguous(s_raw, "self")
    dt = s.dtype
    classes = s.shape[1] if s.ndim >= 2 else s.shape[0]
    t_raw = to_numpy(target, "target")
    if t_raw.dtype.kind not in "iu" or t_raw.dtype.name not in ("int64", "int32", "uint8"):
        raise XLossTypeError(f"target must have dtype int64, int32 or uint8; got {t_raw.dtype}")
    t_shape = (s.shape[0], *s.shape[2:]) if s.ndim >= 2 else ()
    if t_raw.shape != t_shape:
        raise XLossValueError(f"target must have shape {shape_text(t_shape)} for self of shape {shape_text(s.shape)}; "
                              f"got {shape_text(t_raw.shape)}")
    t = contiguous(t_raw, "target")
    reduction = reduction_name(reduction)
    ignore_index = integer(ignore_index, "ignore_index")
    class_indices(t, classes, ignore_index)
    weight_raw = weight
    weight = None if weight is None else operand(weight, "weight", dt, (classes,))
    inputs = {"self": s_raw, "target": t_raw, "weight": None if weight_raw is None else weight}
    loss = output(out, "out", t_shape if reduction == "none" else (), dt, inputs)
    tw = output(total_weight_out, "total_weight_out", (), dt, {**inputs, "out": loss})
    return NLLLossArgs(self=s, target=t, weight=weight, reduction=reduction, ignore_index=ignore_index, out=loss,
                       total_weight_out=tw)
