"""A last shrinking pass: fewer elements (or rows) while the case still fails the same way.

Hypothesis shrinks a drawn case, but a case drawn as one seeded array (over 16 elements) keeps
its size when the bug shows on any element. This pass tries the failing elements alone, then
halves, so a bug visible on one element is reported on one element.

The unit is an element for the elementwise kernels (the arrays are flattened; a broadcast
weight is materialised), a row for NLL (2-D) and a token for FLCE. A descriptor may say what its
unit is itself (``extra``: ``units(case)``, ``select(case, keep) -> kwargs``, ``unit_of(case,
flat_index, output)``), as the vocabulary-parallel ones do.
"""

from __future__ import annotations

import numpy as np

from .. import reference
from ..kernels import BCE_GRAD, FLCE_GRAD, FOCAL, KERNELS, NLL_GRAD
from .descriptor import Case

#: Backend runs the pass may spend.
BUDGET = 40


def _hook(case: Case, name: str):
    """The descriptor's own ``name`` hook, or None (the built-in kernels' units are below)."""
    spec = KERNELS.get(case.kernel)
    if spec is None:
        return None
    return spec.load("descriptor").extra.get(name)


def units(case: Case) -> int:
    own = _hook(case, "units")
    if own is not None:
        return own(case)
    kw = case.kwargs
    if case.kernel in (FOCAL.name, BCE_GRAD.name):
        return int(np.size(kw["x"])) if np.ndim(kw["x"]) else 0
    if case.kernel == NLL_GRAD.name:
        return int(np.shape(kw["self"])[0]) if np.ndim(kw["self"]) == 2 else 0
    if case.kernel == FLCE_GRAD.name:
        return int(np.shape(kw["input"])[0])
    return 0


def select(case: Case, keep) -> Case:
    """``case`` restricted to the units ``keep`` (sorted indices)."""
    keep = np.asarray(keep, dtype=np.int64)
    kw = dict(case.kwargs)
    own = _hook(case, "select")
    if own is not None:
        kw = own(case, keep)
    elif case.kernel in (FOCAL.name, BCE_GRAD.name):
        shape = np.shape(kw["x"])
        for name in ("x", "y", "weight", "grad"):
            v = kw.get(name)
            if isinstance(v, np.ndarray) and (name != "grad" or v.shape == shape):
                kw[name] = np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1)[keep]
    elif case.kernel == NLL_GRAD.name:
        n = np.shape(kw["self"])[0]
        kw["self"], kw["target"] = kw["self"][keep], kw["target"][keep]
        if isinstance(kw["grad"], np.ndarray) and kw["grad"].shape == (n,):
            kw["grad"] = kw["grad"][keep]
    else:
        bt = np.shape(kw["input"])[0]
        packed = np.asarray(kw["target_mask"]).dtype == np.uint8
        mask = reference.mask_as_bool(kw["target_mask"], bt)[keep]
        kw["target_mask"] = reference.pack_mask(mask) if packed else mask
        for name in ("grad", "input", "masked_target", "softmax", "logits_max", "sum_exp_logits"):
            if kw.get(name) is not None:
                kw[name] = np.ascontiguousarray(kw[name][keep])
    label = f"{case.label}; " if case.label else ""
    return Case(case.kernel, case.mode, case.dtype, kw, f"{label}{len(keep)} of {units(case)} "
                f"{'elements' if case.kernel in (FOCAL.name, BCE_GRAD.name) else 'rows'} kept")


def _unit_of(case: Case, flat_index: int, output: int) -> int:
    """The unit holding element ``flat_index`` of output ``output``."""
    kw = case.kwargs
    own = _hook(case, "unit_of")
    if own is not None:
        return own(case, flat_index, output)
    if case.kernel in (FOCAL.name, BCE_GRAD.name):
        return flat_index
    if case.kernel == NLL_GRAD.name:  # a row of a 2-D input (a 1-D input is one unit: no hint)
        return flat_index // max(1, np.shape(kw["self"])[1]) if np.ndim(kw["self"]) == 2 else -1
    return flat_index // max(1, np.shape(kw["input"])[1]) if output == 0 else -1


def shrink(case: Case, fails, hints=()) -> Case:
    """The smallest restriction of ``case`` found for which ``fails(case)`` is still true.
    ``hints``: units where the failure showed (tried alone first)."""
    n = units(case)
    if n <= 1:
        return case
    budget = [BUDGET]

    def still(keep):
        if budget[0] <= 0:
            return False
        budget[0] -= 1
        return fails(select(case, keep))

    for u in list(dict.fromkeys(h for h in hints if 0 <= h < n))[:6] + [0, n - 1]:
        if still([u]):
            return select(case, [u])
    keep = np.arange(n)
    while len(keep) > 1 and budget[0] > 0:  # halve while one half still fails
        half = len(keep) // 2
        if still(keep[:half]):
            keep = keep[:half]
        elif still(keep[half:]):
            keep = keep[half:]
        else:
            break
    i = 0
    while i < len(keep) and len(keep) > 1 and budget[0] > 0:  # then drop single units
        trial = np.delete(keep, i)
        if still(trial):
            keep = trial
        else:
            i += 1
    return case if len(keep) == n else select(case, keep)


def hints(case: Case, comparisons) -> list[int]:
    """Units of the elements outside tolerance, from the comparisons of a failing run."""
    out = []
    for i, c in enumerate(comparisons):
        out.extend(_unit_of(case, f, i) for f in c.failing)
    return [u for u in out if u >= 0]


def minimise(failure, attempt):
    """This pass on ``failure = (case, exception)``: the smallest case found that fails with the
    same kind of exception under ``attempt(case, count=False)`` (a mismatch: in one of the same
    checks), and that exception."""
    from .execute import InputWritten, Mismatch

    case, exc = failure
    # a mismatch must go on failing one of the same checks (an output, or a statistic over it)
    names = {c.name for c in exc.comparisons if not c.ok} if isinstance(exc, Mismatch) else set()

    def fails(c):
        try:
            attempt(c, count=False)
        except Exception as e:
            return type(e) is type(exc) and (not names or bool(names & {c.name for c in e.comparisons if not c.ok}))
        return False

    found = hints(case, exc.comparisons) if isinstance(exc, Mismatch) else []
    if isinstance(exc, InputWritten) and case.kernel in ("focal_loss", "bce_grad"):
        found = [int(np.ravel_multi_index(exc.index, case.kwargs[exc.buffer].shape))] if exc.index else []
    smaller = shrink(case, fails, found)
    if smaller is case:
        return failure
    try:  # the exception of the kept case, for its message
        attempt(smaller, count=False)
    except Exception as e:
        return smaller, e
    return failure  # pragma: no cover - it failed a moment ago
