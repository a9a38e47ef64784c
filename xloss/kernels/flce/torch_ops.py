"""The FLCE family's ``torch.library`` custom ops (namespace ``xloss``; see :mod:`xloss.torch.ops`), registered
with :func:`xloss.torch.ops.register_op` when this module is imported (:mod:`xloss.torch.flce` imports it)."""

from __future__ import annotations

import torch
from torch.library import custom_op

from xloss.torch import flce_passes as passes
from xloss.torch.ops import backend_of, compute_dtype, register_op

from . import api

# -- fused linear cross entropy ------------------------------------------------------------
# The settings cross flattened (flce_passes.FlceOptions, in field order): op arguments are
# primitive values. The bodies are in flce_passes.


@custom_op("xloss::fused_linear_cross_entropy", mutates_args=())
def fused_linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, target: torch.Tensor,
                               class_weight: torch.Tensor | None, reduction: str, ignore_index: int,
                               label_smoothing: float, softcap: float, z_scale: float, chunk: int, block: int,
                               start: int, vocab: int, group: str | None, native: bool, accum: str | None,
                               accuracy: bool, token_scaling: bool, want_dx: bool, want_dw: bool, want_db: bool,
                               backend: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor]:
    """``(loss, z_loss, accuracy, row_max, sum_exp, dx, dw, db, target_mask, masked_target)``
    (:func:`xloss.torch.flce_passes.forward`)."""
    o = passes.FlceOptions(reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block, start, vocab,
                           group, native, accum, accuracy, token_scaling, want_dx, want_dw, want_db, backend)
    return passes.forward(x, w, b, target, class_weight, o)


@fused_linear_cross_entropy.register_fake
def _(x, w, b, target, class_weight, reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block,
      start, vocab, group, native, accum, accuracy, token_scaling, want_dx, want_dw, want_db, backend):
    bt = x.shape[0]
    shape = (bt,) if reduction == "none" else ()
    ldt = cdt = compute_dtype(x.dtype)  # the loss's dtype is the compute dtype
    pre = reduction != "none" and (want_dx or want_dw or want_db)
    grads = [x.new_empty(shape if pre and wanted else (0,)) for shape, wanted in
             ((x.shape, want_dx), (w.shape, want_dw), ((w.shape[0],), want_db))]
    return (x.new_empty(shape, dtype=ldt), x.new_empty(shape if z_scale else (0,), dtype=ldt),
            x.new_empty(shape if accuracy else (0,), dtype=torch.float32),
            x.new_empty((bt,), dtype=cdt), x.new_empty((bt,), dtype=cdt), *grads,
            target.new_empty((0,) if native else (bt,), dtype=torch.bool),
            target.new_empty((0,) if native else (bt,), dtype=torch.int64))


