"""The element-wise kernels of the ``ft78ne``/``mt7004`` backends: focal loss (``sigmoidfocalloss``,
``sigmoidfocallossgrad``) and the BCE gradient (``binarycrossentropygrad``).

Shared memory: one call over the whole input. Private memory: tiles of m elements staged through
the cores' arenas, with a mean kept global (a tile's upstream gradient is g*m/n) and a forward
mean/sum over several tiles combined here in float64.
"""

from __future__ import annotations

import math

import numpy as np

from . import abi
from .staging import fit, ranges


def focal_loss(b, a) -> None:
    b._require(a.request())
    # alpha crosses the ABI as a C float; the conformance tolerance models that rounding
    n = abi.c_int("input_size", a.x.size)
    x, y = a.x.reshape(-1), a.y.reshape(-1)
    if a.loss_out is not None:
        fname, ct = b._names(a.x.dtype, "sigmoidfocalloss")
        if b.memory == "shared":
            out = b._out(a.loss_out.reshape(-1))
            b._invoke(fname, n, b._codes["sigmoidfocalloss"][a.reduction], a.alpha, a.gamma, b._ptr(x, ct),
                      b._ptr(y, ct), b._ptr(out, ct), b.core_mask)
            b._finish(a.loss_out, out)
        else:
            _focal_forward_private(b, a, fname, ct, x, y, n)
    if a.grad_out is not None:
        fname, ct = b._names(a.x.dtype, "sigmoidfocallossgrad")
        if b.memory == "shared":
            red, dl = upstream(b._codes["sigmoidfocallossgrad"], a.grad, a.reduction, a.x.dtype)
            out = b._out(a.grad_out.reshape(-1))
            b._invoke(fname, n, red, a.alpha, a.gamma, b._ptr(x, ct), b._ptr(y, ct),
                      b._ptr(dl, ct), b._ptr(out, ct), b.core_mask)
            b._finish(a.grad_out, out)
        else:
            _grad_private(
                b, a, fname, ct, n, [x, y], lambda bufs, m, red, has_w: (
                    m, red, a.alpha, a.gamma, bufs["x0"].ptr, bufs["x1"].ptr, bufs["dl"].ptr, bufs["dx"].ptr),
                a.grad_out)


def bce_grad(b, a) -> None:
    b._require(a.request())
    n = abi.c_int("input_size", a.x.size)
    x, y = a.x.reshape(-1), a.y.reshape(-1)
    # the vendor takes one weight per element: expand the broadcastable weight
    w = None if a.weight is None else np.ascontiguousarray(np.broadcast_to(a.weight, a.x.shape)).reshape(-1)
    fname, ct = b._names(a.x.dtype, "binarycrossentropygrad")
    if b.memory == "shared":
        red, dl = upstream(b._codes["binarycrossentropygrad"], a.grad, a.reduction, a.x.dtype)
        out = b._out(a.out.reshape(-1))
        b._invoke(fname, n, red, b._ptr(x, ct), b._ptr(y, ct), b._ptr(w, ct), b._ptr(dl, ct),
                  b._ptr(out, ct), int(w is not None), b.core_mask)
        b._finish(a.out, out)
    else:
        ins = [x, y] + ([w] if w is not None else [])
        _grad_private(
            b, a, fname, ct, n, ins, lambda bufs, m, red, has_w: (
                m, red, bufs["x0"].ptr, bufs["x1"].ptr, bufs["x2"].ptr if has_w else b.ffi.NULL, bufs["dl"].ptr,
                bufs["dx"].ptr, int(has_w)),
            a.out, has_weight=w is not None)


# -- upstream gradients --------------------------------------------------------------------------
def upstream(codes: dict, grad, reduction: str, dtype):
    """(reduction code, dloss) for one call over the whole input (``codes``: the operator's table).

    A uniform gradient for ``none`` goes as one element with reduction=sum, which the
    convention defines identically (dx_n = dloss * ...), instead of an n-element array."""
    if isinstance(grad, np.ndarray):
        return codes["none"], grad.reshape(-1)
    return codes["mean" if reduction == "mean" else "sum"], np.array([grad], dtype=dtype)


def tile_upstream(codes: dict, grad, reduction: str, dtype, lo: int, hi: int, n: int, ntiles: int):
    """(reduction code, dloss) for the tile [lo, hi) of n elements: ``mean`` stays global.

    The library divides a mean's upstream gradient by the size it is given, the tile's m, so the
    tile gets g * m / n (rounded once to the dtype; balanced tiles keep it near g / ntiles, far
    from underflow)."""
    if isinstance(grad, np.ndarray):
        return codes["none"], grad.reshape(-1)[lo:hi]
    if reduction != "mean" or ntiles == 1:
        return upstream(codes, grad, reduction, dtype)
    with np.errstate(over="ignore", under="ignore"):
        return codes["mean"], np.array([grad * (hi - lo) / n], dtype=dtype)


