"""The NLL-loss backward in ``xloss bench``: its workloads and their candidates.

A size ``PxC`` is P positions of C classes in both modes: ``grad`` lays them out as (P, C) rows, ``grad NCHW``
as a segmentation-style (N, C, H, W) batch (each position's classes H·W apart), the same bytes either way. The
N-d cell's positions are planes 256 wide and up to 256 high where those divide P: ``524288x21`` is
(8, 21, 256, 256)."""

from __future__ import annotations

import math

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_dims

from . import api

#: the mode of the (N, C, H, W) cell
NCHW = "grad NCHW"
PLANE_SIDE = 256


def nchw_positions(p: int) -> tuple[int, int, int]:
    """(N, H, W) of P positions: W = 256 and H up to 256 where they divide P (else one row of P)."""
    w = PLANE_SIDE if p % PLANE_SIDE == 0 else p
    h = math.gcd(p // w, PLANE_SIDE)
    return p // w // h, h, w


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    p, c = parse_dims(size, 2)
    t = rng.integers(0, c, p)
    t[::17] = -100
    if mode == NCHW:
        n, h, w = nchw_positions(p)
        logp = np.full((n, c, h, w), -math.log(c), dtype=dt)  # the backward never reads its values
        t = t.reshape(n, h, w)
    else:
        logp = np.full((p, c), -math.log(c), dtype=dt)
    return Workload("nll_loss_grad", mode, size, dtype, {"self": logp, "target": t},
                    bytes_moved=p * c * dt.itemsize + p * 8)


def _nll_xloss(w: Workload, b):
    i = w.inputs
    out = np.empty_like(i["self"])
    return [("", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b)),
            (" out=", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b, out=out))]


def _nll_torch(w: Workload, i, torch, compile_):
    x, t = i["self"], i["target"]
    g = torch.tensor(1.0, dtype=x.dtype)
    tw = torch.tensor(float((w.inputs["target"] != -100).sum()), dtype=x.dtype)
    out = np.empty_like(w.inputs["self"])
    floor = Candidate("memset of the output", lambda: out.fill(0), FLOOR, "the floor for out=")
    if w.mode != NCHW:
        return [Candidate("torch aten backward", lambda: torch.ops.aten.nll_loss_backward(
                    g, x, t, None, 1, -100, tw), PYTORCH, "nll_loss_backward"), floor], []

    def aten():
        return torch.ops.aten.nll_loss2d_backward(g, x, t, None, 1, -100, tw)

    def eager_step():
        xg = x.detach().requires_grad_()
        torch.nn.functional.nll_loss(xg, t).backward()
        return xg.grad

    cands = [Candidate("torch aten backward", aten, PYTORCH, "nll_loss2d_backward"),
             Candidate("torch eager", eager_step, PYTORCH,
                       "F.nll_loss(x, t).backward(): forward + backward (autograd needs the forward)")]
    skips = []
    if not compile_:
        skips.append(Skip("torch.compile", "disabled (--no-compile)"))
    else:
        try:
            cands.append(Candidate("torch.compile", torch.compile(aten, dynamic=False), PYTORCH,
                                   "nll_loss2d_backward compiled", compiles=True))
        except Exception as exc:  # no compiler, unsupported platform, ...
            skips.append(Skip("torch.compile", f"{type(exc).__name__}: {exc}"))
    return cands + [floor], skips


IMPLS = KernelImpls("torch aten backward", _nll_xloss, _nll_torch)
