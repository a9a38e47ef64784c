"""The fused linear-cross-entropy's forward statistics through the backend's vocabulary-parallel
kernels: CANN's Megatron flow, one token chunk at a time on this rank's shard.

1. ``fused_linear_online_max_sum`` on the shard: per token the shard's row max, the sum of
   exponentials relative to it, the target's logit relative to it (0 where the target lies in
   another shard), the target mask and the masked (local) target;
2. the all-reduce, the caller's part of CANN's flow (ours): MAX of the row maxima; SUM of each
   rank's sum rescaled to the global maximum; SUM of the predicted logit rebased to the global
   maximum, from the rank that holds the target (the others add 0);
3. ``fused_cross_entropy_loss_with_max_sum``: the per-token loss ``log(sum) - predicted``, times
   the target's class weight and zeroed for ignored tokens here (the kernel knows neither);
4. the gradients: ``fused_linear_cross_entropy_grad`` (:func:`.flce_chunks.chunk_grads`) with the
   forward's target mask and masked target and the all-reduced max and sum ("recompute" mode), or
   with the softmax that step 3 makes from the shard's logits ("softmax" mode).

Step 4 runs in the forward for a scalar reduction with a gradient wanted, and in the backward op
for ``reduction="none"``, which gets the forward's mask and masked target as op outputs/inputs.
A vocabulary block (``vocab_chunk_size``) smaller than the shard gets its part of them.

The softmax route (step 3 with the logits) is taken for float32/float64 operands only: the kernel
returns the logits in the operands' dtype, so 16-bit logits would be rounded before the softmax;
16-bit operands take "recompute" mode, where the gradient kernel makes the logits in float32.

Where this runs (:func:`route`): where xloss.torch does not run its own GEMMs (not the ``cpu``
backend's :mod:`.flce_native` path), when the backend declares both kernels for the operands'
dtype and the call needs nothing they do not compute — no bias (the kernels have none), no label
smoothing (the loss kernel takes 0 only and the statistics lack the smoothing sum), no token
accuracy (no first-maximum index). Otherwise :func:`.flce_chunks.chunk_stats` computes the
statistics with PyTorch's GEMMs. The decision depends only on settings every rank shares, so all
ranks take the same route and run the same collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import registry
from ..errors import UnsupportedRequestError
from ..kernel_args import Request
from ..kernels.flce import api
from .chunking import spans
from .flce_chunks import _NUMPY_NAME, RowStats, Shard, Targets

_MAX_SUM, _LOSS = "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"
_WIDE = (torch.float32, torch.float64)  # operand dtypes whose logits the softmax route may take as they come


@dataclass(frozen=True)
class Route:
    """The backends (resolved once per call) and forms of the kernel calls."""

    max_sum: object  # the Backend running fused_linear_online_max_sum
    loss: object  # the Backend running fused_cross_entropy_loss_with_max_sum
    mask_format: str  # "bool", or CANN's "bitpacked" where the backend offers only that
    logits: bool  # the softmax route: the shard's logits come back and step 3 makes their softmax


def route(sh: Shard, keep: bool) -> Route | None:
    """The kernel route for this call, or None where :func:`.flce_chunks.chunk_stats` serves it.
    ``keep``: the forward computes the gradients (the softmax route where the dtype allows)."""
    if sh.b is not None or sh.label_smoothing or sh.accuracy or sh.softcap or sh.z_scale or sh.token_scaling:
        return None
    dtype = _NUMPY_NAME[sh.x.dtype]
    logits = keep and sh.x.dtype in _WIDE
    # numel from settings every rank shares (the chunk and the global vocabulary), never the shard's rows
    numel = max(sh.chunk * sh.vocab, sh.chunk * sh.x.shape[1])
    target_dtype = str(sh.target.dtype).removeprefix("torch.")
    # the loss kernel's dtype: the logits' when it gets them, else the statistics' (the compute dtype)
    loss_dtype = dtype if logits else _NUMPY_NAME[sh.cdt]
    try:
        loss = registry.resolve(sh.backend, Request(_LOSS, loss_dtype, None, {"softmax": logits}, numel))
    except UnsupportedRequestError:
        return None
    for fmt in ("bool", "bitpacked"):
        req = Request(_MAX_SUM, dtype, None, {"logits": logits, "mask": fmt, "target_dtype": target_dtype}, numel,
                      {"hidden": sh.x.shape[1]})  # a declared hidden-size limit falls back, as a refusal does
        try:
            return Route(registry.resolve(sh.backend, req), loss, fmt, logits)
        except UnsupportedRequestError:
            continue
    return None


def _unpacked(bits: torch.Tensor, n: int) -> torch.Tensor:
    """CANN's bit-packed mask (LSB first) as bool per token."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((bits[:, None] >> shifts) & 1).reshape(-1)[:n].bool()


def chunk_stats(sh: Shard, rt: Route, tg: Targets, t0: int, t1: int) -> tuple[RowStats, torch.Tensor]:
    """Tokens [t0, t1): the global row statistics (with the forward's mask and masked target, and
    with ``rt.logits`` the softmax of each vocabulary block) and the per-token loss in the compute
    dtype (class-weighted, 0 where ignored)."""
    x_c, target = sh.x[t0:t1], sh.target[t0:t1]
    c, cdt = t1 - t0, sh.cdt
    logits = None
    if sh.rows:
        r = api.fused_linear_online_max_sum(x_c, sh.w, target, sh.start, return_logits=rt.logits,
                                            mask_format=rt.mask_format, backend=rt.max_sum)
        m_loc, s, p = r.logits_max_local, r.sum_exp_logits_local, r.predicted_logits_local
        mask = r.target_mask if rt.mask_format == "bool" else _unpacked(r.target_mask, c)
        masked_target, logits = r.masked_target, r.vocab_parallel_logits
    else:  # an empty shard (more ranks than classes): it holds no maximum, no sum and no target
        m_loc, s, p = torch.full((c,), float("-inf"), dtype=cdt), torch.zeros(c, dtype=cdt), torch.zeros(c, dtype=cdt)
        mask, masked_target = torch.ones(c, dtype=torch.bool), torch.zeros(c, dtype=target.dtype)
    m = m_loc
    if sh.coll.active:
        m = m_loc.clone()
        sh.coll.max_(m)
        scale = torch.where(torch.isneginf(m_loc), 0.0, torch.exp(m_loc - m))
        packed = torch.stack([s * scale, torch.where(mask, 0.0, p + (m_loc - m))])
        sh.coll.sum_(packed)
        s, p = packed[0], packed[1]
    blocks = loss = None
    if rt.logits:
        blocks = []
        for v0, v1 in spans(sh.rows, sh.block):  # the softmax a vocabulary block at a time (and the loss once)
            out = api.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits[:, v0:v1],
                                                            backend=rt.loss)
            blocks.append(out.softmax)
            loss = out.loss if loss is None else loss
        del logits
    if loss is None:
        loss = api.fused_cross_entropy_loss_with_max_sum(m, s, p, backend=rt.loss).loss
    loss = torch.where(tg.valid, loss * tg.w_t, 0.0)
    return RowStats(m, s, None, None, blocks, target_mask=mask, masked_target=masked_target), loss
