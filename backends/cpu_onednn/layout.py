"""How the elementwise kernels walk their data: fixed blocks, and broadcast weights as runs.

Work is cut into blocks of :data:`BLOCK` elements, whatever the thread count. Threads take
whole blocks, each block's partial sum lands in its own slot, and the slots are summed in a
fixed order afterwards, so reduced results do not depend on how many threads ran.

A weight that broadcasts to x (``weight.ndim == x.ndim``, every dim 1 or x's) is not
expanded when its full dims form one contiguous run: then element ``i`` of the flattened x
uses ``weight.flat[(i // rep) % period]``. With ``rep == 1`` the kernel walks the weight
alongside x in contiguous stretches (per-column weights, or a full weight); with ``rep > 1``
the weight is constant over stretches of ``rep`` elements (per-row / per-anchor weights).
Other patterns, and stretches too short to be worth a loop, are expanded once.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import njit

from .access import storage_view
from .intrinsics import inline_me
from .threads import serial_only

#: Elements per block: a multiple of every SIMD width, small enough for L1/L2-resident scratch.
BLOCK = 8192
#: Stretches shorter than this expand the weight instead (loop overhead per stretch).
MIN_RUN = 32


def n_blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


class Broadcast(NamedTuple):
    values: np.ndarray  # flat, storage type
    rep: int
    period: int


def broadcast_plan(weight: np.ndarray | None, shape, ones: np.ndarray) -> Broadcast:
    """The (values, rep, period) walk of ``weight`` over an array of ``shape`` (x's)."""
    n = math.prod(shape)
    if weight is None:
        return Broadcast(ones, max(n, 1), 1)  # constant 1 everywhere
    full = [d for d, (w, s) in enumerate(zip(weight.shape, shape)) if w == s and s != 1]
    flat = storage_view(np.ascontiguousarray(weight)).reshape(-1)
    if not full:
        return Broadcast(flat, max(n, 1), 1)  # one value
    first, last = full[0], full[-1]
    if all(weight.shape[d] == shape[d] for d in range(first, last + 1)):
        period = math.prod(shape[first:last + 1])
        rep = math.prod(shape[last + 1:])
        if period == n or (rep == 1 and period >= MIN_RUN) or rep >= MIN_RUN:
            return Broadcast(flat, rep, period)
    expanded = np.ascontiguousarray(np.broadcast_to(weight, shape))
    return Broadcast(storage_view(expanded).reshape(-1), 1, n)


def tiled(plan: Broadcast) -> Broadcast:
    """``plan`` with a short contiguous period (``rep == 1``, period below :data:`BLOCK`) repeated
    to at least BLOCK values: element ``i`` still takes ``values[i % period]``, but a block is then
    walked in one or two stretches instead of one per period, so the kernel's loop runs at full
    SIMD width instead of in short trips with a narrow remainder each (80 classes: 64 + 16)."""
    if plan.rep != 1 or plan.period >= BLOCK:
        return plan
    copies = -(-BLOCK // plan.period)
    return Broadcast(np.tile(plan.values[:plan.period], copies), 1, plan.period * copies)


_ones_cache: dict = {}


def ones_block(dtype: np.dtype) -> np.ndarray:
    """A BLOCK-long array of ones in the storage type of ``dtype`` (the multiplier where a
    weight or upstream gradient is absent or constant); never written."""
    key = np.dtype(dtype)
    arr = _ones_cache.get(key)
    if arr is None:
        arr = _ones_cache[key] = storage_view(np.ones(BLOCK, dtype=key))
    return arr


@njit(error_model="numpy")
def stretch(pos, end_block, w_rep, w_period):
    """``(end, offset, index)`` of the stretch of elements from ``pos`` on which the weight
    layout is uniform: with ``index < 0`` element ``pos + j`` takes ``weight[offset + j]``;
    otherwise the whole stretch takes ``weight[index]``."""
    inline_me()
    if w_rep == 1:
        wo = pos % w_period
        return min(end_block, pos + (w_period - wo)), wo, -1
    k = pos // w_rep
    return min(end_block, (k + 1) * w_rep), 0, k % w_period


#: Below this many elements a kernel runs on the calling thread only: waking the pool costs
#: more than the work (tens of microseconds idle, milliseconds when other processes hold the
#: cores). Results are the same either way (fixed blocks).
SERIAL_MAX = 4 * BLOCK


@contextlib.contextmanager
def threads_for(n: int):
    """Run the enclosed kernel calls single-threaded when ``n`` elements are too few to share.
    (The backend holds SIGINT around its calls, so the restore below cannot be skipped by a
    KeyboardInterrupt: ``threads.py``.)"""
    if n > SERIAL_MAX or serial_only():
        yield
        return
    before = numba.get_num_threads()
    if before == 1:
        yield
        return
    try:
        numba.set_num_threads(1)
        yield
    finally:
        numba.set_num_threads(before)
