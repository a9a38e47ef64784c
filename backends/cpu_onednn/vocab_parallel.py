"""The vocabulary-parallel forward on the CPU: one shard's online max/sum (CANN's
aclnnFusedLinearOnlineMaxSum) and the loss from the all-reduced statistics
(aclnnFusedCrossEntropyLossWithMaxSum).

Online max/sum: the shard's logits are produced a tile at a time within the FLCE tile budget
(``flce_chunk_bytes``, the tiling of :func:`.flce.plan`) by the backend's GEMM, and one parallel
Numba pass per tile (:func:`.vp_rows.tile_stats`) merges each row into its running statistics:
tile max, sum of exp rescaled to the new max, target logit (and, when asked, writes the tile
into the logits output, rounded once). Nothing of the logits' size is allocated unless the
caller asks for the logits; then the tiles are whole rows, and the GEMM writes float32/float64
logits straight into the output, a budget of rows at a time; half logits are rounded once from
the float32 tile. Products accumulate in float32 (float64 for float64 input): half inputs widen
the input once and the weight per column chunk (whole, when the logits are asked for: their
tiles are then whole rows, so that each lands in the output contiguously). bfloat16 does not
take the native bf16 GEMMs of :mod:`.flce_native16`: their ``hi + lo`` split carries about 16
significant bits, enough for a gradient rounded to bf16 but not for float32 statistics, which
the vendor's operator forms from float32 products (measured: a max off by 2**-17 relative).

Loss: ``log(sum_exp) - predicted`` (per token, NumPy), and the softmax in one parallel Numba
pass (:func:`.vp_rows.softmax_rows`) reading float32, float64 or bfloat16 logits as they are
(float16 ones are widened into the output first).

Cold compile is kept small: the tile pass exists for float32 and float64 tiles only, the
softmax for float32, float64 and bfloat16 logits (each a separate Numba specialization).
"""

from __future__ import annotations

import numpy as np

from . import vp_rows
from .access import convert_into, storage_view, writeable
from .flce import plan
from .layout import threads_for


def online_max_sum(a, backend) -> None:
    """Fill the outputs of a validated :class:`~xloss.kernels.flce.args.OnlineMaxSumArgs`."""
    bt = a.input.shape[0]
    masked, tcol = _targets(a)
    if bt == 0:
        return
    cdt = a.logits_max_out.dtype
    m, s, zt = a.logits_max_out, a.sum_exp_out, np.zeros(bt, cdt)
    m.fill(-np.inf)
    s.fill(0)
    _tiles(a, backend.gemm(), backend.flce_chunk_bytes(), tcol, zt)
    with np.errstate(invalid="ignore"):
        s[m == -np.inf] = np.nan  # every logit -inf: exp(-inf - -inf), as the float64 formulas give
        np.subtract(zt, m, out=a.predicted_out)
    a.predicted_out[masked] = 0


def _targets(a):
    """Write the target mask and the masked target; return (masked, target column or -1)."""
    bt = a.input.shape[0]
    t = a.target.astype(np.int64, copy=False)
    masked = (t < a.vocab_start) | (t >= a.vocab_end)
    with np.errstate(over="ignore"):  # (targets far outside the shard: the difference is not used)
        local = np.where(masked, 0, t - a.vocab_start)
    a.masked_target_out[...] = local
    if a.mask_format == "bool":
        a.target_mask_out[...] = masked
    else:  # LSB first, the padding bits of the last byte the mask of target 0 (CANN's kernel pads with 0)
        pad = not a.vocab_start <= 0 < a.vocab_end
        a.target_mask_out[...] = np.packbits(np.concatenate([masked, np.full(-bt % 8, pad)]), bitorder="little")
    return masked, np.where(masked, -1, local)


def _stats(tile, r0, c0, tcol, m, s, zt) -> None:
    with threads_for(tile.size):
        vp_rows.tile_stats(tile, r0, c0, tcol, m, s, zt)


def _convert(src, dst) -> None:
    with threads_for(src.size):
        convert_into(src.reshape(-1), dst.reshape(-1))


def _row_tiles(bt, v, itemsize, chunk_bytes):
    """Tiles of whole rows (the logits output is written a row block at a time, contiguously)."""
    rows = min(bt, max(1, chunk_bytes // itemsize // v))
    return [(r0, min(rows, bt - r0)) for r0 in range(0, bt, rows)]


def _tiles(a, gemm, chunk_bytes, tcol, zt) -> None:
    """float32/float64 products (half inputs widened to float32: exact, then accumulated in float32)."""
    (bt, h), v = a.input.shape, a.weight.shape[0]
    m, s = a.logits_max_out, a.sum_exp_out
    cdt = m.dtype
    half = a.input.dtype.itemsize == 2
    inp = a.input
    if half:
        inp = np.empty((bt, h), cdt)
        _convert(storage_view(a.input), inp)
    if a.logits_out is not None:  # whole rows; float32/float64 logits straight from the GEMM
        direct = a.logits_out.dtype == cdt
        w = a.weight
        if half:  # (the weight widened whole: the logits' rows are not split into column chunks)
            w = np.empty((v, h), cdt)
            _convert(storage_view(a.weight), w)
        tiles = _row_tiles(bt, v, cdt.itemsize, chunk_bytes)
        buf = None if direct else np.empty(tiles[0][1] * v, cdt)
        for r0, nr in tiles:
            tile = a.logits_out[r0:r0 + nr] if direct else buf[:nr * v].reshape(nr, v)
            gemm.mm(inp[r0:r0 + nr], w.T, tile)
            if not direct:
                _convert(tile, storage_view(a.logits_out[r0:r0 + nr]))  # rounded once
            _stats(tile, r0, 0, tcol, m, s, zt)
        return
    rows, cols = plan(bt, v, cdt.itemsize, chunk_bytes)
    tile_buf = np.empty(rows * cols, cdt)
    w_buf = np.empty((cols, h), cdt) if half else None
    w_src = storage_view(a.weight)
    for c0 in range(0, v, cols):
        nc = min(cols, v - c0)
        if half:
            wc = w_buf[:nc]
            _convert(w_src[c0:c0 + nc], wc)
        else:
            wc = a.weight[c0:c0 + nc]
        for r0 in range(0, bt, rows):
            nr = min(rows, bt - r0)
            tile = tile_buf[:nr * nc].reshape(nr, nc)
            gemm.mm(inp[r0:r0 + nr], wc.T, tile)
            _stats(tile, r0, c0, tcol, m, s, zt)


def loss_with_max_sum(a, backend) -> None:
    """Fill the outputs of a validated :class:`~xloss.kernels.flce.args.LossWithMaxSumArgs`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(a.sum_exp_logits, out=a.loss_out)
        np.subtract(a.loss_out, a.predicted_logits, out=a.loss_out)
    if a.softmax_out is None:
        return
    z = storage_view(a.vocab_parallel_logits)
    with threads_for(z.size):
        if z.dtype == np.int16:  # float16: widened into the output, then in place (one kernel fewer
            #                      to compile for a rare dtype; bfloat16 is widened as read)
            convert_into(z.reshape(-1), a.softmax_out.reshape(-1))
            z = a.softmax_out
        vp_rows.softmax_rows(z, writeable(a.logits_max), writeable(a.sum_exp_logits), a.softmax_out)
