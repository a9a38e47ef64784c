"""The bodies of the fused linear-cross-entropy's two custom ops (``torch.ops.xloss.fused_linear_cross_entropy``
and ``..._backward``, :mod:`xloss.torch.ops`): everything that needs the data — the class-index
check, ``mean``'s divisor, the chunked passes — runs here, inside the op, where torch.compile
does not trace.

Two ways through, chosen by what autograd will need (``want``: input/weight/bias gradients):

* scalar reduction with a gradient wanted ("precomputed"): the upstream gradient is a scalar
  and the gradients are linear in it, so the forward computes them (for upstream 1) and the
  backward only scales them — except 16-bit operands on the native path with a scale that is
  not a power of two, which recompute from the saved row statistics so that G is rounded once;
* ``reduction="none"`` (or no gradient wanted): the forward keeps the per-token row max and
  sum of exponentials, the backward recomputes with the per-token upstream gradients.

The statistics: :mod:`.flce_native` on the cpu backend's GEMM path; otherwise the backend's
vocabulary-parallel kernels where :func:`.flce_max_sum.route` finds them, else
:func:`.flce_chunks.chunk_stats` (PyTorch GEMMs).

The forward's outputs, always all of them (shapes fixed by the arguments, so the fake
implementation needs no data): ``loss`` (() or (BT,), z-loss included), ``z_loss`` (same shape;
empty (0,) without z-loss), ``accuracy`` (() or (BT,), float32; empty when not asked),
``row_max``/``sum_exp`` (BT,), the precomputed ``dx``/``dw``/``db`` (empty where not computed), and
``target_mask``/``masked_target`` (BT,) — where the target lies in this shard, as the forward found it
(from the online max-sum kernel on its route) for the backward's gradient kernel; empty (0,) on the
native path, which recomputes with its own row passes.

Reductions (Liger-Kernel's): ``mean`` divides the cross entropy by the summed class weight of the
tokens not ignored, the z-loss and the accuracy by their count; ``sum`` sums both losses and
still averages the accuracy over the tokens not ignored.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import UnsupportedRequestError
from . import _checks as checks
from . import flce_chunks as chunks
from . import flce_max_sum as VP
from . import flce_native
from .chunking import spans
from .distributed import Collectives, group_of

_ACCUM = {"float32": torch.float32, "float64": torch.float64}


class Params(NamedTuple):
    """The settings of one call, as they cross into the ops (primitive values only)."""

    reduction: str
    ignore_index: int
    label_smoothing: float
    softcap: float  # 0: off
    z_scale: float  # lse_square_scale; 0: off
    chunk: int
    block: int
    start: int  # global index of this rank's first vocabulary row
    vocab: int  # the global vocabulary
    group: str | None  # distributed.group_key of the process group
    native: bool  # the torch-GEMM path of flce_native
    accum: str | None  # dtype name of the weight/bias gradient accumulators
    accuracy: bool  # compute the token accuracy (else it comes back as zeros)
    token_scaling: bool  # Liger-Kernel's use_token_scaling


def loss_dtype(dtype: torch.dtype) -> torch.dtype:
    """Losses of 16-bit operands are float32; otherwise the operands' dtype."""
    return torch.float32 if dtype in flce_native.HALF else dtype


def _shard(x, w, b, target, cw, p: Params, backend) -> chunks.Shard:
    return chunks.Shard(x, w, b, target, cw, p.start, p.vocab, p.ignore_index, p.label_smoothing, p.chunk, p.block,
                        Collectives(group_of(p.group)), backend, p.softcap, p.z_scale,
                        None if p.accum is None else _ACCUM[p.accum], p.accuracy, p.token_scaling)


def _divisors(sh: chunks.Shard, p: Params) -> tuple[float, float]:
    """(cross entropy's divisor, z-loss's and accuracy's divisor): the summed class weight and the
    count of the tokens not ignored for ``mean``; 1 and the count otherwise (0 when unused)."""
    need_count = p.reduction == "mean" or p.z_scale or p.accuracy
    count = float((sh.target != sh.ignore_index).sum()) if need_count else 0.0
    if p.reduction != "mean":
        return 1.0, count
    return (chunks.denominator(sh) if sh.class_weight is not None else count), count


