"""Dense-label cross entropy through CANN's ``aclnnSoftmaxCrossEntropyWithLogits`` (features, labels -> loss per
row, backprop): the operator is the row itself, so the adapter only uploads, runs and copies back. Labels go
in features' dtype (validation already made them so: the operator's page wants the same dtype and shape)."""

from __future__ import annotations

from .operators import SOFTMAX_CE


def softmax_cross_entropy_with_logits(backend, a) -> None:
    n, c = a.features.shape
    dt = a.features.dtype
    with backend.session() as s:
        tx = s.put(a.features)[0]
        ty = s.put(a.labels)[0]
        tl, bl = s.empty((n,), dt)
        tb, bb = s.empty((n, c), dt)
        s.run(SOFTMAX_CE, tx, ty, tl, tb)
        s.synchronize()
        loss = s.download(bl, (n,), dt)
        backprop = s.download(bb, (n, c), dt)
    # results reach the caller's buffers only after the call and the cleanup succeeded
    a.loss_out[...] = loss
    a.backprop_out[...] = backprop
