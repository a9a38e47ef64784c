"""Typed element access: one kernel source for float32, float64, bfloat16 and float16 arrays.

``load(a, i)`` returns element ``i`` in the compute type (float64 for float64 arrays,
float32 otherwise: half types widen); ``store(a, i, v)`` writes ``v`` back in the array's
storage type (half types round to nearest-even). The choice is made at compile time from
the array's dtype — float32/float64 natively, ``uint16`` = bfloat16 bits, ``int16`` =
float16 bits — so each storage type compiles to its own straight-line code.

Indices are taken as unsigned: a signed index makes Numba emit negative-index wraparound,
which LLVM can only vectorize as gathers and scatters. Callers never pass negative ones.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .cache_guard import ensure_fresh
from .halfbits import bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16
from .intrinsics import inline_me

ensure_fresh()  # every kernel module imports this one: check the disk cache before any loads

class _WriteableAlias:
    """Exposes a read-only array's memory as writeable (``__array_interface__``), keeping it alive."""

    def __init__(self, arr: np.ndarray):
        self._base = arr
        self.__array_interface__ = dict(arr.__array_interface__, data=(arr.ctypes.data, False))


def writeable(arr: np.ndarray) -> np.ndarray:
    """``arr``, or a writeable alias of it if it is read-only (see :func:`storage_view`)."""
    return arr if arr.flags.writeable else np.asarray(_WriteableAlias(arr))


def storage_view(arr: np.ndarray) -> np.ndarray:
    """``arr`` as the array type the kernels take (half types viewed as 16-bit integers).

    Read-only inputs come back as a writeable alias of the same memory: Numba compiles a
    separate specialization for every read-only/writeable combination of arguments, and the
    kernels never write their inputs.
    """
    arr = writeable(arr)
    if arr.dtype.kind == "f" and arr.dtype.itemsize in (4, 8):
        return arr
    if arr.dtype == np.float16:
        return arr.view(np.int16)
    if arr.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return arr.view(np.uint16)
    raise TypeError(f"no kernel storage type for dtype {arr.dtype}")


def load(a, i):
    """Element ``i`` of ``a`` widened to the compute type (its implementation is the overload below)."""
    raise TypeError("load() is compiled by Numba only; call it from @njit code")


def store(a, i, v):
    """Write ``v`` to element ``i`` of ``a``, rounded to its storage type (the overload below)."""
    raise TypeError("store() is compiled by Numba only; call it from @njit code")


@overload(load)
def _load(a, i):
    dt = a.dtype
    widen = {types.uint16: bf16_to_f32, types.int16: f16_to_f32}.get(dt)
    if dt in (types.float32, types.float64):
        def impl(a, i):
            inline_me()
            return a[np.uint64(i)]
    elif widen is not None:
        def impl(a, i):
            inline_me()
            return widen(a[np.uint64(i)])
    else:
        return None
    return impl


@overload(store)
def _store(a, i, v):
    dt = a.dtype
    narrow = {types.uint16: f32_to_bf16, types.int16: f32_to_f16}.get(dt)
    if dt in (types.float32, types.float64):
        cast = {types.float32: np.float32, types.float64: np.float64}[dt]

        def impl(a, i, v):
            inline_me()
            a[np.uint64(i)] = cast(v)
    elif narrow is not None:
        def impl(a, i, v):
            inline_me()
            a[np.uint64(i)] = narrow(np.float32(v))
    else:
        return None
    return impl


_BLOCK = 1 << 16


@njit(parallel=True, cache=True, error_model="numpy")
def convert_into(src, dst):
    """dst[i] = src[i] through the compute type (flat arrays): widen, narrow or copy, in parallel."""
    n = src.size
    for b in prange((n + _BLOCK - 1) // _BLOCK):
        for i in range(b * _BLOCK, min(n, (b + 1) * _BLOCK)):
            store(dst, i, load(src, i))