def _upstream(sh: chunks.Shard, scale: float) -> torch.Tensor:
    """Per-token upstream gradient of a scalar reduction: ``scale`` on non-ignored tokens."""
    return torch.zeros(sh.x.shape[0], dtype=sh.cdt).masked_fill_(sh.target != sh.ignore_index, scale)


def _inverse(d: float) -> float:
    return 1.0 / d if d else float("inf")


def _needs_remainder(sh: chunks.Shard, kernels: chunks.Kernels, mode: str) -> bool:
    return bool(sh.label_smoothing) and (sh.class_weight is not None or kernels.get(mode, 1)[1] == 0.0)


def _divided(values: torch.Tensor, d: float) -> torch.Tensor:
    """``sum(values) / d`` in float64; NaN when d is 0 (the mean of nothing, as PyTorch)."""
    total = values.sum(dtype=torch.float64)
    return total / d if d else total * float("nan")


def _empty_if_none(t, like: torch.Tensor) -> torch.Tensor:
    return like.new_empty(0) if t is None else t


def forward(x, w, b, target, cw, p: Params, want: tuple, backend):
    """The forward op's body: ``(loss, z_loss, accuracy, row_max, sum_exp, dx, dw, db, target_mask,
    masked_target)``."""
    checks.check_class_indices(target, p.vocab, p.ignore_index)
    sh = _shard(x, w, b, target, cw, p, backend)
    bt, cdt = x.shape[0], sh.cdt
    precomputed = any(want) and p.reduction != "none"
    denom, count = _divisors(sh, p)
    z_denom = count if p.reduction == "mean" else 1.0
    grads = (None, None, None)
    target_mask = masked_target = None
    if p.native:
        g_all = gz_all = None
        if precomputed:
            g_all = _upstream(sh, _inverse(denom))
            gz_all = _upstream(sh, _inverse(z_denom)) if p.z_scale else None
        per, (row_max, sum_exp), made = flce_native.run(sh, want if precomputed else (False,) * 3, g_all, None, gz_all)
        losses, zl, correct = per.loss, per.z, per.correct
        if precomputed:
            grads = made
    else:
        losses, correct = torch.zeros(bt, dtype=cdt), torch.zeros(bt)
        row_max, sum_exp = torch.empty(bt, dtype=cdt), torch.empty(bt, dtype=cdt)
        target_mask, masked_target = torch.empty(bt, dtype=torch.bool), torch.empty(bt, dtype=torch.int64)
        zl = None
        kernels = chunks.Kernels(sh) if precomputed else None
        gr = chunks.Grads.new(sh, *want) if precomputed else None
        row_sum = chunks.remainder_row_sum(sh) if precomputed and want[0] and _needs_remainder(sh, kernels, "softmax") \
            else None
        scale = _inverse(denom)
        rt = VP.route(sh, keep=precomputed)  # the backend's vocabulary-parallel kernels, where they serve
        for t0, t1 in spans(bt, p.chunk):
            tg = chunks.targets_of(sh, slice(t0, t1))
            if rt is not None:
                st, losses[t0:t1] = VP.chunk_stats(sh, rt, tg, t0, t1)
            else:
                st = chunks.chunk_stats(sh, x[t0:t1].to(cdt), tg, keep=precomputed)
                losses[t0:t1] = chunks.token_loss(sh, tg, st)
            if p.accuracy:
                correct[t0:t1] = chunks.correct(tg, st)
            row_max[t0:t1], sum_exp[t0:t1] = st.logits_max, st.sum_exp
            if st.target_mask is not None:  # the online max-sum kernel's
                target_mask[t0:t1], masked_target[t0:t1] = st.target_mask, st.masked_target
            else:
                target_mask[t0:t1], masked_target[t0:t1] = ~tg.in_shard, tg.local
            if precomputed:
                g = torch.zeros(t1 - t0, dtype=cdt).masked_fill_(tg.valid, scale)
                chunks.chunk_grads(sh, kernels, gr, t0, t1, tg, g, st, row_sum)
            del st
        if precomputed:
            grads = chunks.finish(sh, gr)
    ldt = loss_dtype(x.dtype)
    if p.reduction == "none":
        z_out = x.new_empty(0, dtype=ldt) if zl is None else zl.to(ldt)
        loss = (losses if zl is None else losses + zl).to(ldt)
        acc = correct if p.accuracy else torch.empty(0)
    else:
        ce = _divided(losses, denom)
        if zl is None:
            loss, z_out = ce.to(ldt), x.new_empty(0, dtype=ldt)
        else:
            z = _divided(zl, z_denom)
            loss, z_out = (ce + z).to(ldt), z.to(ldt)
        acc = _divided(correct, count).to(torch.float32) if p.accuracy else torch.empty(0)
    masks = tuple(target.new_empty(0, dtype=dt) if t is None else t
                  for t, dt in ((target_mask, torch.bool), (masked_target, torch.int64)))
    return (loss, z_out, acc, row_max, sum_exp) + tuple(_empty_if_none(t, x) for t in grads) + masks


