"""NLL-loss backward: zero the output and scatter one value per position, in one parallel pass.

The output is read as (N, C, D) (D = 1 for (C) and (N, C) input; the dims after the class axis of an
N-d input folded into D), the targets as N*D positions. The output is mostly zeros, so the pass is a
memset in blocks (whole samples, or a range of D of one sample when a sample is large) with one store
per position added; it works on the output's raw bits (float zero is all-zero bits in every dtype), so one
compiled kernel per element width serves every float dtype.

The per-row values ``-w[t_i] * g_i`` (``g_i`` divided by ``total_weight`` for ``mean``) are
computed in float64 with NumPy — N values, negligible next to the N*C output — in the
reference's order of operations, then rounded once to the output dtype. ``mean`` with a
zero total weight gives inf/NaN in the rows that are not ignored, as PyTorch.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import writeable
from .layout import threads_for

#: Output elements per parallel block (whole rows; at least one row).
_BLOCK_ELEMS = 1 << 16
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@njit(parallel=True, cache=True, error_model="numpy")
def nll_kernel(out, classes, inner, target, ignore_index, values):
    """``out`` (flat raw bits, N*C*D) = 0 except ``out[(n*C + t)*D + d] = values[n*D + d]`` for positions
    whose target ``t = target[n*D + d]`` is not ``ignore_index``."""
    samples = target.size // max(inner, 1)
    sample_elems = classes * inner
    per = max(1, _BLOCK_ELEMS // max(sample_elems, 1))  # samples per block
    span = inner if sample_elems <= _BLOCK_ELEMS else max(1, _BLOCK_ELEMS // max(classes, 1))  # of D per block
    pieces = (inner + span - 1) // span
    for b in prange(((samples + per - 1) // per) * pieces):
        s0 = (b // pieces) * per
        s1 = min(samples, s0 + per)
        d0 = (b % pieces) * span
        d1 = min(inner, d0 + span)
        if d0 == 0 and d1 == inner:  # whole samples: one contiguous range
            for k in range(np.uint64(s0 * sample_elems), np.uint64(s1 * sample_elems)):
                out[k] = 0
        else:
            for n in range(s0, s1):
                for c in range(classes):
                    base = (n * classes + c) * inner
                    for k in range(np.uint64(base + d0), np.uint64(base + d1)):
                        out[k] = 0
        for n in range(s0, s1):
            for d in range(d0, d1):
                r = n * inner + d
                t = target[np.uint64(r)]
                if t != ignore_index:
                    out[np.uint64((n * classes + t) * inner + d)] = values[np.uint64(r)]


def row_values(a) -> tuple[np.ndarray, np.ndarray]:
    """(target as int64, per-row values rounded to the output dtype) of :class:`NLLArgs` ``a``."""
    classes = a.classes
    t = a.target.reshape(-1).astype(np.int64, copy=False)
    valid = t != a.ignore_index
    w = np.ones(classes) if a.weight is None else a.weight.astype(np.float64)
    w_t = w[np.where(valid, t, 0)]
    if isinstance(a.grad, np.ndarray):  # "none" with batched self: one upstream value per position
        g = a.grad.astype(np.float64).reshape(-1)
    else:
        g = np.full(t.shape, float(a.grad))
    if a.reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            g = g / a.total_weight
    with np.errstate(invalid="ignore", over="ignore"):
        values = (w_t * -g).astype(a.out.dtype)
    return t, values


def run(a, backend=None) -> None:
    """Fill ``a.out`` of a validated :class:`xloss.kernels.nll.args.NLLArgs`."""
    if a.out.size == 0:
        return
    t, values = row_values(a)
    bits = _BITS[a.out.dtype.itemsize]
    with threads_for(a.out.size):
        nll_kernel(a.out.reshape(-1).view(bits), a.classes, a.inner, writeable(t), a.ignore_index,
                   values.view(bits))
