"""The BCE forward in ``xloss bench``: its workload and its candidates (PyTorch eager and torch.compile)."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_dims

from . import api


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    (n,) = parse_dims(size, 1)
    x = rng.random(n).astype(dt)
    y = (rng.random(n) < 0.5).astype(dt)
    return Workload("binary_cross_entropy", mode, size, dtype, {"x": x, "y": y}, bytes_moved=2 * n * dt.itemsize)


def _bce_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.binary_cross_entropy(i["x"], i["y"], backend=b))]


def _bce_torch(w: Workload, i, torch, compile_):
    def eager(x, y):
        return torch.nn.functional.binary_cross_entropy(x, y)

    x = w.inputs["x"]
    cands = [Candidate("torch eager", lambda: eager(i["x"], i["y"]), PYTORCH, "F.binary_cross_entropy"),
             Candidate("sum of the inputs", lambda: float(x.sum(dtype=np.float64)), FLOOR, "one read of x")]
    skips = []
    if compile_:
        try:
            compiled = torch.compile(eager, dynamic=False)
            cands.append(Candidate("torch.compile", lambda: compiled(i["x"], i["y"]), PYTORCH,
                                   "F.binary_cross_entropy", compiles=True))
        except Exception as exc:  # no compiler, unsupported platform, ...
            skips.append(Skip("torch.compile", f"{type(exc).__name__}: {exc}"))
    else:
        skips.append(Skip("torch.compile", "disabled (--no-compile)"))
    return cands, skips


IMPLS = KernelImpls("torch eager", _bce_xloss, _bce_torch)
