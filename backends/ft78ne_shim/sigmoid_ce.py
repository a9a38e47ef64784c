"""BCE with logits on the ``ft78ne``/``mt7004`` backends, through the manual's per-element
``sigmoidcrossentropywithlogits`` (the loss) and ``sigmoidcrossentropywithlogitsgrad``
(``sigmoid(x) - y``).

The library computes one value per element and nothing more: a ``mean``/``sum`` is summed here in
float64 and the upstream gradient (over ``n`` for a mean) multiplied here, each result rounded once to
the dtype. Where such host arithmetic follows a float16 request, the ``fp_`` form runs on exact float32
copies when the library has it, so that the half result is rounded once, not twice. Private memory
stages tiles of the inputs through the cores' arenas (each element is computed alone: the tiles give
the shared call's values).
"""

from __future__ import annotations

import numpy as np

from . import abi
from .staging import fit, ranges


def _per_element(b, op: str, x: np.ndarray, y: np.ndarray, widen: bool, out: np.ndarray | None):
    """The library's per-element values of ``op`` over the flat ``x``, ``y``: written into ``out`` (x's
    dtype) when given (returns None), else returned (float32 when ``widen`` took the fp_ form)."""
    n = x.size
    fname, ct = b._names(x.dtype, op)
    if widen and x.dtype == np.float16 and b.lib.has("fp" + fname[2:]):
        fname, ct = "fp" + fname[2:], "float"
        x, y = x.astype(np.float32), y.astype(np.float32)
    sdt = x.dtype
    if b.memory == "shared":
        res = b._out(out.reshape(-1)) if out is not None else np.full(n, np.nan, sdt)
        b._invoke(fname, b._ptr(x, ct), b._ptr(y, ct), b._ptr(res, ct), n, b.core_mask)
    else:
        es = sdt.itemsize
        t = fit(b._budget(), lambda t: 3 * b._blk(t * es), max(n, 1))
        if t == 0:
            raise b._too_big(f"{fname} on one element", 3 * b._blk(es))
        tiles = ranges(n, t)
        res = np.empty(n, sdt)

        def stage(i, bufs):
            lo, hi = tiles[i]
            m = hi - lo
            bufs["x"].arr[:m] = x[lo:hi]
            bufs["y"].arr[:m] = y[lo:hi]
            b._invoke(fname, bufs["x"].ptr, bufs["y"].ptr, bufs["out"].ptr, m)
            res[lo:hi] = bufs["out"].arr[:m]

        b._run_private({"x": (ct, sdt, t), "y": (ct, sdt, t), "out": (ct, sdt, t)}, len(tiles), stage)
    if out is None:
        return res
    b._finish(out, res)
    return None


def bce_with_logits(b, a) -> None:
    b._require(a.request())
    n = abi.c_int("length", a.x.size)
    x, y = a.x.reshape(-1), a.y.reshape(-1)
    mean = a.reduction == "mean"
    loss = dx = None
    if a.loss_out is not None:
        if a.reduction == "none":
            loss = np.empty(a.loss_out.shape, a.x.dtype)
            if n:
                _per_element(b, abi.SCE_LOGITS, x, y, False, loss)
        else:
            total = _per_element(b, abi.SCE_LOGITS, x, y, True, None).sum(dtype=np.float64) if n else 0.0
            with np.errstate(invalid="ignore", divide="ignore"):
                loss = np.asarray(total / n if mean and n else (np.nan if mean else total), np.float64)
    if a.grad_out is not None:
        per = isinstance(a.grad, np.ndarray)
        g = a.grad if per else (a.grad / n if mean and n else a.grad)
        dx = np.empty(a.x.shape, a.x.dtype)
        if n and not per and g == 1.0:  # the library's values are the gradient itself
            _per_element(b, abi.SCE_LOGITS_GRAD, x, y, False, dx)
        elif n:
            r = _per_element(b, abi.SCE_LOGITS_GRAD, x, y, True, None).astype(np.float64)
            scale = a.grad.reshape(-1).astype(np.float64) if per else np.float64(g)
            with np.errstate(over="ignore", invalid="ignore"):
                dx.reshape(-1)[...] = (r * scale).astype(a.x.dtype)
    # results reach the caller's buffers only after every call succeeded
    if loss is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            a.loss_out[...] = loss
    if dx is not None:
        a.grad_out[...] = dx
