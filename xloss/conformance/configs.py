"""Agreement across runs and configurations: races and core-mask bugs give results that depend on
the run or on which cores work, often each plausible on its own.

Outputs must be bit-identical where the backend declares ``deterministic``, else within the
case's tolerance of each other. A disagreement is ``nondeterministic`` (two runs of one
configuration) or ``mask-dependent`` (two configurations), with both outputs kept.
"""

from __future__ import annotations

import numpy as np

from .descriptor import Case, KernelDescriptor, compare
from .execute import Disagreement, call_checked

NONDETERMINISTIC, MASK_DEPENDENT = "nondeterministic", "mask-dependent"
#: Runs of each large case on the main configuration (the first is judged against the oracle).
REPEATS = 3


def checked_configurations(backend) -> list[tuple[str, object]]:
    """``backend.configurations()`` in checked mode."""
    return [(label, b.checked()) for label, b in backend.configurations()]


def differs(d: KernelDescriptor, case: Case, first: tuple, second: tuple, allowed, deterministic: bool) -> str | None:
    """Why two output tuples of ``case`` disagree (None if they agree)."""
    for name, a, b, t in zip(d.output_names(case.mode), first, second, allowed):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{name}: shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if a.size == 0:
            continue
        ab = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
        bb = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
        if np.array_equal(ab, bb):
            continue
        if deterministic:
            changed = (ab != bb).any(axis=1)
            if changed.any():
                i = int(np.argmax(changed))
                at = [int(j) for j in np.unravel_index(i, a.shape)] if a.ndim else []
                return (f"{name} is not bit-identical (the backend declares determinism): at index {at} "
                        f"{float(a.reshape(-1)[i])!r} vs {float(b.reshape(-1)[i])!r}; "
                        f"{int(changed.sum())} of {a.size} elements differ")
        else:
            c = compare(name, b, a.astype(np.float64), t, case.dtype)
            if not c.ok:
                return f"{name} differs by more than the tolerance: {c.detail}"
    return None


def agree_or_raise(d, case, reference: tuple, others, allowed, deterministic: bool, status: str):
    """Compare ``reference = (label, outputs)`` with each ``(label, outputs)`` of ``others``."""
    for label, outputs in others:
        why = differs(d, case, reference[1], outputs, allowed, deterministic)
        if why is not None:
            kind = "runs" if status == NONDETERMINISTIC else "configurations"
            raise Disagreement(f"{kind} {reference[0]} and {label} disagree: {why}", status=status,
                               first=reference, second=(label, outputs))


def repeat_runs(d, case, backend, first: tuple, allowed, repeats: int):
    """Run ``case`` ``repeats - 1`` more times on ``backend``; raise :class:`Disagreement` on a difference."""
    others = ((f"run {i + 1}", call_checked(d, case, backend)) for i in range(1, repeats))
    agree_or_raise(d, case, ("run 1", first), others, allowed, getattr(backend, "deterministic", False),
                   NONDETERMINISTIC)


def across_configurations(d, case, configurations, first: tuple, allowed, deterministic: bool,
                          main: str = "the main configuration"):
    """Run ``case`` on each checked configuration; raise :class:`Disagreement` on a difference.
    Configurations that do not declare the case are skipped."""
    from . import supports

    def runs():
        for label, b in configurations:
            c = b.capabilities().get(case.kernel)
            if c is not None and supports(c, case):
                yield label, call_checked(d, case, b)

    agree_or_raise(d, case, (main, first), runs(), allowed, deterministic, MASK_DEPENDENT)