@custom_op("xloss::fused_linear_cross_entropy_backward", mutates_args=())
def fused_linear_cross_entropy_backward(grad: torch.Tensor, x: torch.Tensor | None, w: torch.Tensor | None,
                                        b: torch.Tensor | None, target: torch.Tensor,
                                        class_weight: torch.Tensor | None, row_max: torch.Tensor | None,
                                        sum_exp: torch.Tensor | None, target_mask: torch.Tensor | None,
                                        masked_target: torch.Tensor | None, dx: torch.Tensor | None,
                                        dw: torch.Tensor | None, db: torch.Tensor | None,
                                        reduction: str, ignore_index: int, label_smoothing: float, softcap: float,
                                        z_scale: float, chunk: int, block: int, start: int, vocab: int,
                                        group: str | None, native: bool, accum: str | None, accuracy: bool,
                                        token_scaling: bool, want_dx: bool,
                                        want_dw: bool, want_db: bool, backend: str | None
                                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dw, db)``, empty where not wanted (:func:`xloss.torch.flce_passes.backward`). The
    forward's row statistics (and target mask and masked target) are given where the backward
    recomputes, its gradients where it scales them (scalar reductions)."""
    o = passes.FlceOptions(reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block, start, vocab,
                           group, native, accum, accuracy, token_scaling, want_dx, want_dw, want_db, backend)
    return passes.backward(grad, x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target,
                           dx, dw, db, o)


@fused_linear_cross_entropy_backward.register_fake
def _(grad, x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target, dx, dw, db, reduction, *rest):
    want = rest[-4:-1]
    # the saved operands give the shapes where they were saved, the precomputed gradients otherwise;
    # every gradient has the operands' dtype
    if x is not None and w is not None:
        full, like = (x.shape, w.shape, (w.shape[0],)), x
    else:
        full, like = (dx.shape, dw.shape, db.shape), dx
    return tuple(like.new_empty(shape if wanted else (0,)) for shape, wanted in zip(full, want))


# -- the vocabulary-parallel forward (CANN's Megatron flow) ------------------------------------
# One shard's statistics before the caller's all-reduce, and the per-token loss after it. An output
# that was not asked for comes back empty (0,): an op returns tensors only.


@custom_op("xloss::fused_linear_online_max_sum", mutates_args=())
def fused_linear_online_max_sum(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, vocab_start: int,
                                vocab_end: int | None, return_logits: bool, mask_format: str, backend: str | None
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                           torch.Tensor]:
    """``(logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
    vocab_parallel_logits)`` of :func:`xloss.fused_linear_online_max_sum`; the logits (0,) unless asked."""
    r = api.fused_linear_online_max_sum(input, weight, target, vocab_start, vocab_end, return_logits=return_logits,
                                        mask_format=mask_format, backend=backend_of(backend))
    return tuple(r[:5]) + (input.new_empty(0) if r.vocab_parallel_logits is None else r.vocab_parallel_logits,)


@fused_linear_online_max_sum.register_fake
def _(input, weight, target, vocab_start, vocab_end, return_logits, mask_format, backend):
    bt, cdt = input.shape[0], compute_dtype(input.dtype)
    mask = (input.new_empty(((bt + 7) // 8,), dtype=torch.uint8) if mask_format == "bitpacked"
            else input.new_empty((bt,), dtype=torch.bool))
    return (*(input.new_empty((bt,), dtype=cdt) for _ in range(3)), mask, target.new_empty((bt,)),
            input.new_empty((bt, weight.shape[0]) if return_logits else (0,)))


@custom_op("xloss::fused_cross_entropy_loss_with_max_sum", mutates_args=())
def fused_cross_entropy_loss_with_max_sum(logits_max: torch.Tensor, sum_exp_logits: torch.Tensor,
                                          predicted_logits: torch.Tensor, vocab_parallel_logits: torch.Tensor | None,
                                          label_smoothing: float, backend: str | None
                                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, softmax)`` of :func:`xloss.fused_cross_entropy_loss_with_max_sum`; softmax (0,) without logits."""
    r = api.fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits,
                                                  vocab_parallel_logits=vocab_parallel_logits,
                                                  label_smoothing=label_smoothing, backend=backend_of(backend))
    return r.loss, logits_max.new_empty(0, dtype=r.loss.dtype) if r.softmax is None else r.softmax


@fused_cross_entropy_loss_with_max_sum.register_fake
def _(logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, label_smoothing, backend):
    # the compute dtype: of the logits when given, else of the statistics (as the validation decides)
    cdt = compute_dtype(logits_max.dtype if vocab_parallel_logits is None else vocab_parallel_logits.dtype)
    return (logits_max.new_empty(logits_max.shape, dtype=cdt),
            logits_max.new_empty((0,) if vocab_parallel_logits is None else vocab_parallel_logits.shape, dtype=cdt))


register_op(fused_linear_cross_entropy, fused_linear_cross_entropy_backward, fused_linear_online_max_sum,
            fused_cross_entropy_loss_with_max_sum)
