"""Fused linear-cross-entropy gradients for one vocabulary shard, in bounded memory.

The (BT, V) matrix G is never held whole. The vocabulary is cut into column chunks (and, for
very long inputs, the tokens into row tiles) so that one tile of G fits a fixed budget
(``chunk_bytes``). Per tile:

1. recompute mode: ``L = input[rows] @ weight[cols].T`` (BLAS), into the tile buffer;
2. one parallel Numba pass turns the tile into G in place — ``exp(L - max) * (1/sum)`` (or
   a copy of the given softmax), minus the label-smoothing share, minus the target one-hot
   (where the token's target is in this shard), times the upstream gradient;
3. ``input_grad[rows] += G @ weight[cols]`` and ``weight_grad[cols] (+)= G.T @ input[rows]``.

The sums over tiles run in a fixed order, so results do not depend on the Numba thread
count (the BLAS's own partitioning is the BLAS's). float64 inputs compute in float64;
float32, bfloat16 and float16 in float32. bfloat16 with PyTorch's BLAS on a CPU with native
bf16 GEMMs runs the products in bf16 (:mod:`.flce_native16`: G rounded once to bf16, partials
carried in float32); otherwise half inputs are widened once (input) or per column chunk
(weight) and both products run and accumulate in float32. Each output is rounded once.

Caller's output buffers (``input_grad_out=``/``weight_grad_out=``) are never left half-written:
the results are computed into scratch buffers and copied at the end, with Ctrl-C (SIGINT) held
back for the copies, so an interrupt leaves them untouched (or, after the copies, complete).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

import numpy as np
from numba import njit, prange

from . import flce_native16
from .access import convert_into, storage_view, writeable
from .intrinsics import like
from .layout import threads_for
from .vecmath import vexp

#: Default budget for one tile of G (bytes). The benchmark case (BT=2048, V=32000, float32)
#: then holds 1/8 of its logits at a time, in column chunks of 4096: narrower chunks cost
#: GEMM efficiency (measured with MKL on 2 cores: +2 % at 4096 columns, +10 % at 2048,
#: +20 % at 1024, against the unchunked products).
DEFAULT_CHUNK_BYTES = 32 << 20
_MIN_COLS = 256  # narrower column chunks starve the GEMMs; rows are tiled instead


@njit(error_model="numpy")
def _target_col(i, mask, packed, masked_target, c0, cols):
    """Column of row i's target inside this chunk, or -1 (masked, or in another chunk)."""
    if packed:
        masked = (mask[i >> 3] >> (i & 7)) & 1
    else:
        masked = mask[i]
    t = masked_target[i] - c0
    return t if masked == 0 and 0 <= t < cols else -1


@njit(parallel=True, cache=True, error_model="numpy")
def recompute_pass(tile, r0, c0, logits_max, sum_exp, grad, mask, packed, masked_target, smooth, hit):
    """tile (rows, cols) holds logits of rows r0.., columns c0..; turn it into G in place."""
    rows, cols = tile.shape
    for r in prange(rows):
        i = r0 + r
        row = tile[r]
        m = logits_max[i]
        inv = like(1.0, m) / sum_exp[i]  # one division per row, not per element
        g = grad[i]
        sm = like(smooth, m)
        t = _target_col(i, mask, packed, masked_target, c0, cols)
        lt = row[max(t, 0)]
        for j in range(cols):
            row[np.uint64(j)] = (vexp(row[np.uint64(j)] - m) * inv - sm) * g
        if t >= 0:
            row[t] = ((vexp(lt - m) * inv - sm) - like(hit, m)) * g


@njit(parallel=True, cache=True, error_model="numpy")
def softmax_pass(tile, softmax, r0, c0, grad, mask, packed, masked_target, smooth, hit):
    """tile (rows, cols) = G from softmax[r0.., c0..]."""
    rows, cols = tile.shape
    for r in prange(rows):
        i = r0 + r
        row = tile[r]
        src = softmax[i]
        g = grad[i]
        sm = like(smooth, g)
        for j in range(cols):
            row[np.uint64(j)] = (src[np.uint64(c0 + j)] - sm) * g
        t = _target_col(i, mask, packed, masked_target, c0, cols)
        if t >= 0:
            row[t] = ((src[c0 + t] - sm) - like(hit, g)) * g


def _convert(src, dst):
    with threads_for(src.size):
        convert_into(src, dst)


