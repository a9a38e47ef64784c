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

from .. import registry
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
