"""Argument checking of the NLL-loss backward: the caller's arguments to :class:`~.args.NLLArgs`
(the generic helpers are :mod:`xloss.validation`'s)."""

from __future__ import annotations

import numpy as np

from xloss.containers import to_numpy
from xloss.errors import XLossIndexError, XLossTypeError, XLossValueError
from xloss.memory import one_call
from xloss.validation import (
    contiguous,
    float_array,
    integer,
    operand,
    output,
    real_number,
    reduction_name,
    shape_text,
    upstream_grad,
)

from .args import NLLArgs


def class_indices(target: np.ndarray, classes: int, ignore_index: int) -> None:
    """Refuse, with :class:`XLossIndexError` naming the first such row, a target outside [0, C) that is
    not ``ignore_index``."""
    t = target.reshape(-1).astype(np.int64, copy=False)
    bad = (t != ignore_index) & ((t < 0) | (t >= classes))
    if bad.any():
        row = int(np.argmax(bad))
        where = f"target[{row}]" if target.ndim else "target"
        raise XLossIndexError(f"{where} = {int(t[row])} is out of range: class indices must lie in [0, {classes}) "
                              f"or equal ignore_index={ignore_index}")


@one_call
def nll_args(grad, self, target, *, weight, reduction, ignore_index, total_weight, out=None) -> NLLArgs:
    s_raw = float_array(self, "self")
    if s_raw.ndim == 0:
        raise XLossValueError("self must have shape (C), (N, C) or (N, C, d1, ..., dk); got ()")
    s = contiguous(s_raw, "self")
    dt, classes = s.dtype, s.shape[1] if s.ndim >= 2 else s.shape[0]
    t = to_numpy(target, "target")
    if t.dtype.kind not in "iu" or t.dtype.name not in ("int64", "int32", "uint8"):
        raise XLossTypeError(f"target must have dtype int64, int32 or uint8; got {t.dtype}")
    t_shape = (s.shape[0], *s.shape[2:]) if s.ndim >= 2 else ()
    if t.shape != t_shape:
        raise XLossValueError(f"target must have shape {shape_text(t_shape)} for self of shape {shape_text(s.shape)}; "
                              f"got {shape_text(t.shape)}")
    t = contiguous(t, "target")
    reduction = reduction_name(reduction)
    ignore_index = integer(ignore_index, "ignore_index")
    class_indices(t, classes, ignore_index)
    weight = None if weight is None else operand(weight, "weight", dt, (classes,))
    if total_weight is None:  # resolved here, once: the sum of weight[target] over the positions not ignored
        t64 = t.reshape(-1).astype(np.int64, copy=False)
        kept = t64[t64 != ignore_index]
        total_weight = float(kept.size) if weight is None else float(weight[kept].sum(dtype=np.float64))
    else:
        total_weight = real_number(total_weight, "total_weight")
    g = upstream_grad(grad, reduction, t_shape, dt, per_element=s.ndim >= 2)
    inputs = {"self": s_raw, "target": t, "weight": weight, "grad": g if isinstance(g, np.ndarray) else None}
    return NLLArgs(self=s, target=t, weight=weight, grad=g, reduction=reduction, ignore_index=ignore_index,
                   total_weight=total_weight, out=output(out, "out", s.shape, dt, inputs))
