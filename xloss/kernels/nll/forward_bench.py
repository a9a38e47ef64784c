"""The NLL-loss forward in ``xloss bench``: its workload and its candidates (PyTorch eager and torch.compile)."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_dims

from . import api


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n, c = parse_dims(size, 2)
    logp = np.log(rng.random((n, c)) + 1e-3).astype(dt)
    t = rng.integers(0, c, n)
    t[::17] = -100
    # the forward reads one element per row (a gather), the targets and writes a scalar
    return Workload("nll_loss", mode, size, dtype, {"self": logp, "target": t, "weight": rng.random(c).astype(dt)},
                    bytes_moved=n * (8 + 64))


def _nll_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.nll_loss(i["self"], i["target"], weight=i["weight"], backend=b))]


def _nll_torch(w: Workload, i, torch, compile_):
    def eager(x, t, weight):
        return torch.nn.functional.nll_loss(x, t, weight)

    target = w.inputs["target"]
    cands = [Candidate("torch eager", lambda: eager(i["self"], i["target"], i["weight"]), PYTORCH, "F.nll_loss"),
             Candidate("gather of the targets' elements", lambda: np.take_along_axis(
                 w.inputs["self"], np.maximum(target, 0)[:, None], 1), FLOOR, "one element a row")]
    skips = []
    if compile_:
        try:
            compiled = torch.compile(eager, dynamic=False)
            cands.append(Candidate("torch.compile", lambda: compiled(i["self"], i["target"], i["weight"]), PYTORCH,
                                   "F.nll_loss", compiles=True))
        except Exception as exc:  # no compiler, unsupported platform, ...
            skips.append(Skip("torch.compile", f"{type(exc).__name__}: {exc}"))
    else:
        skips.append(Skip("torch.compile", "disabled (--no-compile)"))
    return cands, skips


IMPLS = KernelImpls("torch eager", _nll_xloss, _nll_torch)
