"""Cross entropy through CANN's ``aclnnCrossEntropyLoss`` and ``aclnnCrossEntropyLossGrad``."""

from __future__ import annotations

import numpy as np

from .operators import CROSS_ENTROPY, CROSS_ENTROPY_GRAD


def _weight(s, weight):
    return s.ffi.NULL if weight is None else s.put(weight, np.float32)[0]  # CANN's weights are FLOAT


def cross_entropy_loss(backend, a) -> None:
    n, c = a.input.shape
    dt = a.input.dtype
    loss_shape = (n,) if a.reduction == "none" else (1,)
    with backend.session() as s:
        tx = s.put(a.input)[0]
        tt = s.put(a.target)[0]
        tw = _weight(s, a.weight)
        tl, bl = s.empty(loss_shape, dt)
        tp, bp = s.empty((n, c), dt)  # required by the ABI even when the caller wants no log-probabilities
        tz, _ = s.empty(loss_shape, dt)
        tlse, _ = s.empty((n,), dt)
        s.run(CROSS_ENTROPY, tx, tt, tw, a.reduction.encode(), a.ignore_index, a.label_smoothing, 0.0, False, tl, tp,
              tz, tlse)
        s.synchronize()
        loss = s.download(bl, loss_shape, dt)
        log_prob = s.download(bp, (n, c), dt) if a.log_prob_out is not None else None
    a.loss_out[...] = loss.reshape(a.loss_out.shape)
    if log_prob is not None:
        np.copyto(a.log_prob_out, log_prob)


def cross_entropy_loss_grad(backend, a) -> None:
    n, c = a.log_prob.shape
    dt = a.log_prob.dtype
    if isinstance(a.grad, np.ndarray):
        grad = a.grad.astype(dt)
    elif a.reduction == "none":  # the vendor wants (N) here: expand the scalar
        grad = np.full(n, a.grad, dtype=dt)
    else:  # 0-D, in the dtype: a 16-bit request rounds the scalar on the way in, as on a real NPU
        grad = np.asarray(a.grad, dtype=dt)
    with backend.session() as s:
        tg = s.put(grad)[0]
        tp = s.put(a.log_prob)[0]
        tt = s.put(a.target.astype(np.int64, copy=False))[0]
        tw = _weight(s, a.weight)
        to, bo = s.empty((n, c), dt)
        s.run(CROSS_ENTROPY_GRAD, tg, tp, tt, tw, s.ffi.NULL, s.ffi.NULL, a.reduction.encode(), a.ignore_index,
              a.label_smoothing, 0.0, to)
        s.synchronize()
        out = s.download(bo, (n, c), dt)
    np.copyto(a.out, out)