# -- private memory ------------------------------------------------------------------------------
def _grad_private(b, a, fname, ct, n, ins, args_of, out, *, has_weight=False):
    """BCE / focal gradient through private memory: tiles of m elements, mean kept global (a
    tile gets g*m/n with reduction=mean). float16 means over several tiles run the fp_ form on
    exact float32 copies when the library has it: g*m/n in half would be rounded (below half's
    normal range, by more than half an ulp) before the library applies it; the float32 results
    are rounded once to half here. Without fp_, hp_ with the half scale (upstream_in_dtype)."""
    codes = b._codes[fname[3:-2]]
    dt = sdt = a.x.dtype
    per_element = isinstance(a.grad, np.ndarray)

    def plan(es):
        def need(t):
            return len(ins) * b._blk(t * es) + b._blk((t if per_element else 1) * es) + b._blk(t * es)
        t = fit(b._budget(), need, max(n, 1))
        if t == 0:
            raise b._too_big(f"{fname} on one element", need(1))
        return t, ranges(n, t)

    t, tiles = plan(dt.itemsize)
    if (len(tiles) > 1 and a.reduction == "mean" and not per_element and dt == np.float16
            and b.lib.has("fp" + fname[2:])):
        sdt, fname, ct = np.dtype(np.float32), "fp" + fname[2:], "float"
        t, tiles = plan(4)
    host = np.empty(n, dt)
    specs = {f"x{i}": (ct, sdt, t) for i in range(len(ins))}
    specs["dl"] = (ct, sdt, t if per_element else 1)
    specs["dx"] = (ct, sdt, t)

    def stage(i, bufs):
        lo, hi = tiles[i]
        m = hi - lo
        for j, arr in enumerate(ins):
            bufs[f"x{j}"].arr[:m] = arr[lo:hi]
        red, dl = tile_upstream(codes, a.grad, a.reduction, sdt, lo, hi, n, len(tiles))
        bufs["dl"].arr[:dl.size] = dl
        b._invoke(fname, *args_of(bufs, m, red, has_weight))
        with np.errstate(over="ignore"):  # float32 results past half's range round to inf, as one call's would
            host[lo:hi] = bufs["dx"].arr[:m]

    b._run_private(specs, len(tiles), stage)
    out.reshape(-1)[...] = host


def _focal_forward_private(b, a, fname, ct, x, y, n):
    """Focal loss through private memory. ``none`` or one tile: the library's own reduction.
    ``mean``/``sum`` over several tiles: each tile returns its sum, combined here in float64
    (``math.fsum``, in tile order, whatever core ran it) and rounded once to the dtype. float16
    tiles run the ``fp_`` form on exact float32 copies when the library has it: a half tile sum
    would be rounded (and could overflow) before the tiles meet, one rounding more than a
    single call makes (without ``fp_``, half sums: README, "memory model")."""
    dt = a.x.dtype
    none = a.reduction == "none"

    def plan(es):
        def need(t):
            return 2 * b._blk(t * es) + b._blk((t if none else 1) * es)
        t = fit(b._budget(), need, max(n, 1))
        if t == 0:
            raise b._too_big(f"{fname} on one element", need(1))
        return t, ranges(n, t)

    t, tiles = plan(dt.itemsize)
    single = none or len(tiles) == 1
    tdt, suffix = dt, fname[2:]
    if not single and dt == np.float16 and b.lib.has("fp" + suffix):
        tdt, fname, ct = np.dtype(np.float32), "fp" + suffix, "float"
        t, tiles = plan(4)
    tile_red = b._codes["sigmoidfocalloss"][a.reduction if single else "sum"]
    host = np.empty(n if none else 1, dt)
    partial = np.zeros(len(tiles), np.float64)
    specs = {"x": (ct, tdt, t), "y": (ct, tdt, t), "loss": (ct, tdt, t if none else 1)}

    def stage(i, bufs):
        lo, hi = tiles[i]
        m = hi - lo
        bufs["x"].arr[:m] = x[lo:hi]
        bufs["y"].arr[:m] = y[lo:hi]
        b._invoke(fname, m, tile_red, a.alpha, a.gamma, bufs["x"].ptr, bufs["y"].ptr, bufs["loss"].ptr)
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
            host[0] = np.asarray(total / n if a.reduction == "mean" else total).astype(dt)
    a.loss_out.reshape(-1)[...] = host
