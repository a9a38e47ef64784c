"""The fused linear cross-entropy gradient through CANN's ``aclnnFusedLinearCrossEntropyLossGrad``
(float16/bfloat16 only, no label smoothing: the declaration in :mod:`.operators`)."""

from __future__ import annotations

import numpy as np

from .operators import FLCE_GRAD

#: the high-performance FLCE mode's smallest vocabulary shard (CANN refuses V < 128 with softmaxOptional)
FLCE_SOFTMAX_MIN_V = 128


def fused_linear_cross_entropy_grad(backend, a) -> None:
    dt = a.input.dtype
    bt, h = a.input.shape
    v = a.weight.shape[0]
    if bt == 0:  # CANN's operator writes nothing for BT = 0; the weight gradient is zero
        a.weight_grad_out[...] = 0
        return
    weight, softmax = a.weight, a.softmax
    if softmax is not None and v < FLCE_SOFTMAX_MIN_V:
        # the high-performance mode wants V >= 128: pad the shard with zero weight rows and zero
        # softmax columns; their G is 0, so they add nothing, and their weight-gradient rows are dropped
        pad = FLCE_SOFTMAX_MIN_V - v
        weight = np.concatenate([weight, np.zeros((pad, h), weight.dtype)])
        softmax = np.concatenate([softmax, np.zeros((bt, pad), softmax.dtype)], axis=1)
    vp = weight.shape[0]
    with backend.session() as s:
        null = s.ffi.NULL
        tg, ti, tw = s.put(a.grad)[0], s.put(a.input)[0], s.put(weight)[0]
        tm, tmt = s.put(a.target_mask)[0], s.put(a.masked_target)[0]
        tlm = s.put(a.logits_max)[0] if a.logits_max is not None else null
        tse = s.put(a.sum_exp_logits)[0] if a.sum_exp_logits is not None else null
        # the high-performance kernel writes softmaxOptional (softmax - 1, then 16-bit G): a device copy
        tsm = s.put(softmax)[0] if softmax is not None else null
        tig, big = s.empty((bt, h), dt)
        twg, bwg = s.empty((vp, h), dt)
        s.run(FLCE_GRAD, tg, ti, tw, tm, tmt, float(a.label_smoothing), tlm, tse, tsm, tig, twg)
        s.synchronize()
        ig = s.download(big, (bt, h), dt)
        wg = s.download(bwg, (vp, h), dt)
    np.copyto(a.input_grad_out, ig)
    np.copyto(a.weight_grad_out, wg[:v])
