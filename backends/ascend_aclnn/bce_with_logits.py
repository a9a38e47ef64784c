"""BCE with logits through CANN's ``aclnnBinaryCrossEntropyWithLogits`` (the loss, reduced by the
operator) and ``aclnnBinaryCrossEntropyWithLogitsBackward`` (the gradient, ``mean``'s division
included); weight and posWeight cross as they are, broadcast by the operators."""

from __future__ import annotations

import numpy as np

from ...kernels import REDUCTION_CODES
from .focal import upstream_tensor
from .operators import BCE_WITH_LOGITS, BCE_WITH_LOGITS_BACKWARD


def run(backend, a) -> None:
    dt = a.x.dtype
    red = REDUCTION_CODES[a.reduction]
    with backend.session() as s:
        tx, ty = s.put(a.x)[0], s.put(a.y)[0]
        tw = s.put(a.weight)[0] if a.weight is not None else s.ffi.NULL
        tp = s.put(a.pos_weight)[0] if a.pos_weight is not None else s.ffi.NULL
        if a.loss_out is not None:
            tl, bl = s.empty(a.loss_out.shape, dt)
            s.run(BCE_WITH_LOGITS, tx, ty, tw, tp, red, tl)
        if a.grad_out is not None:
            tg = upstream_tensor(s, a.grad, dt)
            td, bd = s.empty(a.x.shape, dt)
            s.run(BCE_WITH_LOGITS_BACKWARD, tg, tx, ty, tw, tp, red, td)
        s.synchronize()
        loss = s.download(bl, a.loss_out.shape, dt) if a.loss_out is not None else None
        dx = s.download(bd, a.x.shape, dt) if a.grad_out is not None else None
    # results reach the caller's buffers only after every call (and the cleanup) succeeded
    if loss is not None:
        np.copyto(a.loss_out, loss)
    if dx is not None:
        np.copyto(a.grad_out, dx)