def plan(bt: int, v: int, itemsize: int, chunk_bytes: int) -> tuple[int, int]:
    """(row tile, column chunk) sizes for a tile budget of ``chunk_bytes``."""
    budget = max(chunk_bytes // itemsize, 1)
    cols = min(v, max(_MIN_COLS, budget // max(bt, 1)))
    rows = min(bt, max(1, budget // max(cols, 1)))
    return rows, cols


@contextmanager
def _sigint_held():
    """Hold back SIGINT (Ctrl-C) for the enclosed block and deliver it afterwards (main thread
    only: Python runs signal handlers there alone, so other threads need nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    except (ValueError, TypeError):  # not settable here (e.g. an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(*caught[0])
        elif caught and previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def run(a, backend) -> None:
    """Fill ``a.input_grad_out`` and ``a.weight_grad_out`` of a validated :class:`FLCEArgs`, with the
    ``cpu`` backend's GEMM and tile budget."""
    gemm, chunk_bytes = backend.gemm(), backend.flce_chunk_bytes()
    if not a.outputs_given:
        _compute(a, gemm, chunk_bytes, a.input_grad_out, a.weight_grad_out)
        return
    ig, wg = np.empty_like(a.input_grad_out), np.empty_like(a.weight_grad_out)
    _compute(a, gemm, chunk_bytes, ig, wg)
    with _sigint_held():  # both copies or neither
        np.copyto(a.input_grad_out, ig)
        np.copyto(a.weight_grad_out, wg)


def _compute(a, gemm, chunk_bytes, ig_out, wg_out) -> None:
    (bt, h), v = a.input.shape, a.weight.shape[0]
    if bt == 0 or v == 0 or h == 0:
        ig_out[...] = 0
        wg_out[...] = 0
        return
    if flce_native16.applies(a, gemm):
        rows, cols = plan(bt, v, 4, chunk_bytes)
        flce_native16.run(a, gemm, rows, cols, ig_out, wg_out, (recompute_pass, softmax_pass))
        return
    half = a.input.dtype.itemsize == 2
    cdt = np.dtype(np.float64) if a.input.dtype == np.float64 else np.dtype(np.float32)
    rows, cols = plan(bt, v, cdt.itemsize, chunk_bytes)

    if half:  # widen the input once; weight rows per chunk; outputs accumulate in float32
        inp = np.empty((bt, h), cdt)
        _convert(storage_view(a.input).reshape(-1), inp.reshape(-1))
        w_buf = np.empty((cols, h), cdt)
        ig = np.empty((bt, h), cdt)
        wg_buf = np.empty((cols, h), cdt)
    else:
        inp, ig = a.input, ig_out
    tile_buf = np.empty(rows * cols, cdt)
    scratch_ig = np.empty((rows, h), cdt) if gemm.needs_scratch() else None
    scratch_wg = np.empty((cols, h), cdt) if gemm.needs_scratch() and rows < bt else None

    mask = writeable(a.target_mask).view(np.uint8)
    packed = a.mask_format == "bitpacked"
    mt = writeable(a.masked_target.astype(np.int64, copy=False))
    grad = writeable(a.grad)
    if a.mode == "recompute":
        lmax, sexp = writeable(a.logits_max), writeable(a.sum_exp_logits)
    else:
        softmax = writeable(a.softmax)
    smooth = a.label_smoothing / a.vocab_size if a.label_smoothing else 0.0
    hit = 1.0 - a.label_smoothing
    w_src = storage_view(a.weight)

    for c0 in range(0, v, cols):
        nc = min(cols, v - c0)
        if half:
            wc = w_buf[:nc]
            _convert(w_src[c0:c0 + nc].reshape(-1), wc.reshape(-1))
            wg = wg_buf[:nc]
        else:
            wc = a.weight[c0:c0 + nc]
            wg = wg_out[c0:c0 + nc]
        for r0 in range(0, bt, rows):
            nr = min(rows, bt - r0)
            tile = tile_buf[:nr * nc].reshape(nr, nc)
            if a.mode == "recompute":
                gemm.mm(inp[r0:r0 + nr], wc.T, tile)
                with threads_for(tile.size):
                    recompute_pass(tile, r0, c0, lmax, sexp, grad, mask, packed, mt, smooth, hit)
            else:
                with threads_for(tile.size):
                    softmax_pass(tile, softmax, r0, c0, grad, mask, packed, mt, smooth, hit)
            ig_rows = ig[r0:r0 + nr]
            if c0 == 0:
                gemm.mm(tile, wc, ig_rows)
            else:
                gemm.mm_add(tile, wc, ig_rows, None if scratch_ig is None else scratch_ig[:nr])
            if r0 == 0:
                gemm.mm(tile.T, inp[r0:r0 + nr], wg)
            else:
                gemm.mm_add(tile.T, inp[r0:r0 + nr], wg, None if scratch_wg is None else scratch_wg[:nc])
        if half:
            _convert(wg.reshape(-1), storage_view(wg_out[c0:c0 + nc]).reshape(-1))
    if half:
        _convert(ig.reshape(-1), storage_view(ig_out).reshape(-1))
