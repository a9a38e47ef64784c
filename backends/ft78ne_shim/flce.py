"""The fused linear cross-entropy gradient of the ``ft78ne``/``mt7004`` backends
(``fusedlinearcrossentropylossgrad``, ours: no vendor page).

The DSP layout takes one byte per token for the target mask (nonzero = target not in this
shard): xloss's bit-packed form is unpacked here.
"""

from __future__ import annotations

import numpy as np

from . import abi
from .staging import blk, fit, ranges


def fused_linear_cross_entropy_grad(b, a) -> None:
    b._require(a.request())
    dt = a.input.dtype
    bt, hidden = a.input.shape
    vocab = a.weight.shape[0]
    for what, v in (("bt", bt), ("hidden", hidden), ("vocab", vocab)):
        abi.c_int(what, v)
    if a.mask_format == "bitpacked":
        mask = np.unpackbits(a.target_mask, count=bt, bitorder="little")
    else:
        mask = np.ascontiguousarray(a.target_mask).view(np.uint8)
    mt = a.masked_target.astype(np.int32)  # in [0, V), checked by validation
    softmax = a.mode == "softmax"
    fname, ct = b._names(dt, "fusedlinearcrossentropylossgrad")
    if b.memory == "shared":
        ig, wg = b._out(a.input_grad_out), b._out(a.weight_grad_out)
        b._invoke(fname, bt, hidden, vocab, b._ptr(a.grad, "float"), b._ptr(a.input, ct),
                  b._ptr(a.weight, ct), b._ptr(mask, "unsigned char"), b._ptr(mt, "int"),
                  b._ptr(a.logits_max, "float"), b._ptr(a.sum_exp_logits, "float"),
                  b._ptr(a.softmax, "float"), b._ptr(ig, ct), b._ptr(wg, ct), int(softmax),
                  b.core_mask)
        b._finish(a.input_grad_out, ig)
        b._finish(a.weight_grad_out, wg)
    else:
        _flce_private(b, a, fname, ct, bt, hidden, vocab, mask, mt, softmax)


def _flce_private(b, a, fname, ct, bt, hidden, vocab, mask, mt, softmax):
    """Tiles of tokens x vocabulary rows, accumulated in place with the ``accumulate`` flag.

    input_grad[b-tile] sums over the vocabulary tiles, weight_grad[v-tile] over the token
    tiles: tile (b, v) stages both partial outputs in and adds (accumulate=1), except the very
    first, which overwrites (accumulate=0). The tiles form one accumulation chain, so they run
    in order on the first core of the mask."""
    dt = a.input.dtype
    es = dt.itemsize

    def need(m, v):
        n = (b._blk(m * 4) + 2 * b._blk(m * hidden * es) + 2 * b._blk(v * hidden * es) + b._blk(m) + b._blk(m * 4)
             + (b._blk(m * v * 4) if softmax else 2 * b._blk(m * 4)))
        return n + (blk(hidden * 4) if hidden else 0)  # the library's row accumulator (private scratch)

    budget = b._budget()
    if need(1, 1) > budget:
        raise b._too_big(f"{fname} on one token and one vocabulary row (hidden={hidden})", need(1, 1))
    if need(1, vocab) <= budget:
        vt = vocab
    else:  # vocabulary rows take at most half the budget, tokens the rest
        vt = max(1, fit(budget // 2, lambda v: need(1, v), vocab))
    btile = fit(budget, lambda m: need(m, vt), max(bt, 1))
    v_tiles = ranges(vocab, vt) if vt else [(0, 0)]
    b_tiles = ranges(bt, btile)
    tiles = [(bi, vi) for vi in range(len(v_tiles)) for bi in range(len(b_tiles))]
    ig = np.zeros((bt, hidden), dt)
    wg = np.zeros((vocab, hidden), dt)
    in_shard = mask == 0
    specs = {"grad": ("float", np.float32, btile), "x": (ct, dt, btile * hidden), "w": (ct, dt, vt * hidden),
             "mask": ("unsigned char", np.uint8, btile), "mt": ("int", np.int32, btile),
             "ig": (ct, dt, btile * hidden), "wg": (ct, dt, vt * hidden)}
    if softmax:
        specs["sm"] = ("float", np.float32, btile * vt)
    else:
        specs["lm"] = ("float", np.float32, btile)
        specs["se"] = ("float", np.float32, btile)
    whole_v = len(v_tiles) == 1

    def stage(i, bufs):
        bi, vi = tiles[i]
        (b0, b1), (v0, v1) = b_tiles[bi], v_tiles[vi]
        m, k = b1 - b0, v1 - v0
        bufs["grad"].arr[:m] = a.grad[b0:b1]
        bufs["x"].arr[:m * hidden] = a.input[b0:b1].reshape(-1)
        bufs["w"].arr[:k * hidden] = a.weight[v0:v1].reshape(-1)
        if whole_v:
            bufs["mask"].arr[:m] = mask[b0:b1]
            bufs["mt"].arr[:m] = mt[b0:b1]
        else:  # targets relative to the vocabulary tile; elsewhere counts as "not in this shard"
            inside = in_shard[b0:b1] & (mt[b0:b1] >= v0) & (mt[b0:b1] < v1)
            bufs["mask"].arr[:m] = ~inside
            bufs["mt"].arr[:m] = np.where(inside, mt[b0:b1] - v0, 0)
        if softmax:
            bufs["sm"].arr[:m * k] = a.softmax[b0:b1, v0:v1].reshape(-1)
        else:
            bufs["lm"].arr[:m] = a.logits_max[b0:b1]
            bufs["se"].arr[:m] = a.sum_exp_logits[b0:b1]
        accumulate = int(i != 0)
        if accumulate:  # partial sums so far (zeros where this tile is the first to touch them)
            bufs["ig"].arr[:m * hidden] = ig[b0:b1].reshape(-1)
            bufs["wg"].arr[:k * hidden] = wg[v0:v1].reshape(-1)
        nul = b.ffi.NULL
        b._invoke(fname, m, hidden, k, bufs["grad"].ptr, bufs["x"].ptr, bufs["w"].ptr, bufs["mask"].ptr,
                  bufs["mt"].ptr, nul if softmax else bufs["lm"].ptr, nul if softmax else bufs["se"].ptr,
                  bufs["sm"].ptr if softmax else nul, bufs["ig"].ptr, bufs["wg"].ptr, int(softmax), accumulate)
        ig[b0:b1] = bufs["ig"].arr[:m * hidden].reshape(m, hidden)
        wg[v0:v1] = bufs["wg"].arr[:k * hidden].reshape(k, hidden)

    b._run_private(specs, len(tiles), stage, cores=b.cores[:1])
    a.input_grad_out[...] = ig
    a.weight_grad_out[...] = wg
