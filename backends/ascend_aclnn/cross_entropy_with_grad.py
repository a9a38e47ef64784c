"""xloss's fused cross-entropy row (loss and gradient in one call) on CANN's pair, in one device session:
``aclnnCrossEntropyLoss``, then ``aclnnCrossEntropyLossGrad`` on its log-probabilities (no vendor publishes a
fused operator). The log-probabilities go back to the host and up again as the gradient's input, as every
operator input crosses here: an on-target recording (:mod:`.ontarget`) gives each call the inputs it
uploaded, and a device buffer another call wrote is not one of them.

16-bit logits run through the FLOAT operators on exact float32 copies and each result is rounded once to
the dtype: the pair's 16-bit form would round the log-probabilities in between, a second rounding the fused
row does not have.
"""

from __future__ import annotations

import numpy as np

from .operators import CROSS_ENTROPY, CROSS_ENTROPY_GRAD


def run(backend, a) -> None:
    n, c = a.input.shape
    dt = a.input.dtype
    wide = np.dtype(np.float32) if dt.itemsize == 2 else dt
    x = a.input.astype(wide, copy=False)
    loss_shape = (n,) if a.reduction == "none" else (1,)
    if isinstance(a.grad, np.ndarray):
        grad = a.grad.astype(wide)
    elif a.reduction == "none":  # the operator wants (N) here: expand the scalar
        grad = np.full(n, a.grad, dtype=wide)
    else:
        grad = np.asarray(a.grad, dtype=wide)
    red = a.reduction.encode()
    with backend.session() as s:
        tx = s.put(x)[0]
        tt = s.put(a.target)[0]
        tw = s.ffi.NULL if a.weight is None else s.put(a.weight, np.float32)[0]  # CANN's weights are FLOAT
        tl, bl = s.empty(loss_shape, wide)
        tp, bp = s.empty((n, c), wide)
        tz, _ = s.empty(loss_shape, wide)
        tlse, _ = s.empty((n,), wide)
        s.run(CROSS_ENTROPY, tx, tt, tw, red, a.ignore_index, a.label_smoothing, 0.0, False, tl, tp, tz, tlse)
        s.synchronize()
        tp = s.put(s.download(bp, (n, c), wide))[0]
        tg = s.put(grad)[0]
        to, bo = s.empty((n, c), wide)
        s.run(CROSS_ENTROPY_GRAD, tg, tp, tt, tw, s.ffi.NULL, s.ffi.NULL, red, a.ignore_index, a.label_smoothing, 0.0,
              to)
        s.synchronize()
        loss = s.download(bl, loss_shape, wide)
        dx = s.download(bo, (n, c), wide)
    # results reach the caller's buffers only after both calls (and the cleanup) succeeded, each rounded once
    with np.errstate(over="ignore"):
        a.loss_out[...] = loss.reshape(a.loss_out.shape).astype(dt)
        a.grad_out[...] = dx.astype(dt)
