"""The NLL and BCE forward of the ``ft78ne``/``mt7004`` backends: the manual's ``nllloss`` and
``binarycrossentropy`` pages.

``nllloss`` has no ignore_index: the rows whose target is ignore_index are left out of the call (the kept rows
compacted; ``none`` scatters their losses back, the ignored ones 0), so the library's sum, mean and total weight
are over exactly the rows PyTorch counts. (C) input is one row; (N, C, d1, ..., dk) input is copied to
(N*d1*...*dk, C) rows first (the page's layout is [batch_size, class_num]). The signature has no
weight_defined: ones stand in for no weight. PyTorch's total weight for ``none`` on batched input is 0; a
(C) input's ``none`` is called as ``sum`` (one element either way).

Private memory: tiles of rows, in class chunks where a row does not fit (``nllloss``), or of elements
(``binarycrossentropy``); a reduction over
several tiles asks each tile for its sum (and nllloss its total weight) and combines them here in float64
(``math.fsum``, in tile order), divided and rounded once.
"""

from __future__ import annotations

import math

import numpy as np

from . import abi
from .staging import fit, ranges

NLL, BCE = "nllloss", "binarycrossentropy"


def _rows(a):
    """(log-probabilities as (rows, C), flat int64 targets) of :class:`NLLLossArgs` ``a``."""
    x = a.self
    if x.ndim == 1:
        return x.reshape(1, -1), a.target.reshape(-1).astype(np.int64)
    if x.ndim > 2:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    return x.reshape(-1, a.classes), a.target.reshape(-1).astype(np.int64)


def nll_loss(b, a) -> None:
    b._require(a.request())
    dt = a.self.dtype
    x, t = _rows(a)
    kept = np.flatnonzero(t != a.ignore_index)
    rows = x if kept.size == t.size else x[kept]
    labels = t[kept].astype(np.int32)
    n = abi.c_int("batch_size", rows.shape[0])
    classes = abi.c_int("class_num", a.classes)
    w = np.ones(classes, dt) if a.weight is None else a.weight
    batched = a.self.ndim >= 2
    per_row = a.reduction == "none" and batched
    codes = b._codes[NLL]
    red = "none" if per_row else "sum" if a.reduction == "none" else a.reduction
    fname, ct = b._names(dt, NLL)
    loss = np.zeros(n if per_row else 1, dt)
    total = np.zeros(1, dt)
    if b.memory == "shared":
        out, tw = b._out(loss), b._out(total)
        b._invoke(fname, b._ptr(rows, ct), b._ptr(labels, "int"), b._ptr(w, ct), b._ptr(out, ct), b._ptr(tw, ct),
                  n, classes, codes[red], b.core_mask)
        b._finish(loss, out)
        b._finish(total, tw)
    else:
        _nll_private(b, fname, ct, dt, rows, labels, w, red, codes, loss, total)
    if per_row:
        full = np.zeros(t.size, dt)
        full[kept] = loss
        a.out[...] = full.reshape(a.out.shape)
        a.total_weight_out[...] = 0
    else:
        a.out[...] = loss[0]
        a.total_weight_out[...] = total[0]


