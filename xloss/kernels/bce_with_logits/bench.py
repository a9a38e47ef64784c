"""What ``xloss bench`` times for BCE with logits: the workload, and torch's eager and compiled
``binary_cross_entropy_with_logits`` beside xloss's."""

from __future__ import annotations

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import PYTORCH, Candidate, KernelImpls, Skip
from xloss.bench.workloads import Workload, parse_count
from xloss.containers import from_numpy

from . import api


def workload(mode: str, size: str, dtype: str, rng) -> Workload:
    """Multi-label logits ~N(0, 3), 10% positive targets, a per-class pos_weight (the usual detection
    and multi-label setup: 80 classes)."""
    dt = xdt.FLOAT_DTYPES[dtype]
    n = parse_count(size)
    classes = 80
    rows = max(1, n // classes)
    x = (rng.standard_normal((rows, classes), dtype=np.float32) * 3).astype(dt)
    y = (rng.random((rows, classes), dtype=np.float32) < 0.1).astype(dt)
    pw = rng.uniform(0.5, 4.0, classes).astype(np.float32).astype(dt)
    writes = {"forward": 0, "grad": 1, "forward+grad": 1}[mode]  # mean: the loss is a scalar
    return Workload("bce_with_logits", mode, size, dtype, {"x": x, "y": y, "pos_weight": pw},
                    bytes_moved=(2 + writes) * x.size * dt.itemsize)


def _xloss(w: Workload, b):
    i = w.inputs
    caps = b.capabilities().get("bce_with_logits")
    kw = {"pos_weight": i["pos_weight"]} if caps is None or True in caps.variants["pos_weight"] else {}
    note = "" if kw else " (no pos_weight)"
    fn = {"forward": api.bce_with_logits, "grad": api.bce_with_logits_grad,
          "forward+grad": api.bce_with_logits_with_grad}[w.mode]
    rows = [(note, lambda: fn(i["x"], i["y"], reduction="mean", backend=b, **kw))]
    return rows + (_drop_in_step(w, b, note, bool(kw)) if w.mode == "forward+grad" else [])


def _drop_in_step(w: Workload, b, note: str, with_pos_weight: bool):
    """``xloss.torch.binary_cross_entropy_with_logits(x, y).backward()``: the torch step through the drop-in
    (its gradient buffer as a training loop gets it); none without torch."""
    try:
        import xloss.torch as xt
    except ImportError:
        return []
    x, y, pw = (from_numpy(w.inputs[k], "torch") for k in ("x", "y", "pos_weight"))
    pw = pw if with_pos_weight else None

    def step():
        xg = x.detach().requires_grad_()
        xt.binary_cross_entropy_with_logits(xg, y, pos_weight=pw, backend=b).backward()
        return xg.grad

    return [(" xloss.torch fwd+bwd" + note, step)]


def _torch(w: Workload, i, torch, compile_):
    def expression(x, y, pw):
        return torch.nn.functional.binary_cross_entropy_with_logits(x, y, pos_weight=pw, reduction="mean")

    def make(f):
        if w.mode == "forward":
            def run():
                with torch.no_grad():
                    return f(i["x"], i["y"], i["pos_weight"])
        else:
            def run():
                xg = i["x"].detach().requires_grad_()
                f(xg, i["y"], i["pos_weight"]).backward()
                return xg.grad
        return run

    note = "" if w.mode != "grad" else "forward + backward (autograd needs the forward)"
    cands = [Candidate("torch eager", make(expression), PYTORCH, note)]
    skips = []
    if compile_:
        try:
            compiled = torch.compile(expression, dynamic=False)
            cands.append(Candidate("torch.compile", make(compiled), PYTORCH, note, compiles=True))
        except Exception as exc:  # no compiler, unsupported platform, ...
            skips.append(Skip("torch.compile", f"{type(exc).__name__}: {exc}"))
    else:
        skips.append(Skip("torch.compile", "disabled (--no-compile)"))
    return cands, skips


IMPLS = KernelImpls("torch eager", _xloss, _torch)
