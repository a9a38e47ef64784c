"""The NLL-loss backward in ``xloss bench``: its workload and its candidates."""

from __future__ import annotations

import math

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls
from xloss.bench.workloads import Workload, parse_dims

from . import api


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n, c = parse_dims(size, 2)
    logp = np.full((n, c), -math.log(c), dtype=dt)  # the backward never reads its values
    t = rng.integers(0, c, n)
    t[::17] = -100
    return Workload("nll_loss_grad", mode, size, dtype, {"self": logp, "target": t},
                    bytes_moved=n * c * dt.itemsize + n * 8)


def _nll_xloss(w: Workload, b):
    i = w.inputs
    out = np.empty_like(i["self"])
    return [("", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b)),
            (" out=", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b, out=out))]


def _nll_torch(w: Workload, i, torch, compile_):
    g = torch.tensor(1.0, dtype=i["self"].dtype)
    tw = torch.tensor(float((w.inputs["target"] != -100).sum()), dtype=i["self"].dtype)
    out = np.empty_like(w.inputs["self"])
    return [Candidate("torch aten backward", lambda: torch.ops.aten.nll_loss_backward(
                g, i["self"], i["target"], None, 1, -100, tw), PYTORCH, "nll_loss_backward"),
            Candidate("memset of the output", lambda: out.fill(0), FLOOR, "the floor for out=")], []


IMPLS = KernelImpls("torch aten backward", _nll_xloss, _nll_torch)