def _nll_private(b, fname, ct, dt, rows, labels, w, red, codes, loss, total):
    """Tiles of kept rows, and class chunks when a row does not fit (a chunk's call gets the rows whose
    label lies in it, labels relative to it: each row's loss needs its own label's log-probability only)."""
    n, classes = rows.shape
    none = red == "none"
    if n == 0:  # nothing to stage: the library's own empty results
        loss[...] = 0.0 if none or red == "sum" else np.nan
        total[...] = 0.0
        return

    def plan(es):
        def need(r, cc):
            return (b._blk(r * cc * es) + b._blk(r * 4) + b._blk(cc * es) + b._blk((r if none else 1) * es)
                    + b._blk(es))

        budget = b._budget()
        cc = classes if need(1, classes) <= budget else fit(budget, lambda c: need(1, c), classes)
        if classes and cc == 0:
            raise b._too_big(f"{fname} on one row and one class", need(1, 1))
        rmax = fit(budget, lambda r: need(r, cc), n)
        tiles = []  # (rows of the call, their labels relative to the chunk, chunk start, chunk end)
        for c0, c1 in ranges(classes, cc):
            inside = np.flatnonzero((labels >= c0) & (labels < c1))
            tiles += [(inside[lo:hi], labels[inside[lo:hi]] - c0, c0, c1) for lo, hi in ranges(inside.size, rmax)
                      if hi > lo]
        return rmax, cc, tiles

    rmax, cc, tiles = plan(dt.itemsize)
    single = len(tiles) == 1
    if not single and dt == np.float16 and b.lib.has("fp" + fname[2:]):
        # half tile sums (and total weights) would be rounded before the tiles meet: exact float32 copies
        dt, fname, ct = np.dtype(np.float32), "fp" + fname[2:], "float"
        rows, w = rows.astype(dt), w.astype(dt)
        rmax, cc, tiles = plan(4)
        single = len(tiles) == 1
    tile_red = codes[red if none or single else "sum"]
    partial = np.zeros(len(tiles), np.float64)
    partial_w = np.zeros(len(tiles), np.float64)
    specs = {"x": (ct, dt, rmax * cc), "t": ("int", np.int32, rmax), "w": (ct, dt, cc),
             "loss": (ct, dt, rmax if none else 1), "tw": (ct, dt, 1)}

    def stage(i, bufs):
        sel, lab, c0, c1 = tiles[i]
        m, k = sel.size, c1 - c0
        bufs["x"].arr[:m * k] = rows[sel, c0:c1].reshape(-1)
        bufs["t"].arr[:m] = lab
        bufs["w"].arr[:k] = w[c0:c1]
        b._invoke(fname, bufs["x"].ptr, bufs["t"].ptr, bufs["w"].ptr, bufs["loss"].ptr, bufs["tw"].ptr, m, k,
                  tile_red)
        if none:
            loss[sel] = bufs["loss"].arr[:m]
        elif single:
            loss[0] = bufs["loss"].arr[0]
        else:
            partial[i] = float(bufs["loss"].arr[0])
        partial_w[i] = float(bufs["tw"].arr[0])
        if single:
            total[0] = bufs["tw"].arr[0]

    b._run_private(specs, len(tiles), stage)
    if not single:
        s, tw = math.fsum(partial), math.fsum(partial_w)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if not none:
                loss[0] = np.float64(s) / np.float64(tw) if red == "mean" else s
            total[0] = tw


def binary_cross_entropy(b, a) -> None:
    b._require(a.request())
    dt = a.x.dtype
    n = abi.c_int("input_size", a.x.size)
    x, y = a.x.reshape(-1), a.y.reshape(-1)
    # one weight per element: the broadcastable weight expanded
    w = None if a.weight is None else np.ascontiguousarray(np.broadcast_to(a.weight, a.x.shape)).reshape(-1)
    codes = b._codes[BCE]
    fname, ct = b._names(dt, BCE)
    none = a.reduction == "none"
    if b.memory == "shared":
        out = b._out(a.out.reshape(-1))
        tmp = np.empty(n, dt)
        tmp_out = b._out(tmp)
        b._invoke(fname, n, codes[a.reduction], b._ptr(x, ct), b._ptr(y, ct), b._ptr(w, ct), b._ptr(out, ct),
                  b._ptr(tmp_out, ct), int(w is not None), b.core_mask)
        b._finish(a.out, out)
        return
    ins = [x, y] + ([w] if w is not None else [])

    def plan(es):
        def need(t):
            return len(ins) * b._blk(t * es) + b._blk((t if none else 1) * es) + b._blk(t * es)

        t = fit(b._budget(), need, max(n, 1))
        if t == 0:
            raise b._too_big(f"{fname} on one element", need(1))
        return t, ranges(n, t) if n else [(0, 0)]

    t, tiles = plan(dt.itemsize)
    single = none or len(tiles) == 1
    if not single and dt == np.float16 and b.lib.has("fp" + fname[2:]):
        # a half tile sum would be rounded (and may overflow) before the tiles meet: exact float32 copies
        dt, fname, ct = np.dtype(np.float32), "fp" + fname[2:], "float"
        t, tiles = plan(4)
    tile_red = codes[a.reduction if single else "sum"]
    host = np.empty(n if none else 1, a.out.dtype)
    partial = np.zeros(len(tiles), np.float64)
    specs = {f"x{j}": (ct, dt, t) for j in range(len(ins))}
    specs.update(loss=(ct, dt, t if none else 1), tmp=(ct, dt, t))

    def stage(i, bufs):
        lo, hi = tiles[i]
        m = hi - lo
        for j, arr in enumerate(ins):
            bufs[f"x{j}"].arr[:m] = arr[lo:hi]
        b._invoke(fname, m, tile_red, bufs["x0"].ptr, bufs["x1"].ptr, bufs["x2"].ptr if w is not None else b.ffi.NULL,
                  bufs["loss"].ptr, bufs["tmp"].ptr, int(w is not None))
        if none:
            host[lo:hi] = bufs["loss"].arr[:m]
        elif single:
            host[0] = bufs["loss"].arr[0]
        else:
            partial[i] = float(bufs["loss"].arr[0])

    b._run_private(specs, len(tiles), stage)
    if not single:
        total = math.fsum(partial)
        with np.errstate(over="ignore", invalid="ignore"):
            host[0] = np.asarray(total / n if a.reduction == "mean" else total).astype(a.out.dtype)
    a.out.reshape(-1)[...] = host
