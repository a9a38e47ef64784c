"""The NLL and BCE forward through CANN's ``aclnnNLLLoss`` / ``aclnnNLLLoss2d`` and ``aclnnBinaryCrossEntropy``.

``aclnnNLLLoss`` takes (C) and (N, C) input; (N, C, d1, ..., dk) input goes to ``aclnnNLLLoss2d`` as the
(N, C, d1, W) view of the same memory (W = d2 * ... * dk, 1 for k = 1), so that a 4-D input reaches a port
as it is, both plane dimensions exercised. The vendor requires the weight (ones stand in for
none) and writes ``totalWeightOut`` only for reductions 1 and 2: a (C) input's ``none`` is called as ``sum``
(one element either way, and its total weight written, as PyTorch returns it); batched ``none`` leaves it
unwritten, and the adapter gives PyTorch's total weight there, 0. ``aclnnBinaryCrossEntropy`` takes target and weight of
self's shape: a broadcast weight is materialised, a 0-d input passed as (1,).
"""

from __future__ import annotations

import math

import numpy as np

from ...kernels import REDUCTION_CODES
from .operators import BCE_FORWARD, NLL_FORWARD, NLL_FORWARD_2D


def nll_loss(backend, a) -> None:
    dt = a.self.dtype
    x, t = a.self, a.target
    op = NLL_FORWARD
    if x.ndim > 2:  # (N, C, d1, ..., dk) -> (N, C, d1, d2 * ... * dk): the same memory
        n, c, h = x.shape[:3]
        w = math.prod(x.shape[3:])
        x, t, op = x.reshape(n, c, h, w), t.reshape(n, h, w), NLL_FORWARD_2D
    reduction = "sum" if a.reduction == "none" and x.ndim == 1 else a.reduction
    weight = np.ones(a.classes, dt) if a.weight is None else a.weight
    out_shape = t.shape if reduction == "none" else (1,)
    with backend.session() as s:
        tx, tt, tw = s.put(x)[0], s.put(t)[0], s.put(weight)[0]
        to, bo = s.empty(out_shape, dt)
        ttw, btw = s.empty((1,), dt)
        s.run(op, tx, tt, tw, REDUCTION_CODES[reduction], a.ignore_index, to, ttw)
        s.synchronize()
        out = s.download(bo, out_shape, dt)
        total = s.download(btw, (1,), dt) if reduction != "none" else np.zeros(1, dt)
    a.out[...] = out.reshape(a.out.shape)
    a.total_weight_out[...] = total.reshape(())


def binary_cross_entropy(backend, a) -> None:
    dt = a.x.dtype
    shape = a.x.shape if a.x.ndim else (1,)
    out_shape = shape if a.reduction == "none" else (1,)
    with backend.session() as s:
        tx, ty = s.put(a.x.reshape(shape))[0], s.put(a.y.reshape(shape))[0]
        tw = s.put(np.ascontiguousarray(np.broadcast_to(a.weight, a.x.shape)).reshape(shape))[0] \
            if a.weight is not None else s.ffi.NULL
        to, bo = s.empty(out_shape, dt)
        s.run(BCE_FORWARD, tx, ty, tw, REDUCTION_CODES[a.reduction], to)
        s.synchronize()
        out = s.download(bo, out_shape, dt)
    a.out[...] = out.reshape(a.out.shape)
