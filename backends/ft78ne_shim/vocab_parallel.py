"""The vocabulary-parallel forward of the ``ft78ne``/``mt7004`` backends (ours: no vendor page):
``fusedlinearonlinemaxsum`` (one shard's statistics, before the caller's all-reduce) and
``fusedcrossentropylosswithmaxsum`` (the per-token loss, and the shard's softmax, after it).

The DSP layout takes C ``int`` targets and writes one mask byte per token (nonzero: the target is
not in this shard), so the backend declares the ``"bool"`` mask only. int64 targets are declared
too: the library only asks whether ``vocab_start <= t < vocab_end`` (both C ints, ``vocab_start >=
0``) and then reads ``t - vocab_start``, so :func:`dsp_targets` clips them to ``[-1, INT_MAX]``:
every value inside int32 is unchanged, and one outside stays outside every shard (below 0, or at
least ``INT_MAX >= vocab_end``), which is all the library needs to know about it. The int32 masked
target the library writes is widened back to int64 exactly.

Private memory stages token tiles (and vocabulary tiles when the shard's weight does not fit) into
the cores' arenas. Token tiles alone give the shared call's bits (each token row is computed
alone); vocabulary tiles give one set of statistics per tile, combined here in float64 and rounded
once (the all-reduce's formulas), so they agree with the shared call within rounding.
"""

from __future__ import annotations

import numpy as np

from . import abi
from .staging import fit, ranges

ONLINE_MAX_SUM = "fusedlinearonlinemaxsum"
LOSS_WITH_MAX_SUM = "fusedcrossentropylosswithmaxsum"


def dsp_targets(target: np.ndarray) -> np.ndarray:
    """``target`` as the C ``int`` array the library reads: int32 as it is, int64 clipped to
    ``[-1, INT_MAX]`` (module docstring: the mask and masked target do not change)."""
    if target.dtype == np.int32:
        return target
    return np.clip(target, -1, abi.INT_MAX).astype(np.int32)


def _int_out(b, arr: np.ndarray) -> np.ndarray:
    """Where a shared call writes an integer output: the output itself for the emulator, else
    scratch of all-ones bytes (what an element the library never writes shows)."""
    if b._features.direct and arr.flags.aligned:
        return arr
    out = np.empty_like(arr)
    out.reshape(-1).view(np.uint8)[...] = 0xFF
    return out


def online_max_sum(b, a) -> None:
    b._require(a.request())
    dt = a.input.dtype
    (bt, hidden), vocab = a.input.shape, a.weight.shape[0]
    for what, n in (("bt", bt), ("hidden", hidden), ("vocab", vocab), ("vocab_start", a.vocab_start),
                    ("vocab_end", a.vocab_end)):
        abi.c_int(what, n)
    target = dsp_targets(a.target)
    mask = a.target_mask_out.view(np.uint8)  # declared "bool": one byte per token, as the library writes it
    fname, ct = b._names(dt, ONLINE_MAX_SUM)
    if b.memory == "private":
        _online_max_sum_private(b, a, fname, ct, target)
        return
    lm, se, pr = b._out(a.logits_max_out), b._out(a.sum_exp_out), b._out(a.predicted_out)
    mk = _int_out(b, mask)
    mt = _int_out(b, a.masked_target_out) if a.masked_target_out.dtype == np.int32 else np.empty(bt, np.int32)
    logits = b._out(a.logits_out) if a.logits_out is not None else None
    b._invoke(fname, bt, hidden, vocab, b._ptr(a.input, ct), b._ptr(a.weight, ct), b._ptr(target, "int"),
              a.vocab_start, a.vocab_end, b._ptr(lm, "float"), b._ptr(se, "float"), b._ptr(pr, "float"),
              b._ptr(mk, "unsigned char"), b._ptr(mt, "int"), b._ptr(logits, ct), int(logits is not None),
              b.core_mask)
    for dst, src in ((a.logits_max_out, lm), (a.sum_exp_out, se), (a.predicted_out, pr)):
        b._finish(dst, src)
    mask[...] = mk != 0  # nonzero means masked: a library may write any nonzero byte, a bool holds 0 or 1
    if mt.dtype == a.masked_target_out.dtype:
        b._finish(a.masked_target_out, mt)
    else:
        a.masked_target_out[...] = mt  # int32 -> int64, exact
    if logits is not None:
        b._finish(a.logits_out, logits)


