"""The implementations a workload is timed on: every xloss backend, and what a user would
otherwise use (PyTorch eager autograd through the paper's appendix A.1 code, ``torch.compile`` of
it, ATen's own backward ops, a materialised linear + cross-entropy, the vocabulary-parallel
statistics and loss in eager PyTorch ops), plus bare floors.

Each candidate is a zero-argument callable over inputs prepared once. Anything that cannot run
here comes back as a skip with its reason, never silently missing. Everything one kernel needs
sits in one block below (its xloss calls, its PyTorch candidates and baseline), a :class:`KernelImpls`
that the kernel's row links as ``bench``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import api, registry
from ..containers import from_numpy
from ..errors import XLossError
from ..kernels import KERNELS
from .workloads import Workload

#: Kinds of candidate. A vendor-ABI backend (here: xloss's C emulators of the Ascend and DSP
#: ABIs) stands in for a device to check correctness; it is shown apart and never ranked.
XLOSS, PYTORCH, FLOOR, VENDOR_ABI = "xloss", "pytorch", "floor", "vendor-abi"


@dataclass
class Candidate:
    name: str
    fn: object
    kind: str  # XLOSS | PYTORCH | FLOOR | VENDOR_ABI
    note: str = ""
    compiles: bool = False  # its first call compiles (judged by its warm call, not its first)


def is_native(backend_name: str) -> bool:
    """A host backend (the ones automatic dispatch picks), as opposed to a vendor ABI."""
    return backend_name in registry.DEFAULT_ORDER


@dataclass
class Skip:
    name: str
    reason: str


@dataclass(frozen=True)
class KernelImpls:
    """One kernel's candidates: ``baseline`` names the PyTorch candidate speed-ups are relative to;
    ``xloss(w, backend)`` gives (label suffix, callable) pairs (may raise UnsupportedRequestError);
    ``torch(w, i, torch, compile_)`` gives (candidates, skips), ``i`` the inputs as tensors."""

    baseline: str
    xloss: Callable
    torch: Callable


# -- focal loss ------------------------------------------------------------------------------------


def _focal_xloss(w: Workload, b):
    i = w.inputs
    fn = {"forward": api.focal_loss, "grad": api.focal_loss_grad, "forward+grad": api.focal_loss_with_grad}[w.mode]
    return [("", lambda: fn(i["x"], i["y"], reduction="mean", backend=b))]


def _focal_torch(w: Workload, i, torch, compile_):
    from ..torch.paper import paper_focal_loss

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


# -- BCE gradient ------------------------------------------------------------------------------------


def _bce_xloss(w: Workload, b):
    i = w.inputs
    caps = b.capabilities().get("bce_grad")
    mode = "clamp" if caps is None or "clamp" in caps.variants["eps_mode"] else "add"
    eps = caps.fixed.get("eps", 1e-12) if caps is not None else 1e-12
    return [("" if mode == "clamp" else " (eps added)",
             lambda: api.bce_grad(i["x"], i["y"], 1.0, weight=i["weight"], eps=eps, eps_mode=mode, backend=b))]


def _bce_torch(w: Workload, i, torch, compile_):
    g = torch.tensor(1.0, dtype=i["x"].dtype)
    return [Candidate("torch aten backward", lambda: torch.ops.aten.binary_cross_entropy_backward(
        g, i["x"], i["y"], i["weight"], 1), PYTORCH, "binary_cross_entropy_backward")], []


# -- fused linear cross-entropy gradient ----------------------------------------------------------------


def _flce_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_linear_cross_entropy_grad(
        i["grad"], i["input"], i["weight"], i["target_mask"], i["masked_target"], logits_max=i["logits_max"],
        sum_exp_logits=i["sum_exp_logits"], backend=b))]


def _flce_torch(w: Workload, i, torch, compile_):
    import torch.nn.functional as F

    def materialised():
        xg, wg = i["input"].detach().requires_grad_(), i["weight"].detach().requires_grad_()
        F.cross_entropy(xg @ wg.T, i["target"], reduction="mean").backward()
        return xg.grad, wg.grad

    def bare_gemms():
        logits = i["input"] @ i["weight"].T
        return logits @ i["weight"], logits.T @ i["input"]

    return [Candidate("torch materialised", materialised, PYTORCH, "input @ weight.T + cross_entropy"),
            Candidate("3 bare GEMMs", bare_gemms, FLOOR, "the GEMM floor (torch.mm)")], []


# -- vocabulary-parallel online max/sum (one shard) -----------------------------------------------------


def _online_max_sum_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_linear_online_max_sum(i["input"], i["weight"], i["target"], 0, backend=b))]


def _online_max_sum_torch(w: Workload, i, torch, compile_):
    x, wt, t = i["input"], i["weight"], i["target"]
    v = wt.shape[0]

    def eager():  # the shard's statistics in float32 (float64 for float64), as the kernel returns them
        with torch.no_grad():
            logits = x @ wt.T
            z = logits if logits.dtype == torch.float64 else logits.float()
            m = z.amax(dim=1)
            sum_exp = torch.exp(torch.logsumexp(z, dim=1) - m)
            masked = (t < 0) | (t >= v)
            local = torch.where(masked, 0, t)
            predicted = torch.where(masked, 0.0, z.gather(1, local[:, None]).squeeze(1) - m)
            return m, sum_exp, predicted, masked, local

    return [Candidate("torch eager", eager, PYTORCH,
                      "x @ w.T (logits in the input dtype), amax, logsumexp, gather; mask as bool"),
            Candidate("bare GEMM", lambda: x @ wt.T, FLOOR, "the GEMM floor (torch.mm, input dtype)")], []


# -- vocabulary-parallel loss with max/sum ----------------------------------------------------------


def _loss_with_max_sum_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_cross_entropy_loss_with_max_sum(
        i["logits_max"], i["sum_exp_logits"], i["predicted_logits"], vocab_parallel_logits=i["logits"], backend=b))]


def _loss_with_max_sum_torch(w: Workload, i, torch, compile_):
    m, se, p, z = i["logits_max"], i["sum_exp_logits"], i["predicted_logits"], i["logits"]

    def eager():
        loss = torch.log(se) - p
        return loss, torch.exp(z.to(m.dtype) - m[:, None]) / se[:, None]

    out = np.empty(w.inputs["logits"].shape, w.inputs["logits_max"].dtype)
    return [Candidate("torch eager", eager, PYTORCH, "log(sum_exp) - predicted; exp(logits - max) / sum_exp"),
            Candidate("memset of the softmax", lambda: out.fill(0), FLOOR, "writing the (BT, V) softmax")], []


FOCAL_IMPLS = KernelImpls("torch eager (A.1)", _focal_xloss, _focal_torch)
BCE_IMPLS = KernelImpls("torch aten backward", _bce_xloss, _bce_torch)
FLCE_IMPLS = KernelImpls("torch materialised", _flce_xloss, _flce_torch)
ONLINE_MAX_SUM_IMPLS = KernelImpls("torch eager", _online_max_sum_xloss, _online_max_sum_torch)
LOSS_WITH_MAX_SUM_IMPLS = KernelImpls("torch eager", _loss_with_max_sum_xloss, _loss_with_max_sum_torch)


def __getattr__(name):
    """``IMPLS`` (kernel -> its candidates) and ``BASELINE`` (kernel -> the PyTorch baseline speed-ups
    are relative to), read from the rows each time: a family registered later is in them."""
    if name == "IMPLS":
        return {k: row.load("bench") for k, row in KERNELS.items()}
    if name == "BASELINE":
        return {k: row.load("bench").baseline for k, row in KERNELS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- every kernel ------------------------------------------------------------------------------------


def xloss_candidates(w: Workload, names) -> tuple[list[Candidate], list[Skip]]:
    """Candidates for the xloss backends ``names`` (a backend that does not declare the request
    refuses at its first call, which the bench reports as the reason it is skipped)."""
    cands, skips = [], []
    for name in names:
        label = f"xloss:{name}"
        try:
            b = registry.backend(name)
            ok, why = b.availability()
        except XLossError as exc:
            skips.append(Skip(label, str(exc)))
            continue
        if not ok:
            skips.append(Skip(label, why))
            continue
        try:
            calls = KERNELS[w.kernel].load("bench").xloss(w, b)
        except XLossError as exc:
            skips.append(Skip(label, str(exc)))
            continue
        kind = XLOSS if is_native(name) else VENDOR_ABI
        for suffix, fn in calls:
            cands.append(Candidate(label + suffix, fn, kind, compiles=name == "cpu"))
    return cands, skips


def torch_candidates(w: Workload, torch, compile_: bool) -> tuple[list[Candidate], list[Skip]]:
    if torch is None:
        return [], [Skip("torch", "torch is not installed (pip install torch)")]
    i = {k: from_numpy(v, "torch") for k, v in w.inputs.items()}
    return KERNELS[w.kernel].load("bench").torch(w, i, torch, compile_)
