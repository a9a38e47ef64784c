"""Argument checking, once, in front of every backend.

Each ``*_args`` function turns what a caller passed into the validated arguments of
:mod:`xloss.kernel_args`, or raises an :class:`~xloss.errors.XLossError` subclass whose message
names the argument, what was given and what was expected. Nothing is written before these
functions return: output buffers are checked here and only filled by the backend afterwards.

Conversions (documented in the README): float operands are brought to the primary input's
dtype (targets may be bool, integer or any float); FLCE's per-token float operands to the
compute dtype; non-contiguous inputs are copied to contiguous ones.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .containers import output_view, to_numpy
from .dtypes import FLOAT_DTYPES, compute_dtype, float_name
from .errors import XLossTypeError, XLossValueError
from .kernel_args import BCEArgs, FLCEArgs, FocalArgs, LossWithMaxSumArgs, OnlineMaxSumArgs
from .kernels import BCE_GRAD, REDUCTIONS
from .memory import ensure_fits, one_call

_FLOAT_NAMES = ", ".join(FLOAT_DTYPES)


def shape_text(s) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


# -- scalars --------------------------------------------------------------------------


def real_number(value, name: str) -> float:
    """A finite real number (Python/NumPy number or one-element array)."""
    if isinstance(value, (bool, np.bool_)):
        raise XLossTypeError(f"{name} must be a real number, got a bool")
    if isinstance(value, numbers.Real):
        try:
            v = float(value)
        except OverflowError:  # an integer beyond float64's range
            raise XLossValueError(f"{name} must be finite, got an integer of {int(value).bit_length()} bits") from None
    else:
        arr = to_numpy(value, name)
        if arr.size != 1 or arr.dtype.kind not in "fiu" and float_name(arr.dtype) is None:
            raise XLossTypeError(f"{name} must be a real number or a one-element array, got shape "
                                 f"{shape_text(arr.shape)} of dtype {arr.dtype}")
        v = float(arr.astype(np.float64).reshape(-1)[0])
    if not math.isfinite(v):
        raise XLossValueError(f"{name} must be finite, got {v}")
    return v


_INT64 = np.iinfo(np.int64)


def integer(value, name: str) -> int:
    """A Python or NumPy integer that fits int64 (every index crosses a kernel as one)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise XLossTypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not _INT64.min <= v <= _INT64.max:
        raise XLossValueError(f"{name} must fit in int64 [{_INT64.min}, {_INT64.max}]; got {v}")
    return v


def reduction_name(reduction) -> str:
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise XLossValueError(f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}; got {reduction!r}")
    return reduction


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


# -- arrays -----------------------------------------------------------------------------


def float_array(obj, name: str) -> np.ndarray:
    arr = to_numpy(obj, name)
    if float_name(arr.dtype) is None:
        raise XLossTypeError(f"{name} must have a floating dtype ({_FLOAT_NAMES}); got {arr.dtype}")
    return arr


def contiguous(arr: np.ndarray, name: str) -> np.ndarray:
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    if arr.flags.c_contiguous:
        return arr
    ensure_fits(arr.size * arr.itemsize, f"a contiguous copy of {name} {shape_text(arr.shape)}")
    return arr.copy(order="C")


def operand(obj, name: str, dtype: np.dtype, shape=None, *, allow_int=False) -> np.ndarray:
    """A float (or, with ``allow_int``, bool/integer) operand of the given shape, as ``dtype``."""
    arr = to_numpy(obj, name)
    kinds = "fbiu" if allow_int else "f"
    if arr.dtype.kind not in kinds and float_name(arr.dtype) is None:
        what = "a floating, integer or bool" if allow_int else "a floating"
        raise XLossTypeError(f"{name} must have {what} dtype; got {arr.dtype}")
    if float_name(arr.dtype) is None and arr.dtype.kind == "f":
        raise XLossTypeError(f"{name} has unsupported floating dtype {arr.dtype} (supported: {_FLOAT_NAMES})")
    if shape is not None and arr.shape != tuple(shape):
        raise XLossValueError(f"{name} must have shape {shape_text(shape)}; got {shape_text(arr.shape)}")
    if arr.dtype != dtype:
        ensure_fits(arr.size * np.dtype(dtype).itemsize, f"converting {name} to {float_name(dtype) or dtype}")
    return contiguous(arr.astype(dtype, copy=False), name)


