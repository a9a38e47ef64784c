"""NLL's gradient through CANN's ``aclnnNLLLossBackward``."""

from __future__ import annotations

import numpy as np

from ...kernels import REDUCTION_CODES
from .operators import NLL_BACKWARD


def nll_loss_grad(backend, a) -> None:
    dt = a.self.dtype
    two_d = a.self.ndim == 2
    classes = a.self.shape[-1]
    # The vendor takes gradOutput, weight and totalWeight in self's dtype; for 16-bit requests
    # the scalars are rounded on the way in, as on a real NPU (the conformance tolerance allows it).
    cdt = dt
    weight = np.ones(classes, cdt) if a.weight is None else a.weight.astype(cdt)
    total = a.total_weight  # the vendor requires the tensor, always (the default resolved in validation)
    if isinstance(a.grad, np.ndarray):
        grad = a.grad.astype(cdt)
    elif a.reduction == "none" and two_d:  # the vendor wants (N) here: expand the scalar
        grad = np.full(a.self.shape[0], a.grad, dtype=cdt)
    else:
        grad = np.asarray(a.grad, dtype=cdt)
    with np.errstate(over="ignore"):
        total_arr = np.asarray([total], dtype=cdt)
    with backend.session() as s:
        tg = s.put(grad)[0]
        ts = s.put(a.self)[0]
        tt = s.put(a.target)[0]
        tw = s.put(weight)[0]
        ttw = s.put(total_arr)[0]
        to, bo = s.empty(a.self.shape, cdt)
        s.run(NLL_BACKWARD, tg, ts, tt, tw, REDUCTION_CODES[a.reduction], a.ignore_index, ttw, to)
        s.synchronize()
        out = s.download(bo, a.self.shape, cdt)
    np.copyto(a.out, out)
