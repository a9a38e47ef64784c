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
from .dtypes import FLOAT_DTYPES, float_name
from .errors import XLossTypeError, XLossValueError
from .kernels import REDUCTIONS
from .memory import ensure_fits

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
    if not -math.inf < v < math.inf:  # isfinite, as comparisons: torch.compile(dynamic=True) guards on them
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


# -- the names that moved ----------------------------------------------------------------


def __getattr__(name):
    """The kernels' validators live in their families (``xloss.kernels.<family>``); the names stay
    readable here for code written against this module."""
    from .kernels import linked_named

    found = linked_named("validator", name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found
