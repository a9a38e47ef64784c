"""Argument checking of the cross-entropy rows: the caller's arguments to :class:`~.args.CrossEntropyArgs`
and :class:`~.args.CrossEntropyGradArgs` (the generic helpers are :mod:`xloss.validation`'s)."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.containers import to_numpy
from xloss.dtypes import float_name
from xloss.errors import XLossTypeError, XLossValueError
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

from ..nll.validate import class_indices
from .args import CrossEntropyArgs, CrossEntropyGradArgs, CrossEntropyWithGradArgs, SoftmaxCrossEntropyArgs

TARGET_DTYPES = ("int64", "int32")


def _logits(obj, name: str) -> tuple[np.ndarray, np.ndarray]:
    raw = float_array(obj, name)
    if raw.ndim != 2:
        raise XLossValueError(f"{name} must have shape (N, C) (class scores per row; move the class axis of an "
                              f"N-d input last and flatten, as xloss.torch.cross_entropy does); got "
                              f"{shape_text(raw.shape)}")
    if raw.shape[1] == 0:
        raise XLossValueError(f"{name} must have at least one class (C >= 1); got {shape_text(raw.shape)}")
    return raw, contiguous(raw, name)


def _target(target, rows: int, classes: int, ignore_index: int, shape, of: str) -> np.ndarray:
    t = to_numpy(target, "target")
    if t.dtype.kind == "f" or float_name(t.dtype) is not None:
        raise XLossTypeError(f"target must hold class indices (int64 or int32); got {t.dtype} (probability "
                             "targets are not class indices: use a dense-label cross entropy)")
    if t.dtype.name not in TARGET_DTYPES:
        raise XLossTypeError(f"target must have dtype int64 or int32; got {t.dtype}")
    if t.shape != (rows,):
        raise XLossValueError(f"target must have shape ({rows},) for {of} of shape {shape_text(shape)}; got "
                              f"{shape_text(t.shape)}")
    t = contiguous(t, "target")
    class_indices(t, classes, ignore_index)
    return t


def _smoothing(label_smoothing) -> float:
    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls <= 1.0:
        raise XLossValueError(f"label_smoothing must lie in [0, 1]; got {ls}")
    return ls


def _zloss_scale(scale) -> float:
    s = real_number(scale, "lse_square_scale_for_zloss")
    if s < 0.0:
        raise XLossValueError(f"lse_square_scale_for_zloss must be >= 0; got {s}")
    return s


def _weight(weight, classes: int, dt) -> np.ndarray | None:
    """Class weights in the compute dtype (a float32 weight with 16-bit logits is kept exact)."""
    if weight is None:
        return None
    return operand(weight, "weight", xdt.compute_dtype(float_name(dt)), (classes,))


@one_call
def cross_entropy_args(input, target, *, weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale_for_zloss, return_zloss, return_log_prob, loss_out=None,
                       log_prob_out=None) -> CrossEntropyArgs:
    raw, x = _logits(input, "input")
    (n, c), dt = x.shape, x.dtype
    ignore_index = integer(ignore_index, "ignore_index")
    t = _target(target, n, c, ignore_index, x.shape, "input")
    reduction = reduction_name(reduction)
    ls, scale = _smoothing(label_smoothing), _zloss_scale(lse_square_scale_for_zloss)
    if not isinstance(return_zloss, bool) or not isinstance(return_log_prob, bool):
        raise XLossTypeError("return_zloss and return_log_prob must be bools")
    w = _weight(weight, c, dt)
    inputs = {"input": raw, "target": t, "weight": w}
    loss_shape = (n,) if reduction == "none" else ()
    loss = output(loss_out, "loss_out", loss_shape, dt, inputs)
    want_log_prob = return_log_prob or log_prob_out is not None
    log_prob = output(log_prob_out, "log_prob_out", x.shape, dt, {**inputs, "loss_out": loss}) if want_log_prob \
        else None
    zloss = np.empty(loss_shape, dt) if return_zloss else None
    lse = np.empty(n, dt) if scale != 0.0 else None
    return CrossEntropyArgs(input=x, target=t, weight=w, reduction=reduction, ignore_index=ignore_index,
                            label_smoothing=ls, zloss_scale=scale, loss_out=loss, log_prob_out=log_prob,
                            zloss_out=zloss, lse_out=lse)


def _same_buffer(out, log_prob: np.ndarray) -> bool:
    """``out`` is ``log_prob``'s very memory (the backward in place: each element is read before it is
    written, on every backend); a partial overlap is still refused."""
    if out is None:
        return False
    o = to_numpy(out, "out")
    return (o.shape == log_prob.shape and o.dtype == log_prob.dtype and o.strides == log_prob.strides
            and o.__array_interface__["data"][0] == log_prob.__array_interface__["data"][0])


@one_call
def cross_entropy_grad_args(grad, log_prob, target, *, weight, reduction, ignore_index, label_smoothing,
                            lse_square_scale_for_zloss, grad_zloss, lse_for_zloss, out=None) -> CrossEntropyGradArgs:
    raw, lp = _logits(log_prob, "log_prob")
    (n, c), dt = lp.shape, lp.dtype
    ignore_index = integer(ignore_index, "ignore_index")
    t = _target(target, n, c, ignore_index, lp.shape, "log_prob")
    reduction = reduction_name(reduction)
    ls, scale = _smoothing(label_smoothing), _zloss_scale(lse_square_scale_for_zloss)
    w = _weight(weight, c, dt)
    g = upstream_grad(grad, reduction, (n,), dt)
    gz = None if grad_zloss is None else upstream_grad(grad_zloss, reduction, (n,), dt, name="grad_zloss")
    if scale != 0.0:
        if lse_for_zloss is None:
            raise XLossValueError("lse_for_zloss (the forward's log-sum-exp per row) is required when "
                                  "lse_square_scale_for_zloss is nonzero")
        lse = operand(lse_for_zloss, "lse_for_zloss", dt, (n,))
    else:
        lse = None  # unused without a z-loss (as CANN's: the optional inputs take no part)
        gz = None
    arrays = {"grad": g, "grad_zloss": gz}
    inputs = {"log_prob": None if _same_buffer(out, lp) else raw, "target": t, "weight": w, "lse_for_zloss": lse,
              **{k: v if isinstance(v, np.ndarray) else None for k, v in arrays.items()}}
    return CrossEntropyGradArgs(grad=g, log_prob=lp, target=t, weight=w, grad_zloss=gz, lse_for_zloss=lse,
                                reduction=reduction, ignore_index=ignore_index, label_smoothing=ls,
                                zloss_scale=scale, out=output(out, "out", lp.shape, dt, inputs))


@one_call
def softmax_cross_entropy_args(features, labels, *, loss_out=None, backprop_out=None) -> SoftmaxCrossEntropyArgs:
    raw, x = _logits(features, "features")
    y_raw = float_array(labels, "labels")
    if y_raw.shape != x.shape:
        raise XLossValueError(f"labels must have features' shape {shape_text(x.shape)} (one distribution per row; "
                              f"class indices go to cross_entropy_loss); got {shape_text(y_raw.shape)}")
    y = operand(y_raw, "labels", x.dtype, x.shape)
    inputs = {"features": raw, "labels": y_raw}
    loss = output(loss_out, "loss_out", (x.shape[0],), x.dtype, inputs)
    backprop = output(backprop_out, "backprop_out", x.shape, x.dtype, {**inputs, "loss_out": loss})
    return SoftmaxCrossEntropyArgs(features=x, labels=y, loss_out=loss, backprop_out=backprop)


@one_call
def cross_entropy_with_grad_args(input, target, grad, *, weight, reduction, ignore_index, label_smoothing,
                                 loss_out=None, grad_out=None) -> CrossEntropyWithGradArgs:
    raw, x = _logits(input, "input")
    (n, c), dt = x.shape, x.dtype
    ignore_index = integer(ignore_index, "ignore_index")
    t = _target(target, n, c, ignore_index, x.shape, "input")
    reduction = reduction_name(reduction)
    ls = _smoothing(label_smoothing)
    w = _weight(weight, c, dt)
    g = upstream_grad(grad, reduction, (n,), dt)
    inputs = {"input": raw, "target": t, "weight": w, "grad": g if isinstance(g, np.ndarray) else None}
    loss = output(loss_out, "loss_out", (n,) if reduction == "none" else (), dt, inputs)
    dx = output(grad_out, "grad_out", x.shape, dt, {**inputs, "loss_out": loss})
    return CrossEntropyWithGradArgs(input=x, target=t, weight=w, reduction=reduction, ignore_index=ignore_index,
                                    label_smoothing=ls, grad=g, loss_out=loss, grad_out=dx)
