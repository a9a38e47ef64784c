"""BCE's gradient through CANN's ``aclnnBinaryCrossEntropyBackward`` (it hard-wires the clamp
``max(x(1-x), 1e-12)``: the declaration in :mod:`.operators` says so)."""

from __future__ import annotations

import numpy as np

from ...kernels import REDUCTION_CODES
from .focal import upstream_tensor
from .operators import BCE_BACKWARD


def bce_grad(backend, a) -> None:
    dt = a.x.dtype
    with backend.session() as s:
        tg = upstream_tensor(s, a.grad, dt)
        tx, ty = s.put(a.x)[0], s.put(a.y)[0]
        tw = s.put(a.weight)[0] if a.weight is not None else s.ffi.NULL
        to, bo = s.empty(a.x.shape, dt)
        s.run(BCE_BACKWARD, tg, tx, ty, tw, REDUCTION_CODES[a.reduction], to)
        s.synchronize()
        out = s.download(bo, a.x.shape, dt)
    np.copyto(a.out, out)
