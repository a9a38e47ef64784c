"""xloss's fused cross-entropy row (loss and gradient in one call) on the ``ft78ne``/``mt7004`` backends: the
forward and the gradient rows' adapters in turn (:mod:`.softmax_ce`, :mod:`.softmax_ce_grad`), both on the
manual's ``sparse_softmax_cross_entropy_with_logits``; the log-probabilities between them stay here, and the
gradient is written over them (no vendor publishes a fused call).

float16 logits run on exact float32 copies (the declaration asks for the float32 entry points too); the loss
and the gradient come back in float64 from the adapters' host arithmetic and are rounded once to the dtype.
"""

from __future__ import annotations

import numpy as np

from ...kernels.cross_entropy.args import CrossEntropyArgs, CrossEntropyGradArgs
from .softmax_ce import cross_entropy_loss
from .softmax_ce_grad import cross_entropy_loss_grad


def cross_entropy_loss_with_grad(b, a) -> None:
    b._require(a.request())
    dt = a.input.dtype
    x = a.input.astype(np.float32) if dt == np.float16 else a.input
    n, c = x.shape
    log_prob = np.empty((n, c), x.dtype)
    loss = np.empty(a.loss_out.shape, np.float64)
    cross_entropy_loss(b, CrossEntropyArgs(input=x, target=a.target, weight=None, reduction=a.reduction,
                                           ignore_index=a.ignore_index, label_smoothing=0.0, zloss_scale=0.0,
                                           loss_out=loss, log_prob_out=log_prob, zloss_out=None, lse_out=None))
    grad = a.grad.astype(x.dtype) if isinstance(a.grad, np.ndarray) else a.grad
    dx = np.empty((n, c), np.float64)
    cross_entropy_loss_grad(b, CrossEntropyGradArgs(grad=grad, log_prob=log_prob, target=a.target, weight=None,
                                                    grad_zloss=None, lse_for_zloss=None, reduction=a.reduction,
                                                    ignore_index=a.ignore_index, label_smoothing=0.0, zloss_scale=0.0,
                                                    out=dx))
    # both calls succeeded: the caller's buffers are written once, each value rounded once
    with np.errstate(over="ignore"):
        a.loss_out[...] = loss.astype(dt)
        a.grad_out[...] = dx.astype(dt)
