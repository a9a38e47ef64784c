"""NLL-loss backward: zero the output and scatter one value per row, in one parallel pass.

The output is mostly zeros, so the pass is a memset in row blocks with one store per row
added; it works on the output's raw bits (float zero is all-zero bits in every dtype), so one
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
def nll_kernel(out, classes, target, ignore_index, values):
    """``out`` (flat raw bits, N*C) = 0 except ``out[i*C + target[i]] = values[i]`` for rows
    whose target is not ``ignore_index``."""
    n_rows = target.size
    rows = max(1, _BLOCK_ELEMS // max(classes, 1))
    for b in prange((n_rows + rows - 1) // rows):
        r0 = b * rows
        r1 = min(n_rows, r0 + rows)
        for k in range(np.uint64(r0 * classes), np.uint64(r1 * classes)):
            out[k] = 0
        for r in range(r0, r1):
            t = target[np.uint64(r)]
            if t != ignore_index:
                out[np.uint64(r * classes + t)] = values[np.uint64(r)]


def row_values(a) -> tuple[np.ndarray, np.ndarray]:
    """(target as int64, per-row values rounded to the output dtype) of :class:`NLLArgs` ``a``."""
    classes = a.self.shape[-1]
    t = a.target.reshape(-1).astype(np.int64, copy=False)
    valid = t != a.ignore_index
    w = np.ones(classes) if a.weight is None else a.weight.astype(np.float64)
    w_t = w[np.where(valid, t, 0)]
    if isinstance(a.grad, np.ndarray):  # "none" with 2-D self: one upstream value per row
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
        nll_kernel(a.out.reshape(-1).view(bits), a.self.shape[-1], writeable(t), a.ignore_index, values.view(bits))