def backward(grad, x, w, b, target, cw, row_max, sum_exp, target_mask, masked_target, dx, dw, db, p: Params,
             want: tuple, backend):
    """The backward op's body: ``(dx, dw, db)``, empty (0,) where not wanted. ``target_mask`` and
    ``masked_target``: the forward's (or None), handed to the gradient kernel."""
    precomputed = any(want) and p.reduction != "none"
    if precomputed:
        g = grad.reshape(()).item()
        dt = next(t.dtype for t, wanted in zip((dx, dw, db), want) if wanted)
        if not (p.native and dt in flce_native.HALF) or flce_native.exact_scale(dt, g):
            # fresh tensors: an op's outputs may not alias its inputs
            return tuple(t * g if wanted else t.new_empty(0) for t, wanted in zip((dx, dw, db), want))
    if x is None or w is None:
        raise UnsupportedRequestError("fused_linear_cross_entropy backward: the operands were not saved")
    sh = _shard(x, w, b, target, cw, p, backend)
    cdt = sh.cdt
    if precomputed:  # 16-bit, g not a power of two: recompute with g folded in, so G is rounded once
        denom, count = _divisors(sh, p)
        g_all = _upstream(sh, g * _inverse(denom))
        gz_all = _upstream(sh, g * _inverse(count if p.reduction == "mean" else 1.0)) if p.z_scale else None
    else:
        g_all = grad.reshape(-1).to(cdt)  # (ignored tokens are masked chunk by chunk)
        gz_all = g_all if p.z_scale else None
    if p.native:
        _, _, grads = flce_native.run(sh, want, g_all, (row_max, sum_exp), gz_all)
    else:
        kernels = chunks.Kernels(sh)
        mode = "softmax" if b is not None else "recompute"
        gr = chunks.Grads.new(sh, *want)
        row_sum = chunks.remainder_row_sum(sh) if _needs_remainder(sh, kernels, mode) and want[0] else None
        for t0, t1 in spans(x.shape[0], p.chunk):
            tg = chunks.targets_of(sh, slice(t0, t1))
            st = chunks.RowStats(row_max[t0:t1], sum_exp[t0:t1], None, None, None)
            if target_mask is not None and target_mask.numel():
                st.target_mask, st.masked_target = target_mask[t0:t1], masked_target[t0:t1]
            chunks.chunk_grads(sh, kernels, gr, t0, t1, tg, torch.where(tg.valid, g_all[t0:t1], 0.0), st, row_sum)
        grads = chunks.finish(sh, gr)
    return tuple(t if wanted and t is not None else x.new_empty(0) for t, wanted in zip(grads, want))
