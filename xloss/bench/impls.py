"""The implementations a workload is timed on: every xloss backend, and what a user would
otherwise use (PyTorch eager autograd through the paper's appendix A.1 code, ``torch.compile`` of
it, ATen's own backward ops, a materialised linear + cross-entropy), plus bare floors.

Each candidate is a zero-argument callable over inputs prepared once. Anything that cannot run
here comes back as a skip with its reason, never silently missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import api, registry
from ..containers import from_numpy
from ..errors import XLossError
from .workloads import Workload

#: The PyTorch baseline per kernel (speed-ups are relative to it).
BASELINE = {"focal_loss": "torch eager (A.1)", "bce_grad": "torch aten backward",
            "nll_loss_grad": "torch aten backward", "fused_linear_cross_entropy_grad": "torch materialised"}


@dataclass
class Candidate:
    name: str
    fn: object
    kind: str  # "xloss" | "pytorch" | "floor"
    note: str = ""


@dataclass
class Skip:
    name: str
    reason: str


# -- xloss backends ------------------------------------------------------------------------------


def _xloss_calls(w: Workload, b):
    """(label suffix, callable) pairs for backend ``b`` on ``w`` (may raise UnsupportedRequestError)."""
    i = w.inputs
    if w.kernel == "focal_loss":
        fn = {"forward": api.focal_loss, "grad": api.focal_loss_grad, "forward+grad": api.focal_loss_with_grad}[w.mode]
        return [("", lambda: fn(i["x"], i["y"], reduction="mean", backend=b))]
    if w.kernel == "bce_grad":
        caps = b.capabilities().get("bce_grad")
        mode = "clamp" if caps is None or "clamp" in caps.variants["eps_mode"] else "add"
        eps = caps.fixed.get("eps", 1e-12) if caps is not None else 1e-12
        return [("" if mode == "clamp" else " (eps added)",
                 lambda: api.bce_grad(i["x"], i["y"], 1.0, weight=i["weight"], eps=eps, eps_mode=mode, backend=b))]
    if w.kernel == "nll_loss_grad":
        out = np.empty_like(i["self"])
        return [("", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b)),
                (" out=", lambda: api.nll_loss_grad(1.0, i["self"], i["target"], backend=b, out=out))]
    if w.kernel == "fused_linear_cross_entropy_grad":
        return [("", lambda: api.fused_linear_cross_entropy_grad(
            i["grad"], i["input"], i["weight"], i["target_mask"], i["masked_target"], logits_max=i["logits_max"],
            sum_exp_logits=i["sum_exp_logits"], backend=b))]
    raise ValueError(w.kernel)


def xloss_candidates(w: Workload, names, probe: bool = True) -> tuple[list[Candidate], list[Skip]]:
    """Candidates for the xloss backends ``names``; ``probe``: make one call each here, so a
    backend that does not declare the request is skipped (with its reason) up front."""
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
            calls = _xloss_calls(w, b)
            if probe:
                calls[0][1]()  # refuses here if the backend does not declare the request
        except XLossError as exc:
            skips.append(Skip(label, str(exc)))
            continue
        for suffix, fn in calls:
            cands.append(Candidate(label + suffix, fn, "xloss"))
    return cands, skips


# -- PyTorch and floors ------------------------------------------------------------------------


def torch_candidates(w: Workload, torch, compile_: bool) -> tuple[list[Candidate], list[Skip]]:
    if torch is None:
        return [], [Skip("torch", "torch is not installed (pip install torch)")]
    i = {k: from_numpy(v, "torch") for k, v in w.inputs.items()}
    cands, skips = [], []
    if w.kernel == "focal_loss":
        from ..torch.paper import paper_focal_loss

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
        cands.append(Candidate("torch eager (A.1)", make(paper_focal_loss), "pytorch", note))
        if compile_:
            try:
                compiled = torch.compile(paper_focal_loss, dynamic=False)
                cands.append(Candidate("torch.compile (A.1)", make(compiled), "pytorch", note))
            except Exception as exc:  # no compiler, unsupported platform, ...
                skips.append(Skip("torch.compile (A.1)", f"{type(exc).__name__}: {exc}"))
        else:
            skips.append(Skip("torch.compile (A.1)", "disabled (--no-compile)"))
    elif w.kernel == "bce_grad":
        g = torch.tensor(1.0, dtype=i["x"].dtype)
        cands.append(Candidate("torch aten backward", lambda: torch.ops.aten.binary_cross_entropy_backward(
            g, i["x"], i["y"], i["weight"], 1), "pytorch", "binary_cross_entropy_backward"))
    elif w.kernel == "nll_loss_grad":
        g = torch.tensor(1.0, dtype=i["self"].dtype)
        tw = torch.tensor(float((w.inputs["target"] != -100).sum()), dtype=i["self"].dtype)
        cands.append(Candidate("torch aten backward", lambda: torch.ops.aten.nll_loss_backward(
            g, i["self"], i["target"], None, 1, -100, tw), "pytorch", "nll_loss_backward"))
        out = np.empty_like(w.inputs["self"])
        cands.append(Candidate("memset of the output", lambda: out.fill(0), "floor", "the floor for out="))
    elif w.kernel == "fused_linear_cross_entropy_grad":
        import torch.nn.functional as F

        def materialised():
            xg, wg = i["input"].detach().requires_grad_(), i["weight"].detach().requires_grad_()
            F.cross_entropy(xg @ wg.T, i["target"], reduction="mean").backward()
            return xg.grad, wg.grad

        def bare_gemms():
            logits = i["input"] @ i["weight"].T
            return logits @ i["weight"], logits.T @ i["input"]

        cands.append(Candidate("torch materialised", materialised, "pytorch", "input @ weight.T + cross_entropy"))
        cands.append(Candidate("3 bare GEMMs", bare_gemms, "floor", "the GEMM floor (torch.mm)"))
    return cands, skips
