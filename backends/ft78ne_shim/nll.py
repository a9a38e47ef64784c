"""The NLL gradient of the ``ft78ne``/``mt7004`` backends (``nlllossgrad``).

The manual's nlllossgrad has no ignore_index: rows whose target is ignore_index are left out of
the call (the kept rows are compacted, their gradient rows scattered back, the ignored ones zero),
so the port's own none/sum/mean paths run on exactly the rows PyTorch counts, with the global
total_weight: no extra rounding, whatever is ignored.

The page's logits and gradient are [batch, class_num]: (N, C, d1, ..., dk) input is copied to that layout
(the class axis last, every position a row; target and a per-position upstream gradient flattened in the
same order) and the rows' gradient moved back. The page's arithmetic is per row (the total weight is an
operand), so the rows are the positions PyTorch defines.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import abi
from .staging import fit, ranges


def mean_operands(g, tw, dt):
    """(loss_grad, total_weight) of a mean call in the dtype. A total weight beyond the dtype's
    range (a half sum over more than 65504 unit weights) is scaled with g by the same power of
    two, exactly: the library's g / total_weight is unchanged."""
    big = float(np.finfo(dt).max) / 2
    scale = 2.0 ** math.ceil(math.log2(abs(tw) / big)) if math.isfinite(tw) and abs(tw) > big else 1.0
    return (np.asarray(g, np.float64) / scale).astype(dt), np.array([tw / scale], dt)


def _kept_weight(w, targets) -> float:
    """Sum of the class weights of the kept rows (PyTorch's default total_weight), in float64."""
    return float(np.asarray(w, np.float64)[targets].sum()) if targets.size else 0.0


def _in_range(value: float, dt) -> float:
    big = float(np.finfo(dt).max)
    return max(-big, min(big, value))


def nll_loss_grad(b, a) -> None:
    b._require(a.request())
    if a.self.ndim > 2:
        return _positions_as_rows(b, a)
    dt = a.self.dtype
    batch = abi.c_int("batch", a.self.shape[0] if a.self.ndim == 2 else 1)
    classes = abi.c_int("class_num", a.self.shape[-1])
    t64 = a.target.reshape(-1).astype(np.int64)
    kept = t64 != a.ignore_index
    rows = None if kept.all() else np.flatnonzero(kept)  # None: every row, no copy
    w = np.ones(classes, dt) if a.weight is None else a.weight  # the signature has no weight_defined
    codes = b._codes["nlllossgrad"]
    per_row = isinstance(a.grad, np.ndarray)
    g = a.grad.reshape(-1) if per_row else np.array([a.grad], dt)
    # a uniform gradient for none is the sum call's (-g * w), as for the element-wise operators
    red = codes["none" if per_row else "mean" if a.reduction == "mean" else "sum"]
    if a.reduction == "mean":
        g, tw = mean_operands(g, a.total_weight, dt)
    else:  # the page's codes contradict each other: a library reading this call as mean finds a real one
        tw = np.array([_in_range(_kept_weight(w, t64[kept]), dt)], dt)
    if b.guards and not per_row:  # ... and one reading it as none finds batch values (wrong numbers, no crash)
        g = np.full(max(batch, 1), g[0], dt)
    out = a.out.reshape(batch, classes)
    labels = (t64 if rows is None else t64[rows]).astype(np.int32)
    fname, ct = b._names(dt, "nlllossgrad")
    if b.memory == "private":
        return _nll_private(b, a, fname, ct, rows, labels, w, g, red, tw, per_row, out)
    if rows is not None:
        out[...] = 0
        if rows.size == 0:
            return
    logits = a.self.reshape(batch, classes) if rows is None else a.self.reshape(batch, classes)[rows]
    dl = g if rows is None or not per_row else g[rows]
    dl = dl if per_row or dl.size == 1 else dl[:max(labels.size, 1)]
    dst = b._out(out) if rows is None else np.empty((rows.size, classes), dt)
    b._invoke(fname, b._ptr(logits, ct), b._ptr(dl, ct), b._ptr(labels, "int"), b._ptr(w, ct),
              b._ptr(tw, ct), b._ptr(dst, ct), labels.size, classes, red, b.core_mask)
    if rows is None:
        b._finish(a.out, dst)
    else:
        out[rows] = dst


def _positions_as_rows(b, a) -> None:
    """(N, C, d1, ..., dk) through the page's [batch, class_num] layout (module docstring)."""
    rows = np.ascontiguousarray(np.moveaxis(a.self, 1, -1)).reshape(-1, a.classes)
    grad = a.grad.reshape(-1) if isinstance(a.grad, np.ndarray) else a.grad
    out = np.empty_like(rows)
    nll_loss_grad(b, dataclasses.replace(a, self=rows, target=a.target.reshape(-1), grad=grad, out=out))
    a.out[...] = np.moveaxis(out.reshape(a.self.shape[0], *a.self.shape[2:], a.classes), -1, 1)


def _nll_private(b, a, fname, ct, rows, labels, w, g, red, tw, per_row, out):
    """Tiles of kept rows (and class chunks when a row does not fit: a chunk's call gets the
    rows whose label lies in it, relative to it); total_weight stays global."""
    dt = a.self.dtype
    es = dt.itemsize
    batch, classes = out.shape
    rows = np.arange(batch) if rows is None else rows
    logits = a.self.reshape(batch, classes)

    full = b.guards  # checked mode: loss_grad of the tile's rows whatever the reduction (see nll_loss_grad)

    def need(r, cc):
        return (2 * b._blk(r * cc * es) + b._blk((r if per_row or full else 1) * es) + b._blk(r * 4)
                + b._blk(cc * es) + b._blk(es))

    budget = b._budget()
    cc = classes if need(1, classes) <= budget else fit(budget, lambda c: need(1, c), classes)
    if classes and cc == 0:
        raise b._too_big(f"{fname} on one row and one class", need(1, 1))
    rmax = fit(budget, lambda r: need(r, cc), max(rows.size, 1))
    tiles = []  # (rows of the call, their labels relative to the chunk, chunk start, chunk end)
    for c0, c1 in ranges(classes, cc) if cc else []:
        inside = (labels >= c0) & (labels < c1)
        sel, lab = rows[inside], labels[inside] - c0
        tiles += [(sel[lo:hi], lab[lo:hi], c0, c1) for lo, hi in ranges(sel.size, rmax) if hi > lo]
    host = np.zeros((batch, classes), dt)
    specs = {"lg": (ct, dt, rmax * cc), "dl": (ct, dt, rmax if per_row or full else 1),
             "t": ("int", np.int32, rmax), "w": (ct, dt, cc), "dx": (ct, dt, rmax * cc), "tw": (ct, dt, 1)}

    def stage(i, bufs):
        sel, lab, c0, c1 = tiles[i]
        m, k = sel.size, c1 - c0
        bufs["lg"].arr[:m * k] = logits[sel, c0:c1].reshape(-1)
        dl = g[sel] if per_row else np.full(m, g[0], dt) if full else g[:1]
        bufs["dl"].arr[:dl.size] = dl
        bufs["t"].arr[:m] = lab
        bufs["w"].arr[:k] = w[c0:c1]
        bufs["tw"].arr[0] = tw[0]
        b._invoke(fname, bufs["lg"].ptr, bufs["dl"].ptr, bufs["t"].ptr, bufs["w"].ptr, bufs["tw"].ptr,
                  bufs["dx"].ptr, m, k, red)
        host[sel, c0:c1] = bufs["dx"].arr[:m * k].reshape(m, k)

    if tiles:
        b._run_private(specs, len(tiles), stage)
    out[...] = host
