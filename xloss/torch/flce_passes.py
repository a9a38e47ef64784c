"""The FLCE options, and the bodies of its two custom ops (:mod:`xloss.kernels.flce.torch_ops`).

A scalar reduction with a gradient wanted ("precomputed"): the forward computes the gradients for
upstream 1 and the backward scales them (or, 16-bit native with a scale not a power of two, recomputes,
so G is rounded once); otherwise the backward recomputes from each token's row max and sum of
exponentials. The route: ``native`` (:mod:`.flce_native`), else token chunks whose statistics come from
the backend's vocabulary-parallel kernels (:mod:`.flce_max_sum`) or PyTorch's GEMMs (:mod:`.flce_chunks`).
"""

from __future__ import annotations

import zlib
from collections import namedtuple

import torch

from ..errors import UnsupportedRequestError, XLossValueError
from . import _checks as checks
from . import flce_chunks as chunks
from . import flce_max_sum as VP
from . import flce_native
from .chunking import resolve_sizes, spans
from .distributed import Collectives, group_of, view_range
from .ops import backend_of

#: The settings without the wanted gradients and the backend: the op schema's first 14 arguments (typed there).
Params = namedtuple("Params", "reduction ignore_index label_smoothing softcap z_scale chunk block start vocab group "
                              "native accum accuracy token_scaling")


class FlceOptions(namedtuple("FlceOptions", (*Params._fields, "want_dx", "want_dw", "want_db", "backend"),
                             defaults=(False, False, False, None))):
    """One call's checked settings, the op arguments after the five tensors. ``softcap``, ``z_scale``: 0 is
    off; ``start``: this rank's first global vocabulary row, ``vocab``: the global vocabulary (-1: not yet
    settled); ``group``: a distributed.group_key; ``accum``: "float64" or None; ``backend``: an ops.backend_key."""

    __slots__ = ()
    want = property(lambda self: self[14:17])
    precomputed = property(lambda self: self.reduction != "none" and any(self.want))


def settled(o: FlceOptions, input, weight, bias, target, class_weight, coll: Collectives) -> FlceOptions:
    """``o`` with the vocabulary layout and the chunk sizes, from the call's first collective, which compares
    what must be equal on every rank. In eager mode before the ops; under torch.compile in them."""
    hidden, rows, bt = input.shape[-1], weight.shape[0], target.numel()
    settings = [] if not coll.active else [  # what must be equal on every rank
        ("tokens", bt), ("hidden size", hidden), ("chunk_size", o.chunk),
        ("targets (checksum)", _checksum(target)), ("reduction", o.reduction), ("ignore_index", o.ignore_index),
        ("label_smoothing", o.label_smoothing), ("dtype", chunks.dtype_name(input.dtype)),
        ("class_weight (checksum)", None if class_weight is None else _checksum(class_weight)),
        ("softcap", o.softcap), ("lse_square_scale", o.z_scale), ("use_token_scaling", o.token_scaling),
        ("return_token_accuracy", o.accuracy), ("accum_dtype", o.accum),
        ("backend", getattr(backend_of(o.backend), "name", o.backend)), ("bias given", bias is not None)]
    start, vocab = coll.agree(rows, settings, None, view_range(weight) if coll.active else None)
    # the token chunk is one round of collectives, so the same on every rank: its default depends on the
    # global vocabulary only. From here on an error depends only on what every rank shares.
    chunk, _ = resolve_sizes(o.chunk or None, 1, hidden, vocab, half=o.native and input.dtype in flce_native.HALF)
    _, block = resolve_sizes(chunk, o.block or None, hidden, rows)
    if vocab < 1 and bt:
        raise XLossValueError("weight has no rows: the vocabulary must hold at least one class")
    if class_weight is not None and tuple(class_weight.shape) != (vocab,):
        raise XLossValueError(f"class_weight must have shape ({vocab},), one per class of the (global) "
                              f"vocabulary; got {checks.shape_str(class_weight.shape)}")
    return o._replace(chunk=chunk, block=block, start=start, vocab=vocab)


def _checksum(t: torch.Tensor) -> int:
    """CRC-32 of a tensor's values (int64 or float64) and shape: equal tensors on every rank, equal sums."""
    wide = t.detach().to(torch.float64 if t.is_floating_point() else torch.int64).contiguous().cpu()
    return zlib.crc32(wide.numpy().tobytes(), zlib.crc32(repr(tuple(t.shape)).encode()))


def _upstreams(sh, o: FlceOptions, g: float):
    """The divisors (of the cross entropy, the z-loss, the accuracy), and the per-token upstream gradients
    of a scalar reduction scaled by ``g`` (of the cross entropy, of the z-loss or None)."""
    valid = sh.target != sh.ignore_index
    count = float(valid.sum()) if o.reduction == "mean" or o.z_scale or o.accuracy else 0.0
    z_denom = count if o.reduction == "mean" else 1.0
    denom = z_denom if o.reduction != "mean" or sh.class_weight is None else \
        float(chunks.targets_of(sh, slice(None)).w_t.sum(dtype=torch.float64))  # the summed class weight

    def upstream(d):
        return torch.zeros(sh.x.shape[0], dtype=sh.cdt).masked_fill_(valid, g * (1.0 / d if d else float("inf")))

    return (denom, z_denom, count), (upstream(denom), upstream(z_denom) if o.z_scale else None)