#: Bit pattern of 1.0 per float width: non-negative floats order as their bits, so one unsigned
#: maximum tells whether every element lies in [+0, 1] (the common case, one fast pass).
_ONE_BITS = {np.dtype(np.float16): (np.uint16, 0x3C00), np.dtype("bfloat16"): (np.uint16, 0x3F80),
             np.dtype(np.float32): (np.uint32, 0x3F800000), np.dtype(np.float64): (np.uint64, 0x3FF0000000000000)}


def unit_interval(arr: np.ndarray, name: str, what: str) -> None:
    """Refuse elements outside [0, 1] (NaN passes: it propagates to the result, as documented)."""
    if arr.size == 0 or arr.dtype == np.bool_:
        return
    if arr.dtype.kind in "iu":
        if arr.min() >= 0 and arr.max() <= 1:
            return
    else:
        utype, one = _ONE_BITS[arr.dtype]
        if int(arr.view(utype).max()) <= one:
            return
        with np.errstate(invalid="ignore"):
            if np.fmin.reduce(arr, axis=None) >= 0 and np.fmax.reduce(arr, axis=None) <= 1:
                return  # only -0.0 or NaN set the high bits

    bad = (arr < 0) | (arr > 1)
    where = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
    raise XLossValueError(f"{name} must lie in [0, 1] ({what}); {name}[{', '.join(map(str, where))}] = "
                          f"{arr[where].item()!r}")


def broadcast_weight(obj, name: str, shape, dtype) -> np.ndarray:
    """An operand broadcastable *to* ``shape``, left-padded to its ndim (not expanded)."""
    arr = operand(obj, name, dtype)
    if arr.ndim > len(shape) or any(w not in (1, s) for w, s in zip(arr.shape[::-1], shape[::-1])):
        raise XLossValueError(f"{name} of shape {shape_text(arr.shape)} does not broadcast to {shape_text(shape)}")
    return arr.reshape((1,) * (len(shape) - arr.ndim) + arr.shape)


def upstream_grad(grad, reduction: str, shape, dtype, name="grad", *, per_element=True):
    """The upstream gradient: a float, or (``none`` and ``per_element``) an array of ``shape``."""
    arr = to_numpy(grad, name) if not isinstance(grad, numbers.Real) else None
    if arr is None or (arr.ndim == 0 and arr.size == 1):
        return real_number(grad, name)
    if reduction == "none" and per_element:
        return operand(arr, name, dtype, shape)
    if arr.size == 1:
        return real_number(arr, name)
    expected = f"a scalar or an array of shape {shape_text(shape)}" if reduction == "none" else "a scalar (one element)"
    raise XLossValueError(f"{name} must be {expected} for reduction={reduction!r}; got shape {shape_text(arr.shape)}")


def output(out, name: str, shape, dtype, inputs) -> np.ndarray:
    """The caller's ``out`` checked (shape, dtype, contiguity, writeable, no overlap), or a new array."""
    if out is None:
        ensure_fits(math.prod(shape) * np.dtype(dtype).itemsize, f"the result {shape_text(shape)}")
        return np.empty(shape, dtype=dtype)
    arr = output_view(out, name)
    if arr.shape != tuple(shape):
        raise XLossValueError(f"{name} must have shape {shape_text(shape)}; got {shape_text(arr.shape)}")
    if arr.dtype != dtype:
        raise XLossTypeError(f"{name} must have dtype {float_name(dtype)}; got {arr.dtype}")
    if not arr.flags.c_contiguous:
        raise XLossValueError(f"{name} must be C-contiguous")
    if not arr.flags.writeable:
        raise XLossValueError(f"{name} is read-only")
    for other_name, other in inputs.items():
        if other is not None and np.may_share_memory(arr, other):
            raise XLossValueError(f"{name} overlaps input {other_name}; pass a separate buffer")
    return arr


