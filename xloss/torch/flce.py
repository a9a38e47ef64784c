"""Fused linear-cross-entropy for autograd: ``cross_entropy(input @ weight.T + bias, target)``
without the (tokens × vocabulary) logits, with its gradients from an xloss backend's
``fused_linear_cross_entropy_grad`` — single process or vocabulary-parallel.

Two ways through, chosen by what autograd will need:

* ``reduction="mean"/"sum"`` with a gradient wanted: the upstream gradient is a scalar and
  the gradients are linear in it, so the forward computes them chunk by chunk (logits →
  softmax in place → backend kernel in "softmax" mode) and the backward only scales them:
  three GEMMs (logits, input grad, weight grad), as many as autograd through materialised
  logits, and no (BT, V) tensor.
* ``reduction="none"`` (or no gradient wanted): the forward finds each token's row max and
  sum of exponentials online, block by block, and keeps just those two numbers per token; the
  backward knows the per-token upstream gradients and runs the kernel in "recompute" mode —
  the Ascend kernel's own mode — at the cost of a fourth GEMM.

float32 and 16-bit operands with the ``cpu`` backend (or the default) take :mod:`.flce_native`:
the same two ways, with PyTorch's GEMMs called here and fused Numba row passes (16-bit: the
products on the CPU's native 16-bit GEMMs and G rounded once to the operand dtype); the loss is float32 (as transformers and cut-cross-entropy
return it), the gradients are in the operands' dtype. Under ``torch.autocast("cpu")`` the
operands are cast to the autocast dtype first, as ``F.linear`` would cast them.

Second-order gradients (``create_graph=True``) are not supported: the backward raises
:class:`~xloss.errors.UnsupportedRequestError` rather than return gradients that autograd
cannot differentiate again.

The arithmetic, the class weights and label smoothing are in :mod:`.flce_chunks`; the chunk
sizes in :mod:`.chunking`; the collectives in :mod:`.distributed`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UnsupportedRequestError, XLossValueError
from ..validation import real_number
from . import _checks as C
from . import flce_chunks as F
from . import flce_native as H
from .chunking import resolve_sizes, spans
from .distributed import Collectives


@dataclass(frozen=True)
class _Settings:
    reduction: str
    ignore_index: int
    label_smoothing: float
    chunk: int
    block: int
    start: int
    vocab: int
    coll: Collectives
    backend: object
    native: bool  # float32/16-bit operands with the cpu backend: flce_native

    def shard(self, x, w, b, target, class_weight) -> F.Shard:
        return F.Shard(x, w, b, target, class_weight, self.start, self.vocab, self.ignore_index,
                       self.label_smoothing, self.chunk, self.block, self.coll, self.backend)


def loss_dtype(dtype: torch.dtype) -> torch.dtype:
    """Losses of 16-bit operands are float32; otherwise the operands' dtype."""
    return torch.float32 if dtype in H.HALF else dtype


def _reduce(sh: F.Shard, total: torch.Tensor, reduction: str, denom) -> torch.Tensor:
    if reduction == "mean":
        total = total / denom if denom else total * float("nan")
    return total.to(loss_dtype(sh.x.dtype))


def _upstream(sh: F.Shard, scale: float) -> torch.Tensor:
    """Per-token upstream gradient of a scalar reduction: ``scale`` on non-ignored tokens, float32."""
    return torch.zeros(sh.x.shape[0]).masked_fill_(sh.target != sh.ignore_index, scale)


