"""The vocabulary-parallel forward through CANN's operators: ``aclnnFusedLinearOnlineMaxSum`` (one
shard's statistics, before the caller's all-reduce) and ``aclnnFusedCrossEntropyLossWithMaxSum``
(the per-token loss, and the shard's softmax, after it).

Everything crosses the ABI as xloss's arguments already hold it: float16/bfloat16 input and weight,
INT32/INT64 target, FLOAT statistics, the UINT8 bit-packed ``targetMaskOut`` (CANN has no byte
mask). What CANN refuses and the request cannot say (its hidden size) is refused here, before any
device work, naming the argument.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedRequestError
from .operators import LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM

#: ops-nn aclnnFusedLinearOnlineMaxSum.md: input.size(1) <= 65534
MAX_HIDDEN = 65534


def refuse_hidden(backend_name: str, h: int) -> None:
    """UnsupportedRequestError naming ``input`` when its hidden size exceeds CANN's limit."""
    if h > MAX_HIDDEN:
        raise UnsupportedRequestError(
            f"backend {backend_name!r} does not support input with hidden size H={h} for kernel "
            f"fused_linear_online_max_sum: {ONLINE_MAX_SUM} takes input.size(1) <= {MAX_HIDDEN}")


def online_max_sum(backend, a) -> None:
    """One shard's statistics; the caller's arrays are written only after the session succeeded."""
    (bt, h), v = a.input.shape, a.weight.shape[0]
    refuse_hidden(backend.name, h)
    stats = np.float32  # FLOAT: the request's dtype is float16 or bfloat16 (declared), its compute dtype float32
    with backend.session() as s:
        ti, tw, tt = s.put(a.input)[0], s.put(a.weight)[0], s.put(a.target)[0]
        tlm, blm = s.empty((bt,), stats)
        tse, bse = s.empty((bt,), stats)
        tpl, bpl = s.empty((bt,), stats)
        tmask, bmask = s.empty(a.target_mask_out.shape, np.uint8)
        tmt, bmt = s.empty((bt,), a.target.dtype)
        if a.logits_out is not None:
            tlg, blg = s.empty((bt, v), a.input.dtype)
        else:
            tlg, blg = s.ffi.NULL, None
        s.run(ONLINE_MAX_SUM, ti, tw, tt, int(a.vocab_start), int(a.vocab_end), tlm, tse, tpl, tmask, tmt, tlg)
        s.synchronize()
        got = [(a.logits_max_out, s.download(blm, (bt,), stats)), (a.sum_exp_out, s.download(bse, (bt,), stats)),
               (a.predicted_out, s.download(bpl, (bt,), stats)),
               (a.target_mask_out, s.download(bmask, a.target_mask_out.shape, np.uint8)),
               (a.masked_target_out, s.download(bmt, (bt,), a.target.dtype))]
        if blg is not None:
            got.append((a.logits_out, s.download(blg, (bt, v), a.input.dtype)))
    for dst, src in got:
        np.copyto(dst, src)


def loss_with_max_sum(backend, a) -> None:
    """The loss (and softmax) from the all-reduced FLOAT statistics; inputOptional and
    weightOptional are NULL, labelSmoothing 0 (the only values CANN supports)."""
    bt = a.loss_out.shape[0]
    with backend.session() as s:
        null = s.ffi.NULL
        tlm, tse, tpl = (s.put(x, np.float32)[0] for x in (a.logits_max, a.sum_exp_logits, a.predicted_logits))
        tlg = s.put(a.vocab_parallel_logits)[0] if a.vocab_parallel_logits is not None else null
        tloss, bloss = s.empty((bt,), np.float32)
        if a.softmax_out is not None:
            tsm, bsm = s.empty(a.softmax_out.shape, np.float32)
        else:
            tsm, bsm = null, None
        s.run(LOSS_WITH_MAX_SUM, tlm, tse, tpl, float(a.label_smoothing), null, null, tlg, tloss, tsm)
        s.synchronize()
        loss = s.download(bloss, (bt,), np.float32)
        softmax = s.download(bsm, a.softmax_out.shape, np.float32) if bsm is not None else None
    np.copyto(a.loss_out, loss)
    if softmax is not None:
        np.copyto(a.softmax_out, softmax)