# -- kernels ----------------------------------------------------------------------------


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
        grad_out_arr = output(grad_out, "out", x.shape, dt,
                              {**inputs, "the loss output": loss_out} if out is not None else inputs)
    return FocalArgs(x=x, y=y, weight=weight, alpha=alpha, gamma=gamma, reduction=reduction, mode=mode, grad=g,
                     loss_out=loss_out, grad_out=grad_out_arr)


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
    if eps_mode not in BCE_GRAD.axes["eps_mode"]:
        raise XLossValueError(f"eps_mode must be 'clamp' (max(x(1-x), eps)) or 'add' (x(1-x) + eps); got {eps_mode!r}")
    weight = None if weight is None else broadcast_weight(weight, "weight", x.shape, dt)
    g = upstream_grad(grad, reduction, x.shape, dt)
    inputs = {"x": x_raw, "y": y_raw, "weight": weight, "grad": g if isinstance(g, np.ndarray) else None}
    return BCEArgs(x=x, y=y, weight=weight, grad=g, reduction=reduction, eps=eps, eps_mode=eps_mode,
                   out=output(out, "out", x.shape, dt, inputs))


@one_call
def flce_args(grad, input, weight, target_mask, masked_target, *, logits_max, sum_exp_logits, softmax,
              label_smoothing, vocab_size, input_grad_out=None, weight_grad_out=None) -> FLCEArgs:
    inp, w = _linear_operands(input, weight)
    bt, hidden = inp.shape
    v = w.shape[0]
    cdt = compute_dtype(float_name(inp.dtype))
    g = operand(grad, "grad", cdt, (bt,))

    m = to_numpy(target_mask, "target_mask")
    if m.dtype == np.bool_:
        fmt = "bool"
        if m.shape != (bt,):
            raise XLossValueError(f"target_mask (bool) must have shape ({bt},), one per token; "
                                  f"got {shape_text(m.shape)}")
    elif m.dtype == np.uint8:
        fmt = "bitpacked"
        if m.shape != ((bt + 7) // 8,):
            raise XLossValueError(f"target_mask (uint8, bit-packed LSB first) must have shape ({(bt + 7) // 8},) "
                                  f"for BT={bt}; got {shape_text(m.shape)}")
    else:
        raise XLossTypeError("target_mask must be bool (one per token) or uint8 (bit-packed, LSB first); "
                             f"got {m.dtype}")
    m = contiguous(m, "target_mask")

    mt = to_numpy(masked_target, "masked_target")
    if mt.dtype.name not in ("int32", "int64"):
        raise XLossTypeError(f"masked_target must have dtype int32 or int64; got {mt.dtype}")
    if mt.shape != (bt,):
        raise XLossValueError(f"masked_target must have shape ({bt},); got {shape_text(mt.shape)}")
    mt = contiguous(mt, "masked_target")
    if mt.size and (mt.min() < 0 or mt.max() >= v):
        row = int(np.argmax((mt < 0) | (mt >= v)))
        raise XLossValueError(f"masked_target[{row}] = {int(mt[row])} is out of range: local targets must lie in "
                              f"[0, {v}) (use 0 where target_mask is set)")

    if softmax is not None:
        if logits_max is not None or sum_exp_logits is not None:
            raise XLossValueError("pass either softmax (softmax mode) or logits_max and sum_exp_logits "
                                  "(recompute mode), not both")
        mode, lm, se = "softmax", None, None
        sm = operand(softmax, "softmax", cdt, (bt, v))
    else:
        if logits_max is None or sum_exp_logits is None:
            missing = "logits_max" if logits_max is None else "sum_exp_logits"
            raise XLossValueError(f"{missing} is required in recompute mode (no softmax given): pass softmax, "
                                  "or both logits_max and sum_exp_logits")
        mode, sm = "recompute", None
        lm = operand(logits_max, "logits_max", cdt, (bt,))
        se = operand(sum_exp_logits, "sum_exp_logits", cdt, (bt,))

    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls < 1.0:
        raise XLossValueError(f"label_smoothing must be in [0, 1); got {ls}")
    k = v if vocab_size is None else integer(vocab_size, "vocab_size")
    if k < v or (ls and k < 1):
        raise XLossValueError("vocab_size (the global vocabulary size) must be >= this shard's "
                              f"V={v} and >= 1; got {k}")

    dt = inp.dtype
    inputs = {"input": inp, "weight": w, "grad": g, "target_mask": m, "masked_target": mt, "softmax": sm,
              "logits_max": lm, "sum_exp_logits": se}
    gi = output(input_grad_out, "input_grad_out", (bt, hidden), dt, inputs)
    gw = output(weight_grad_out, "weight_grad_out", (v, hidden), dt, {**inputs, "input_grad_out": gi})
    return FLCEArgs(grad=g, input=inp, weight=w, target_mask=m, mask_format=fmt, masked_target=mt, mode=mode,
                    logits_max=lm, sum_exp_logits=se, softmax=sm, label_smoothing=ls, vocab_size=k,
                    input_grad_out=gi, weight_grad_out=gw,
                    outputs_given=input_grad_out is not None or weight_grad_out is not None)


def _linear_operands(input, weight):
    """``input`` (BT, H) and ``weight`` (V, H) of one float dtype, C-contiguous."""
    inp = contiguous(float_array(input, "input"), "input")
    if inp.ndim != 2:
        raise XLossValueError(f"input must have shape (BT, H); got {shape_text(inp.shape)}")
    w = contiguous(float_array(weight, "weight"), "weight")
    if w.ndim != 2 or w.shape[1] != inp.shape[1]:
        raise XLossValueError(f"weight must have shape (V, {inp.shape[1]}) to match input (BT, H)="
                              f"{shape_text(inp.shape)}; got {shape_text(w.shape)}")
    if w.dtype != inp.dtype:
        raise XLossTypeError(f"weight dtype {float_name(w.dtype)} must match input dtype {float_name(inp.dtype)}")
    return inp, w


MASK_FORMATS = ("bitpacked", "bool")


@one_call
def online_max_sum_args(input, weight, target, vocab_start, vocab_end=None, *, return_logits=False,
                        mask_format="bitpacked") -> OnlineMaxSumArgs:
    inp, w = _linear_operands(input, weight)
    (bt, _), v = inp.shape, w.shape[0]
    if v < 1:
        raise XLossValueError("weight must hold at least one vocabulary row (V >= 1); got V=0")
    t = to_numpy(target, "target")
    if t.dtype.name not in ("int32", "int64"):
        raise XLossTypeError(f"target must have dtype int32 or int64; got {t.dtype}")
    if t.shape != (bt,):
        raise XLossValueError(f"target must have shape ({bt},), one per token; got {shape_text(t.shape)}")
    t = contiguous(t, "target")
    start = integer(vocab_start, "vocab_start")
    end = start + v if vocab_end is None else integer(vocab_end, "vocab_end")
    if start < 0 or not start <= end <= start + v:
        raise XLossValueError(f"the shard's rows [vocab_start, vocab_end) must satisfy 0 <= vocab_start <= vocab_end "
                              f"<= vocab_start + V (V={v}); got vocab_start={start}, vocab_end={end}")
    if t.dtype == np.int32 and end > np.iinfo(np.int32).max:
        raise XLossValueError(f"vocab_end={end} does not fit target's dtype int32")
    if mask_format not in MASK_FORMATS:
        raise XLossValueError(f"mask_format must be one of {', '.join(map(repr, MASK_FORMATS))}; got {mask_format!r}")
    if not isinstance(return_logits, (bool, np.bool_)):
        raise XLossTypeError(f"return_logits must be a bool; got {return_logits!r}")
    cdt = compute_dtype(float_name(inp.dtype))
    inputs = {"input": inp, "weight": w, "target": t}
    stats = [output(None, name, (bt,), cdt, inputs) for name in ("logits_max", "sum_exp_logits", "predicted_logits")]
    mask = (output(None, "target_mask", ((bt + 7) // 8,), np.uint8, inputs) if mask_format == "bitpacked"
            else output(None, "target_mask", (bt,), np.bool_, inputs))
    masked = output(None, "masked_target", (bt,), t.dtype, inputs)
    logits = output(None, "vocab_parallel_logits", (bt, v), inp.dtype, inputs) if return_logits else None
    return OnlineMaxSumArgs(input=inp, weight=w, target=t, vocab_start=start, vocab_end=end, mask_format=mask_format,
                            logits_max_out=stats[0], sum_exp_out=stats[1], predicted_out=stats[2],
                            target_mask_out=mask, masked_target_out=masked, logits_out=logits)


@one_call
def loss_with_max_sum_args(logits_max, sum_exp_logits, predicted_logits, *, vocab_parallel_logits=None,
                           label_smoothing=0.0) -> LossWithMaxSumArgs:
    ls = real_number(label_smoothing, "label_smoothing")
    if ls != 0.0:
        raise XLossValueError(f"label_smoothing must be 0 (the vocabulary-parallel loss has no smoothing term; "
                              f"CANN's operator accepts only 0); got {ls}")
    if vocab_parallel_logits is not None:
        logits = contiguous(float_array(vocab_parallel_logits, "vocab_parallel_logits"), "vocab_parallel_logits")
        if logits.ndim != 2:
            raise XLossValueError(f"vocab_parallel_logits must have shape (BT, V); got {shape_text(logits.shape)}")
        dtype = float_name(logits.dtype)
        cdt = compute_dtype(dtype)
    else:
        logits = None
        first = float_array(logits_max, "logits_max")
        cdt = compute_dtype(float_name(first.dtype))
        dtype = float_name(cdt)
    lm = operand(logits_max, "logits_max", cdt)
    if lm.ndim != 1:
        raise XLossValueError(f"logits_max must have shape (BT,); got {shape_text(lm.shape)}")
    bt = lm.shape[0]
    if logits is not None and logits.shape[0] != bt:
        raise XLossValueError(f"vocab_parallel_logits must have shape ({bt}, V) to match logits_max ({bt},); "
                              f"got {shape_text(logits.shape)}")
    se = operand(sum_exp_logits, "sum_exp_logits", cdt, (bt,))
    pl = operand(predicted_logits, "predicted_logits", cdt, (bt,))
    inputs = {"logits_max": lm, "sum_exp_logits": se, "predicted_logits": pl, "vocab_parallel_logits": logits}
    loss = output(None, "loss", (bt,), cdt, inputs)
    softmax = None if logits is None else output(None, "softmax", logits.shape, cdt, inputs)
    return LossWithMaxSumArgs(logits_max=lm, sum_exp_logits=se, predicted_logits=pl, vocab_parallel_logits=logits,
                              dtype=dtype, label_smoothing=ls, loss_out=loss, softmax_out=softmax)


def __getattr__(name):
    """The kernels' validators live in their families (``xloss.kernels.<family>``); the names stay
    readable here for code written against this module."""
    from .kernels import KERNELS

    for row in KERNELS.values():
        found = row.load("validator")
        if getattr(found, "__name__", None) == name:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
