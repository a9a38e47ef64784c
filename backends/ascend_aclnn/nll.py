"""NLL's gradient through CANN's ``aclnnNLLLossBackward`` ((C) and (N, C) input) and ``aclnnNLLLoss2dBackward``.

(N, C, d1, ..., dk) input goes to ``aclnnNLLLoss2dBackward`` as the (N, C, d1, W) view of the same memory
(W = d2 * ... * dk, 1 for k = 1), as the forward goes to ``aclnnNLLLoss2d``: a 4-D input reaches a port as it
is, both plane dimensions exercised. For ``none`` the operator takes gradOutput of target's shape (a scalar
upstream gradient is expanded), else one element.
"""

from __future__ import annotations

import math

import numpy as np

from ...kernels import REDUCTION_CODES
from .operators import NLL_BACKWARD, NLL_BACKWARD_2D


def nll_loss_grad(backend, a) -> None:
    dt = a.self.dtype
    x, t, op = a.self, a.target, NLL_BACKWARD
    if x.ndim > 2:  # (N, C, d1, ..., dk) -> (N, C, d1, d2 * ... * dk): the same memory
        n, c, h = x.shape[:3]
        w = math.prod(x.shape[3:])
        x, t, op = x.reshape(n, c, h, w), t.reshape(n, h, w), NLL_BACKWARD_2D
    batched = x.ndim >= 2
    classes = a.classes
    # The vendor takes gradOutput, weight and totalWeight in self's dtype; for 16-bit requests
    # the scalars are rounded on the way in, as on a real NPU (the conformance tolerance allows it).
    cdt = dt
    weight = np.ones(classes, cdt) if a.weight is None else a.weight.astype(cdt)
    total = a.total_weight  # the vendor requires the tensor, always (the default resolved in validation)
    if isinstance(a.grad, np.ndarray):
        grad = a.grad.astype(cdt).reshape(t.shape)
    elif a.reduction == "none" and batched:  # the vendor wants target's shape here: expand the scalar
        grad = np.full(t.shape, a.grad, dtype=cdt)
    else:
        grad = np.asarray(a.grad, dtype=cdt)
        if op == NLL_BACKWARD_2D:
            grad = grad.reshape(1)
    with np.errstate(over="ignore"):
        total_arr = np.asarray([total], dtype=cdt)
    with backend.session() as s:
        tg = s.put(grad)[0]
        ts = s.put(x)[0]
        tt = s.put(t)[0]
        tw = s.put(weight)[0]
        ttw = s.put(total_arr)[0]
        to, bo = s.empty(x.shape, cdt)
        s.run(op, tg, ts, tt, tw, REDUCTION_CODES[a.reduction], a.ignore_index, ttw, to)
        s.synchronize()
        out = s.download(bo, x.shape, cdt)
    np.copyto(a.out, out.reshape(a.out.shape))
