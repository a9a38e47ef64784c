"""What ``xloss bench`` times for focal loss: the workload, and the candidates beside xloss's."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_count

from . import api


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n = parse_count(size)
    x = (rng.standard_normal(n, dtype=np.float32) * 3).astype(dt)
    y = (rng.random(n, dtype=np.float32) < 0.1).astype(dt)
    writes = {"forward": 0, "grad": 1, "forward+grad": 1}[mode]  # mean: the loss is a scalar
    return Workload("focal_loss", mode, size, dtype, {"x": x, "y": y}, bytes_moved=(2 + writes) * n * dt.itemsize)


def _focal_xloss(w: Workload, b):
    i = w.inputs
    fn = {"forward": api.focal_loss, "grad": api.focal_loss_grad, "forward+grad": api.focal_loss_with_grad}[w.mode]
    return [("", lambda: fn(i["x"], i["y"], reduction="mean", backend=b))]


def _focal_torch(w: Workload, i, torch, compile_):
    from xloss.torch.paper import paper_focal_loss

    cands, skips = [], []

    def make(f):
        if w.mode == "forward":
            def run():
                with torch.no_grad():
                    return f(i["x"], i["y"], reduction="mean")
        else:
            def run():
                xg = i["x"].detach().requires_grad_()
                f(xg, i["y"], reduction="mean").backward()
                return xg.grad
        return run

    note = "" if w.mode != "grad" else "forward + backward (autograd needs the forward)"
    cands.append(Candidate("torch eager (A.1)", make(paper_focal_loss), PYTORCH, note))
    if compile_:
        try:
            compiled = torch.compile(paper_focal_loss, dynamic=False)
            cands.append(Candidate("torch.compile (A.1)", make(compiled), PYTORCH, note, compiles=True))
        except Exception as exc:  # no compiler, unsupported platform, ...
            skips.append(Skip("torch.compile (A.1)", f"{type(exc).__name__}: {exc}"))
    else:
        skips.append(Skip("torch.compile (A.1)", "disabled (--no-compile)"))
    return cands, skips


IMPLS = KernelImpls("torch eager (A.1)", _focal_xloss, _focal_torch)
