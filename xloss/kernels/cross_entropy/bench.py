"""The cross-entropy rows in ``xloss bench``: the forward alone (the loss and the log-probabilities
the backward takes; and the loss alone) and a training step (forward then backward, what
``F.cross_entropy(...).backward()`` does; the vendor pair, xloss's fused row and the drop-in side by
side), against PyTorch eager and ``torch.compile``; and the fused row's own cell."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_dims
from xloss.containers import from_numpy

from . import api


def _inputs(size: str, dtype: str, rng) -> dict:
    dt = xdt.FLOAT_DTYPES[dtype]
    n, c = parse_dims(size, 2)
    x = (rng.standard_normal((n, c), dtype=np.float32) * 2).astype(dt)
    t = rng.integers(0, c, n)
    t[::17] = -100
    return {"input": x, "target": t}


def forward_workload(mode: str, size: str, dtype: str, rng) -> Workload:
    i = _inputs(size, dtype, rng)
    x = i["input"]
    return Workload("cross_entropy_loss", mode, size, dtype, i, bytes_moved=2 * x.nbytes + x.shape[0] * 8)


def training_workload(mode: str, size: str, dtype: str, rng) -> Workload:
    """Forward then backward (mean): the floor reads the logits once and writes their gradient once."""
    i = _inputs(size, dtype, rng)
    x = i["input"]
    return Workload("cross_entropy_loss_grad", mode, size, dtype, i, bytes_moved=2 * x.nbytes + x.shape[0] * 8)


def _forward_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.cross_entropy_loss(i["input"], i["target"], backend=b)),
            (" loss only", lambda: api.cross_entropy_loss(i["input"], i["target"], return_log_prob=False, backend=b))]


def _training_xloss(w: Workload, b):
    """The step as the drop-in runs it (xloss's fused row: the loss and the gradient from one pass over the
    logits), and as the vendor pair runs it (the forward writes the log-probabilities, the backward reads them)."""
    i = w.inputs

    def fused():
        return api.cross_entropy_loss_with_grad(i["input"], i["target"], backend=b)[1]

    reused = np.empty_like(i["input"])

    def fused_reused():  # the kernel alone: no fresh (N, C) pages to fault in, as a training loop's grad buffer
        return api.cross_entropy_loss_with_grad(i["input"], i["target"], backend=b, grad_out=reused)[1]

    def pair():
        r = api.cross_entropy_loss(i["input"], i["target"], backend=b)
        return api.cross_entropy_loss_grad(1.0, r.log_prob, i["target"], backend=b)

    def pair_in_place():  # the gradient written over the log-probabilities: one (N, C) buffer a step, as torch
        r = api.cross_entropy_loss(i["input"], i["target"], backend=b)
        return api.cross_entropy_loss_grad(1.0, r.log_prob, i["target"], backend=b, out=r.log_prob)

    return [(" fwd+bwd", fused), (" fwd+bwd into a reused buffer", fused_reused), (" vendor pair fwd+bwd", pair),
            (" vendor pair fwd+bwd in place", pair_in_place)] + _drop_in_step(w, b)


def _drop_in_step(w: Workload, b):
    """``xloss.torch.cross_entropy(x, t).backward()``: the torch step through the drop-in (its forward runs
    the fused row, its backward hands the gradient on as it is); none without torch."""
    try:
        import xloss.torch as xt
    except ImportError:
        return []
    x, t = (from_numpy(w.inputs[k], "torch") for k in ("input", "target"))

    def step():
        xg = x.detach().requires_grad_()
        xt.cross_entropy(xg, t, backend=b).backward()
        return xg.grad

    return [(" xloss.torch fwd+bwd", step)]


def _compiled(torch, fn, name, note, cands, skips, compile_):
    if not compile_:
        skips.append(Skip(name, "disabled (--no-compile)"))
        return
    try:
        cands.append(Candidate(name, torch.compile(fn, dynamic=False), PYTORCH, note, compiles=True))
    except Exception as exc:  # no compiler, unsupported platform, ...
        skips.append(Skip(name, f"{type(exc).__name__}: {exc}"))


def _forward_torch(w: Workload, i, torch, compile_):
    import torch.nn.functional as F

    x, t = i["input"], i["target"]

    def eager():
        with torch.no_grad():
            return F.cross_entropy(x, t)

    cands = [Candidate("torch eager", eager, PYTORCH, "F.cross_entropy under no_grad")]
    skips = []
    _compiled(torch, lambda: F.cross_entropy(x, t), "torch.compile", "F.cross_entropy", cands, skips, compile_)
    out = np.empty_like(w.inputs["input"])
    cands.append(Candidate("memset of the log-probabilities", lambda: out.fill(0), FLOOR, "writing (N, C)"))
    return cands, skips


def _training_torch(w: Workload, i, torch, compile_):
    import torch.nn.functional as F

    x, t = i["input"], i["target"]

    def step(fn):
        def run():
            xg = x.detach().requires_grad_()
            fn(xg, t).backward()
            return xg.grad

        return run

    cands = [Candidate("torch eager", step(F.cross_entropy), PYTORCH, "F.cross_entropy(x, t).backward()")]
    skips = []
    _compiled(torch, step(F.cross_entropy), "torch.compile", "the same step compiled (forward and backward)", cands,
              skips, compile_)
    out = np.empty_like(w.inputs["input"])
    cands.append(Candidate("memset of the gradient", lambda: out.fill(0), FLOOR, "writing (N, C)"))
    return cands, skips


def dense_workload(mode: str, size: str, dtype: str, rng) -> Workload:
    """Logits and smoothed one-hot labels (0.9 on one class, the rest spread)."""
    i = _inputs(size, dtype, rng)
    x, t = i["input"], np.maximum(i["target"], 0)
    n, c = x.shape
    y = np.full((n, c), 0.1 / c, np.float32)
    y[np.arange(n), t] += 0.9
    inputs = {"features": x, "labels": y.astype(x.dtype)}
    return Workload("softmax_cross_entropy_with_logits", mode, size, dtype, inputs,
                    bytes_moved=3 * x.nbytes + n * x.itemsize)


def _dense_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.softmax_cross_entropy_with_logits(i["features"], i["labels"], backend=b))]


def _dense_torch(w: Workload, i, torch, compile_):
    x, y = i["features"], i["labels"]

    def eager():
        with torch.no_grad():
            lp = torch.log_softmax(x, 1)
            return -(y * lp).sum(1), lp.exp() - y

    cands, skips = [Candidate("torch eager", eager, PYTORCH, "log_softmax, -(y * lp).sum(1), exp(lp) - y")], []
    _compiled(torch, eager, "torch.compile", "the same expression compiled", cands, skips, compile_)
    return cands, skips


def fused_workload(mode: str, size: str, dtype: str, rng) -> Workload:
    """The fused row's training step (mean): the floor reads the logits once and writes their gradient once."""
    i = _inputs(size, dtype, rng)
    x = i["input"]
    return Workload("cross_entropy_loss_with_grad", mode, size, dtype, i, bytes_moved=2 * x.nbytes + x.shape[0] * 8)


def _fused_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.cross_entropy_loss_with_grad(i["input"], i["target"], backend=b))]


DENSE_IMPLS = KernelImpls("torch eager", _dense_xloss, _dense_torch)
FORWARD_IMPLS = KernelImpls("torch eager", _forward_xloss, _forward_torch)
TRAINING_IMPLS = KernelImpls("torch.compile", _training_xloss, _training_torch)
FUSED_IMPLS = KernelImpls("torch.compile", _fused_xloss, _training_torch)