def _needs_remainder(sh: F.Shard, kernels: F.Kernels, mode: str) -> bool:
    return bool(sh.label_smoothing) and (sh.class_weight is not None or kernels.get(mode, 1)[1] == 0.0)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, target, class_weight, cfg: _Settings):
        sh = cfg.shard(x, w, b, target, class_weight)
        want = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], b is not None and ctx.needs_input_grad[2])
        bt = x.shape[0]
        ctx.cfg = cfg
        ctx.want = want
        if cfg.native:
            return _native_forward(ctx, sh, x, w, b, target, class_weight, want)
        if any(want) and cfg.reduction != "none":
            # scalar upstream: compute the gradients now (for upstream 1), scale them in backward
            denom = F.denominator(sh) if cfg.reduction == "mean" else 1.0
            scale = 1.0 / denom if denom else float("inf")
            kernels = F.Kernels(sh)
            gr = F.Grads.new(sh, *want)
            row_sum = F.remainder_row_sum(sh) if _needs_remainder(sh, kernels, "softmax") and want[0] else None
            total = torch.zeros((), dtype=torch.float64)
            for t0, t1 in spans(bt, cfg.chunk):
                tg = F.targets_of(sh, t0, t1)
                st = F.chunk_stats(sh, x[t0:t1].to(sh.cdt), tg, keep=True)
                total += F.token_loss(sh, tg, st).sum(dtype=torch.float64)
                g = torch.zeros(t1 - t0, dtype=sh.cdt).masked_fill_(tg.valid, scale)
                F.chunk_grads(sh, kernels, gr, t0, t1, tg, g, st, row_sum)
                del st
            ctx.save_for_backward(*F.finish(sh, gr))
            ctx.precomputed = True
            return _reduce(sh, total, cfg.reduction, denom)

        losses = torch.empty(bt, dtype=sh.cdt)
        row_max = torch.empty(bt, dtype=sh.cdt)
        sum_exp = torch.empty(bt, dtype=sh.cdt)
        for t0, t1 in spans(bt, cfg.chunk):
            tg = F.targets_of(sh, t0, t1)
            st = F.chunk_stats(sh, x[t0:t1].to(sh.cdt), tg, keep=False)
            losses[t0:t1] = F.token_loss(sh, tg, st)
            row_max[t0:t1], sum_exp[t0:t1] = st.logits_max, st.sum_exp
        ctx.precomputed = False
        if any(want):
            ctx.save_for_backward(x, w, b, target, class_weight, row_max, sum_exp)
        if cfg.reduction == "none":
            return losses.to(loss_dtype(x.dtype))
        denom = F.denominator(sh) if cfg.reduction == "mean" else 1.0
        return _reduce(sh, losses.sum(dtype=torch.float64), cfg.reduction, denom)

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():
            raise UnsupportedRequestError(
                "fused_linear_cross_entropy does not support second-order gradients (backward with "
                "create_graph=True): its backward is not itself differentiable. Compute this loss's "
                "gradients with create_graph=False, or use F.cross_entropy(F.linear(...)) for double backward")
        if ctx.cfg.native:
            return _native_backward(ctx, grad)
        if ctx.precomputed:
            g = grad.item()
            return tuple(None if t is None else C.scaled(t, g) for t in ctx.saved_tensors) + (None, None, None)
        x, w, b, target, class_weight, row_max, sum_exp = ctx.saved_tensors
        cfg = ctx.cfg
        sh = cfg.shard(x, w, b, target, class_weight)
        kernels = F.Kernels(sh)
        mode = "softmax" if b is not None else "recompute"
        gr = F.Grads.new(sh, *ctx.want)
        row_sum = F.remainder_row_sum(sh) if _needs_remainder(sh, kernels, mode) and ctx.want[0] else None
        g_all = grad.reshape(-1).to(sh.cdt)
        for t0, t1 in spans(x.shape[0], cfg.chunk):
            tg = F.targets_of(sh, t0, t1)
            st = F.RowStats(row_max[t0:t1], sum_exp[t0:t1], None, None, None)
            g = torch.where(tg.valid, g_all[t0:t1], 0.0)
            F.chunk_grads(sh, kernels, gr, t0, t1, tg, g, st, row_sum)
        dx, dw, db = F.finish(sh, gr)
        return dx, dw, db, None, None, None


def _native_forward(ctx, sh: F.Shard, x, w, b, target, class_weight, want):
    cfg = ctx.cfg
    denom = F.denominator(sh) if cfg.reduction == "mean" else 1.0
    ctx.scale = 1.0 / denom if denom else float("inf")
    ctx.precomputed = any(want) and cfg.reduction != "none"
    g_all = _upstream(sh, ctx.scale) if ctx.precomputed else None
    losses, stats, grads = H.run(sh, want, g_all, None)
    if any(want):
        ctx.save_for_backward(x, w, b, target, class_weight, *stats, *(grads if ctx.precomputed else ()))
    if cfg.reduction == "none":
        return losses
    return _reduce(sh, losses.sum(dtype=torch.float64), cfg.reduction, denom)