def _online_max_sum_private(b, a, fname, ct, target):
    """Tiles of tokens (x vocabulary rows when the weight does not fit half the budget), spread
    over the cores of the mask; every output is written once every tile has succeeded."""
    dt = a.input.dtype
    es = dt.itemsize
    (bt, hidden), vocab = a.input.shape, a.weight.shape[0]
    logits_wanted = a.logits_out is not None

    def need(m, k):
        return (b._blk(m * hidden * es) + b._blk(k * hidden * es) + 2 * b._blk(m * 4) + 3 * b._blk(m * 4)
                + b._blk(m) + (b._blk(m * k * es) if logits_wanted else 0))

    budget = b._budget()
    if need(1, 1) > budget:
        raise b._too_big(f"{fname} on one token and one vocabulary row (hidden={hidden})", need(1, 1))
    vt = vocab if need(1, vocab) <= budget else max(1, fit(budget // 2, lambda k: need(1, k), vocab))
    btile = fit(budget, lambda m: need(m, vt), max(bt, 1))
    v_tiles, b_tiles = ranges(vocab, vt), ranges(bt, btile)
    tiles = [(bi, vi) for vi in range(len(v_tiles)) for bi in range(len(b_tiles))]
    nv = len(v_tiles)
    # per vocabulary tile: its statistics, mask and masked target (relative to the tile)
    lm, se, pr = (np.zeros((nv, bt), np.float32) for _ in range(3))
    mk = np.ones((nv, bt), np.uint8)
    mt = np.zeros((nv, bt), np.int32)
    logits = np.zeros((bt, vocab), dt) if logits_wanted else None
    specs = {"x": (ct, dt, btile * hidden), "w": (ct, dt, vt * hidden), "t": ("int", np.int32, btile),
             "lm": ("float", np.float32, btile), "se": ("float", np.float32, btile),
             "pr": ("float", np.float32, btile), "mk": ("unsigned char", np.uint8, btile),
             "mt": ("int", np.int32, btile)}
    if logits_wanted:
        specs["lg"] = (ct, dt, btile * vt)

    def stage(i, bufs):
        bi, vi = tiles[i]
        (b0, b1), (v0, v1) = b_tiles[bi], v_tiles[vi]
        m, k = b1 - b0, v1 - v0
        # the tile's global rows, clamped to the shard's end (C ints: start + v1 may pass INT_MAX, end does not)
        lo, hi = min(a.vocab_start + v0, a.vocab_end), min(a.vocab_start + v1, a.vocab_end)
        bufs["x"].arr[:m * hidden] = a.input[b0:b1].reshape(-1)
        bufs["w"].arr[:k * hidden] = a.weight[v0:v1].reshape(-1)
        bufs["t"].arr[:m] = target[b0:b1]
        b._invoke(fname, m, hidden, k, bufs["x"].ptr, bufs["w"].ptr, bufs["t"].ptr, lo, hi, bufs["lm"].ptr,
                  bufs["se"].ptr, bufs["pr"].ptr, bufs["mk"].ptr, bufs["mt"].ptr,
                  bufs["lg"].ptr if logits_wanted else b.ffi.NULL, int(logits_wanted))
        for name, dst in (("lm", lm), ("se", se), ("pr", pr), ("mk", mk), ("mt", mt)):
            dst[vi, b0:b1] = bufs[name].arr[:m]
        if logits_wanted:
            logits[b0:b1, v0:v1] = bufs["lg"].arr[:m * k].reshape(m, k)

    b._run_private(specs, len(tiles), stage)
    if nv == 1:
        stats, mask, masked = (lm[0], se[0], pr[0]), mk[0], mt[0]
    else:
        stats, mask, masked = _combine_tiles(lm, se, pr, mk, mt, [v0 for v0, _ in v_tiles])
    a.logits_max_out[...], a.sum_exp_out[...], a.predicted_out[...] = stats
    a.target_mask_out.view(np.uint8)[...] = mask != 0
    a.masked_target_out[...] = masked
    if logits_wanted:
        a.logits_out[...] = logits


def _combine_tiles(lm, se, pr, mk, mt, starts):
    """One shard's statistics from its vocabulary tiles' (float64, rounded once): the max of the
    maxes, the sums rescaled to it, and the predicted logit of the one tile holding the target."""
    m = lm.max(axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.exp(lm.astype(np.float64) - m)
        s = (se * scale).sum(axis=0)
    inside = mk == 0  # at most one tile per token
    hit = inside.any(axis=0)
    j = inside.argmax(axis=0)
    cols = np.arange(lm.shape[1])
    p = np.where(hit, pr[j, cols].astype(np.float64) + lm[j, cols] - m, 0.0)
    masked = np.where(hit, mt[j, cols] + np.asarray(starts)[j], 0)
    return (m, s.astype(np.float32), p.astype(np.float32)), (~hit).astype(np.uint8), masked


def loss_with_max_sum(b, a) -> None:
    b._require(a.request())
    dt = np.dtype(a.dtype)  # the logits' (float32, or float16 on MT7004), or float32 without them
    bt = abi.c_int("bt", a.loss_out.shape[0])
    softmax = a.softmax_out is not None
    vocab = abi.c_int("vocab", a.vocab_parallel_logits.shape[1]) if softmax else 0
    fname, ct = b._names(dt, LOSS_WITH_MAX_SUM)
    if b.memory == "private":
        _loss_private(b, a, fname, ct, bt, vocab, softmax)
        return
    loss = b._out(a.loss_out)
    sm = b._out(a.softmax_out) if softmax else None
    b._invoke(fname, bt, vocab, b._ptr(a.logits_max, "float"), b._ptr(a.sum_exp_logits, "float"),
              b._ptr(a.predicted_logits, "float"), b._ptr(a.vocab_parallel_logits, ct), b._ptr(loss, "float"),
              b._ptr(sm, "float"), int(softmax), b.core_mask)
    b._finish(a.loss_out, loss)
    if softmax:
        b._finish(a.softmax_out, sm)


def _loss_private(b, a, fname, ct, bt, vocab, softmax):
    """Tiles of tokens x logit columns (each element is computed alone: the shared call's bits),
    spread over the cores of the mask."""
    es = np.dtype(a.dtype).itemsize

    def need(m, k):
        return 4 * b._blk(m * 4) + ((b._blk(m * k * es) + b._blk(m * k * 4)) if softmax else 0)

    budget = b._budget()
    if need(1, min(vocab, 1)) > budget:
        raise b._too_big(f"{fname} on one token", need(1, 1))
    vt = vocab if need(1, vocab) <= budget else fit(budget, lambda k: need(1, k), vocab)  # then tokens, as fit
    btile = fit(budget, lambda m: need(m, vt), max(bt, 1))
    v_tiles, b_tiles = ranges(vocab, vt) if vt else [(0, 0)], ranges(bt, btile)
    tiles = [(bi, vi) for vi in range(len(v_tiles)) for bi in range(len(b_tiles))]
    loss = np.zeros(bt, np.float32)
    sm = np.zeros((bt, vocab), np.float32) if softmax else None
    specs = {"lm": ("float", np.float32, btile), "se": ("float", np.float32, btile),
             "pr": ("float", np.float32, btile), "loss": ("float", np.float32, btile)}
    if softmax:
        specs["lg"] = (ct, np.dtype(a.dtype), btile * vt)
        specs["sm"] = ("float", np.float32, btile * vt)

    def stage(i, bufs):
        bi, vi = tiles[i]
        (b0, b1), (v0, v1) = b_tiles[bi], v_tiles[vi]
        m, k = b1 - b0, v1 - v0
        bufs["lm"].arr[:m] = a.logits_max[b0:b1]
        bufs["se"].arr[:m] = a.sum_exp_logits[b0:b1]
        bufs["pr"].arr[:m] = a.predicted_logits[b0:b1]
        if softmax:
            bufs["lg"].arr[:m * k] = a.vocab_parallel_logits[b0:b1, v0:v1].reshape(-1)
        nul = b.ffi.NULL
        b._invoke(fname, m, k, bufs["lm"].ptr, bufs["se"].ptr, bufs["pr"].ptr, bufs["lg"].ptr if softmax else nul,
                  bufs["loss"].ptr, bufs["sm"].ptr if softmax else nul, int(softmax))
        if vi == 0:  # every vocabulary tile of these tokens computes the same loss
            loss[b0:b1] = bufs["loss"].arr[:m]
        if softmax:
            sm[b0:b1, v0:v1] = bufs["sm"].arr[:m * k].reshape(m, k)

    b._run_private(specs, len(tiles), stage)
    a.loss_out[...] = loss
    if softmax:
        a.softmax_out[...] = sm

