"""The FLCE forward statistics through the backend's vocabulary-parallel kernels, a token chunk at a time
(CANN's Megatron flow: docs/torch-ecosystem.md); 16-bit operands: the gradient kernel's "recompute" mode
(logits in float32). :func:`chunk_stats` is looked up on this module per chunk (tests count it)."""

from __future__ import annotations

from collections import namedtuple

import torch

from ..kernel_args import Request
from ..kernels.flce.args import LossWithMaxSumArgs, OnlineMaxSumArgs
from .chunking import spans
from .flce_chunks import RowStats, Shard, Targets, dtype_name, kernel_of, view

#: The two kernels (resolved and checked once per op call), the mask format ("bool", or "bitpacked" where the
#: backend offers only CANN's), and whether the shard's logits come back and the loss kernel makes their softmax.
Route = namedtuple("Route", "max_sum loss mask_format logits")


def route(sh: Shard, keep: bool) -> Route | None:
    """The route where the backend declares both kernels for the call and it needs nothing they lack, else
    None; from settings every rank shares. ``keep``: the forward computes the gradients (the softmax route
    for float32/float64 operands)."""
    if sh.b is not None or sh.label_smoothing or sh.accuracy or sh.softcap or sh.z_scale or sh.token_scaling:
        return None
    logits = keep and sh.x.dtype in (torch.float32, torch.float64)
    numel = max(sh.chunk * sh.vocab, sh.chunk * sh.x.shape[1])  # from what every rank shares
    loss = kernel_of(Request("fused_cross_entropy_loss_with_max_sum", dtype_name(sh.x.dtype if logits else sh.cdt),
                             None, {"softmax": logits}, numel), sh.backend, required=False)
    for fmt in ("bool", "bitpacked") if loss is not None else ():
        req = Request("fused_linear_online_max_sum", dtype_name(sh.x.dtype), None, {"logits": logits, "mask": fmt,
                      "target_dtype": dtype_name(sh.target.dtype)}, numel, {"hidden": sh.x.shape[1]})
        max_sum = kernel_of(req, sh.backend, required=False)
        if max_sum is not None:
            return Route(max_sum, loss, fmt, logits)
    return None


def _loss(rt: Route, m, s, p, logits=None):
    """(loss, softmax or None) from the loss kernel, in the compute dtype."""
    loss, softmax = torch.empty_like(m), None if logits is None else torch.empty(logits.shape, dtype=m.dtype)
    rt.loss(LossWithMaxSumArgs(view(m), view(s), view(p), view(logits), dtype_name(m.dtype if logits is None
                                                                                   else logits.dtype),
                               0.0, view(loss), view(softmax)))
    return loss, softmax


def chunk_stats(sh: Shard, rt: Route, tg: Targets, t0: int, t1: int) -> tuple[RowStats, torch.Tensor]:
    """Tokens [t0, t1): the global row statistics (with the forward's mask and masked target, and with
    ``rt.logits`` each block's softmax) and the per-token loss (class-weighted, 0 where ignored)."""
    target, c, cdt = sh.target[t0:t1], t1 - t0, sh.cdt
    m_loc, s, p = torch.full((c,), float("-inf"), dtype=cdt), torch.zeros(c, dtype=cdt), torch.zeros(c, dtype=cdt)
    mask, masked_target, logits = torch.ones(c, dtype=torch.bool), torch.zeros(c, dtype=target.dtype), None
    if sh.rows:  # (an empty shard, with more ranks than classes, holds no maximum, no sum and no target)
        packed = torch.empty((c + 7) // 8, dtype=torch.uint8) if rt.mask_format == "bitpacked" else mask
        logits = torch.empty(c, sh.rows, dtype=sh.x.dtype) if rt.logits else None
        rt.max_sum(OnlineMaxSumArgs(view(sh.x[t0:t1]), view(sh.w), view(target), sh.start, sh.start + sh.rows,
                                    rt.mask_format, view(m_loc), view(s), view(p), view(packed), view(masked_target),
                                    view(logits)))
        if rt.mask_format == "bitpacked":  # LSB first
            mask = ((packed[:, None] >> torch.arange(8, dtype=torch.uint8)) & 1).reshape(-1)[:c].bool()
    m = m_loc
    if sh.coll.active:
        m = sh.coll.max_(m_loc.clone())
        scale = torch.where(torch.isneginf(m_loc), 0.0, torch.exp(m_loc - m))
        s, p = sh.coll.sum_(torch.stack([s * scale, torch.where(mask, 0.0, p + (m_loc - m))]))
    # with logits, the softmax a vocabulary block at a time (the loss from the first call)
    made = [_loss(rt, m, s, p, logits[:, v0:v1]) for v0, v1 in spans(sh.rows, sh.block)] if rt.logits else []
    del logits
    loss = made[0][0] if made else _loss(rt, m, s, p)[0]
    loss = torch.where(tg.valid, loss * tg.w_t, 0.0)
    return RowStats(m, s, None, None, [sm for _, sm in made] if rt.logits else None, target_mask=mask,
                    masked_target=masked_target), loss