def _native_backward(ctx, grad):
    x, w, b, target, class_weight, row_max, sum_exp, *saved = ctx.saved_tensors
    sh = ctx.cfg.shard(x, w, b, target, class_weight)
    if ctx.precomputed:
        g = grad.item()
        if x.dtype not in H.HALF or H.exact_scale(x.dtype, g):  # 16-bit gradients times g: still rounded once
            return tuple(None if t is None else C.scaled(t, g) for t in saved) + (None, None, None)
        g_all = _upstream(sh, ctx.scale * g)  # rounding twice otherwise: recompute with g folded in
    else:
        g_all = grad.reshape(-1).float()
    _, _, (dx, dw, db) = H.run(sh, ctx.want, g_all, (row_max, sum_exp))
    return dx, dw, db, None, None, None


def _autocast_dtype(t: torch.Tensor):
    """The dtype ``F.linear`` would compute ``t``'s product in under ``torch.autocast``, or None."""
    if t.device.type != "cpu" or not torch.is_autocast_enabled("cpu") or t.dtype == torch.float64:
        return None
    dt = torch.get_autocast_dtype("cpu")
    return None if dt == t.dtype else dt


def fused_linear_cross_entropy(input, weight, target, bias=None, ignore_index: int = -100, reduction: str = "mean",
                               label_smoothing: float = 0.0, chunk_size=None, backend=None, *, class_weight=None,
                               vocab_chunk_size=None, process_group=None):
    """``F.cross_entropy(input @ weight.T + bias, target, ...)`` in memory bounded by the chunk.

    ``input`` (..., H) and ``weight`` (V, H) (float16/bfloat16/float32/float64, the same dtype;
    logits, softmax and every sum in float32 or wider), ``bias`` (V) optional, ``target`` (...)
    class indices. ``reduction``, ``ignore_index`` and ``label_smoothing`` as in PyTorch;
    ``class_weight`` (K) optional per-class weights (PyTorch's ``weight=``). ``mean`` divides by
    the summed class weight of the non-ignored tokens of the whole batch. The result is a scalar,
    or ``target``'s shape for ``"none"``, in float32 for 16-bit operands and in ``input``'s dtype
    otherwise; the gradients are in the operands' dtypes. 16-bit operands with the ``cpu`` (default)
    backend run the products on the CPU's native 16-bit GEMMs (:mod:`xloss.torch.flce_native`), with
    a default chunk of 2**26 logits (:func:`xloss.torch.chunking.default_half_chunk_size`).

    Memory: tokens are processed ``chunk_size`` at a time, so the transient logits are
    ``chunk_size × V`` float32. The default (:func:`xloss.torch.chunking.default_chunk_size`) is
    ``H`` tokens — logits about the size of the weight gradient — clamped to between 2**20 and
    2**26 logits per chunk: about a thousand tokens amortise each chunk's pass over the (V, H)
    gradient accumulator, and peak memory stays near 2–3× the weight instead of 3 × BT × V
    floats. ``vocab_chunk_size`` bounds the rows of ``weight`` per kernel call (default: about
    32 MiB of kernel outputs per call).

    ``backend``: the xloss backend whose ``fused_linear_cross_entropy_grad`` computes the
    gradients (name or object; default ``cpu`` where available).

    ``process_group``: vocabulary parallelism. ``weight`` (and ``bias``) are then this rank's
    contiguous shard of the vocabulary, the shards lying in rank order; ``input``, ``target``
    and ``class_weight`` (global, length K) are the same on every rank. Every rank gets the
    full loss and the full input gradient; ``weight``'s gradient is its shard's.
    """
    input = C.float_tensor(input, "input")
    cast = _autocast_dtype(input)
    if cast is not None:  # as F.linear under autocast: operands in the autocast dtype (differentiably)
        with torch.autocast("cpu", enabled=False):
            weight = C.float_tensor(weight, "weight")
            return fused_linear_cross_entropy(
                input.to(cast), weight.to(cast) if weight.dtype != torch.float64 else weight, target,
                None if bias is None else C.float_tensor(bias, "bias").to(cast), ignore_index, reduction,
                label_smoothing, chunk_size, backend, class_weight=class_weight,
                vocab_chunk_size=vocab_chunk_size, process_group=process_group)
    if torch.is_autocast_enabled("cpu"):  # float64, or already the autocast dtype: no casts, no autocast inside
        with torch.autocast("cpu", enabled=False):
            return fused_linear_cross_entropy(input, weight, target, bias, ignore_index, reduction, label_smoothing,
                                              chunk_size, backend, class_weight=class_weight,
                                              vocab_chunk_size=vocab_chunk_size, process_group=process_group)
    if input.ndim < 1:
        raise XLossValueError("input must have shape (..., H); got a 0-d tensor")
    hidden = input.shape[-1]
    weight = C.same_dtype(C.float_tensor(weight, "weight"), "weight", input.dtype, "input")
    if weight.ndim != 2 or weight.shape[1] != hidden:
        raise XLossValueError(f"weight must have shape (V, {hidden}) to match input (..., H) = "
                              f"{C.shape_str(input.shape)}; got {C.shape_str(weight.shape)}")
    rows = weight.shape[0]
    if bias is not None:
        bias = C.same_dtype(C.float_tensor(bias, "bias"), "bias", input.dtype, "input")
        if tuple(bias.shape) != (rows,):
            raise XLossValueError(f"bias must have shape ({rows},), one per row of weight; "
                                  f"got {C.shape_str(bias.shape)}")
    target = C.index_tensor(target, "target")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise XLossValueError(f"target must have shape {C.shape_str(input.shape[:-1])} (input's without H); "
                              f"got {C.shape_str(target.shape)}")
    ignore_index = C.integer(ignore_index, "ignore_index")
    reduction = C.reduction(reduction)
    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls < 1.0:
        raise XLossValueError(f"label_smoothing must be in [0, 1); got {ls}")
    coll = Collectives(process_group)
    bt = target.numel()
    given_chunk = 0 if chunk_size is None else C.integer(chunk_size, "chunk_size")
    start, vocab = coll.vocab_layout(rows, bt, given_chunk)
    # the token chunk must be the same on every rank (each chunk is one round of collectives):
    # its default depends on the global vocabulary only; the vocabulary block is per rank
    native = input.dtype in H.DTYPES and _cpu_backend(backend)
    chunk, _ = resolve_sizes(chunk_size, 1, hidden, vocab, half=native and input.dtype in H.HALF)
    _, block = resolve_sizes(chunk, vocab_chunk_size, hidden, rows)
    if vocab < 1 and bt:
        raise XLossValueError("weight has no rows: the vocabulary must hold at least one class")
    C.check_class_indices(target, vocab, ignore_index)
    cdt = torch.float64 if input.dtype == torch.float64 else torch.float32
    if class_weight is not None:
        class_weight = C.float_tensor(class_weight, "class_weight")
        if tuple(class_weight.shape) != (vocab,):
            raise XLossValueError(f"class_weight must have shape ({vocab},), one per class of the (global) "
                                  f"vocabulary; got {C.shape_str(class_weight.shape)}")
        C.no_grad_required(class_weight, "class_weight", "fused_linear_cross_entropy gives no gradient w.r.t. it")
        class_weight = class_weight.to(cdt).contiguous()

    cfg = _Settings(reduction, ignore_index, ls, chunk, block, start, vocab, coll, backend, native)
    x2 = input.reshape(-1, hidden).contiguous()
    loss = _FusedLinearCrossEntropy.apply(x2, weight.contiguous(), None if bias is None else bias.contiguous(),
                                          target.reshape(-1).to(torch.int64), class_weight, cfg)
    return loss.reshape(target.shape) if reduction == "none" else loss


def _cpu_backend(backend) -> bool:
    """flce_native serves the ``cpu`` backend (and the default): its products are PyTorch's GEMMs anyway."""
    return backend is None or backend == "cpu" or getattr(backend, "name", None) == "cpu"


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """:func:`fused_linear_cross_entropy` as a module: ``loss_fn(input, weight, target, bias=None)``.

    The projection's parameters stay with the caller's model (e.g. ``lm_head.weight``), so the
    module holds only the settings (and ``class_weight`` as a buffer).
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size=None, backend=None, *, class_weight=None, vocab_chunk_size=None, process_group=None):
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, C.reduction(reduction), label_smoothing
        self.chunk_size, self.vocab_chunk_size, self.backend = chunk_size, vocab_chunk_size, backend
        self.process_group = process_group
        self.register_buffer("class_weight", class_weight)

    def forward(self, input, weight, target, bias=None):
        return fused_linear_cross_entropy(input, weight, target, bias, self.ignore_index, self.reduction,
                                          self.label_smoothing, self.chunk_size, self.backend,
                                          class_weight=self.class_weight, vocab_chunk_size=self.vocab_chunk_size,
                                          process_group=self.process_group)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, "
                f"chunk_size={self.chunk_size}, backend={self.backend!r}")
