"""What ``xloss bench`` times for the BCE gradient: the workload and the candidates (the row's
``workload`` and ``bench`` links)."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import PYTORCH, Candidate, KernelImpls
from xloss.bench.workloads import Workload, parse_count

from .api import bce_grad


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n = parse_count(size)
    x = rng.uniform(0.001, 0.999, n).astype(np.float32).astype(dt)
    y = (rng.random(n, dtype=np.float32) < 0.5).astype(dt)
    w = rng.uniform(0, 2, n).astype(np.float32).astype(dt)
    return Workload("bce_grad", mode, size, dtype, {"x": x, "y": y, "weight": w}, bytes_moved=4 * n * dt.itemsize)


# -- the candidates ---------------------------------------------------------------------------------


def _bce_xloss(w: Workload, b):
    i = w.inputs
    caps = b.capabilities().get("bce_grad")
    mode = "clamp" if caps is None or "clamp" in caps.variants["eps_mode"] else "add"
    eps = caps.fixed.get("eps", 1e-12) if caps is not None else 1e-12
    return [("" if mode == "clamp" else " (eps added)",
             lambda: bce_grad(i["x"], i["y"], 1.0, weight=i["weight"], eps=eps, eps_mode=mode, backend=b))]


def _bce_torch(w: Workload, i, torch, compile_):
    g = torch.tensor(1.0, dtype=i["x"].dtype)
    return [Candidate("torch aten backward", lambda: torch.ops.aten.binary_cross_entropy_backward(
        g, i["x"], i["y"], i["weight"], 1), PYTORCH, "binary_cross_entropy_backward")], []


IMPLS = KernelImpls("torch aten backward", _bce_xloss, _bce_torch)