def _divided(values: torch.Tensor, d: float) -> torch.Tensor:
    """``sum(values) / d`` in float64; NaN when d is 0 (the mean of nothing, as PyTorch)."""
    total = values.sum(dtype=torch.float64)
    return total / d if d else total * float("nan")


def forward(x, w, b, target, cw, o: FlceOptions):
    """The forward op's body."""
    o = o if o.vocab >= 0 else settled(o, x, w, b, target, cw, Collectives(group_of(o.group)))
    checks.check_class_indices(target, o.vocab, o.ignore_index)
    sh = chunks.Shard(x, w, b, target, cw, o)
    bt, cdt, pre = x.shape[0], sh.cdt, o.precomputed
    (denom, z_denom, count), (g_all, gz_all) = _upstreams(sh, o, 1.0)
    if o.native:  # (with g_all None the engine computes no gradient)
        per, (row_max, sum_exp), grads = flce_native.run(sh, o.want, *((g_all, None, gz_all) if pre else (None,) * 3))
        losses, zl, correct = per.loss, per.z, per.correct
        masks = (target.new_empty(0, dtype=torch.bool), target.new_empty(0, dtype=torch.int64))
    else:
        losses, correct, zl = torch.zeros(bt, dtype=cdt), torch.zeros(bt), None
        row_max, sum_exp = torch.empty(bt, dtype=cdt), torch.empty(bt, dtype=cdt)
        masks = (torch.empty(bt, dtype=torch.bool), torch.empty(bt, dtype=torch.int64))  # target_mask, masked_target
        gr = chunks.Grads(sh, o.want) if pre else None
        rt = VP.route(sh, keep=pre)
        for t0, t1 in spans(bt, o.chunk):
            tg = chunks.targets_of(sh, slice(t0, t1))
            st, losses[t0:t1] = (VP.chunk_stats(sh, rt, tg, t0, t1) if rt is not None
                                 else chunks.chunk_stats(sh, x[t0:t1].to(cdt), tg, keep=pre))
            if o.accuracy:
                correct[t0:t1] = chunks.correct(tg, st)
            row_max[t0:t1], sum_exp[t0:t1] = st.logits_max, st.sum_exp
            masks[0][t0:t1], masks[1][t0:t1] = st.block_args(tg, 0, sh.rows)
            if pre:
                gr.add_chunk(t0, t1, tg, g_all[t0:t1], st)
            del st
        grads = gr.finish() if pre else (None, None, None)
    if o.reduction != "none":
        losses, zl = _divided(losses, denom), None if zl is None else _divided(zl, z_denom)
        correct = _divided(correct, count).to(torch.float32) if o.accuracy else None
    loss = (losses if zl is None else losses + zl).to(cdt)  # the losses' dtype: float32 for 16-bit operands
    return (loss, x.new_empty(0, dtype=cdt) if zl is None else zl.to(cdt), correct if o.accuracy else torch.empty(0),
            row_max, sum_exp) + tuple(x.new_empty(0) if t is None else t for t in grads) + masks


def backward(grad, x, w, b, target, cw, row_max, sum_exp, target_mask, masked_target, dx, dw, db, o: FlceOptions):
    """The backward op's body: ``(dx, dw, db)``, empty (0,) where not wanted."""
    want = o.want
    if o.precomputed:
        g = grad.reshape(()).item()
        dt = next(t.dtype for t, wanted in zip((dx, dw, db), want) if wanted)
        if not (o.native and dt in flce_native.HALF) or flce_native.exact_scale(dt, g):
            # fresh tensors: an op's outputs may not alias its inputs
            return tuple(t * g if wanted else t.new_empty(0) for t, wanted in zip((dx, dw, db), want))
    if x is None or w is None:
        raise UnsupportedRequestError("fused_linear_cross_entropy backward: the operands were not saved")
    o = o if o.vocab >= 0 else settled(o, x, w, b, target, cw, Collectives(group_of(o.group)))
    sh = chunks.Shard(x, w, b, target, cw, o)
    if o.precomputed:  # 16-bit, g not a power of two: recompute with g folded in, so G is rounded once
        g_all, gz_all = _upstreams(sh, o, g)[1]
    else:
        g_all = grad.reshape(-1).to(sh.cdt)  # (ignored tokens are masked chunk by chunk)
        gz_all = g_all if o.z_scale else None
    if o.native:
        grads = flce_native.run(sh, want, g_all, (row_max, sum_exp), gz_all)[2]
    else:
        gr, given = chunks.Grads(sh, want), target_mask is not None and target_mask.numel()
        for t0, t1 in spans(x.shape[0], o.chunk):
            masks = (target_mask[t0:t1], masked_target[t0:t1]) if given else (None, None)
            st = chunks.RowStats(row_max[t0:t1], sum_exp[t0:t1], None, None, None, None, *masks)
            tg = chunks.targets_of(sh, slice(t0, t1))
            gr.add_chunk(t0, t1, tg, torch.where(tg.valid, g_all[t0:t1], 0.0), st)
        grads = gr.finish()
    return tuple(t if wanted and t is not None else x.new_empty(0) for t, wanted in zip(grads, want))
