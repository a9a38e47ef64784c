"""A last shrinking pass: fewer elements (or rows) while the case still fails the same way.

Hypothesis shrinks a drawn case, but a case drawn as one seeded array (over 16 elements) keeps
its size when the bug shows on any element. This pass tries the failing elements alone, then
halves, so a bug visible on one element is reported on one element.

What a unit is, each descriptor says (``KernelDescriptor.shrinking``, a :class:`Shrinking`): an
element for the elementwise kernels (:func:`elementwise`: the arrays are flattened, a broadcast
one is materialised), a row of a 2-D input, a token (a row of the input of a linear layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernels import KERNELS
from .descriptor import Case

#: Backend runs the pass may spend.
BUDGET = 40


@dataclass(frozen=True)
class Shrinking:
    """A kernel's unit of shrinking: ``units(case)``, how many a case has (0 or 1: nothing to
    shrink); ``select(case, keep)``, the case's kwargs restricted to the units ``keep`` (sorted
    indices); ``unit_of(case, flat_index, output)``, the unit holding an element of an output
    (-1: no hint); ``noun``, what a report calls the units; ``written_unit``, see below."""

    units: Callable
    select: Callable
    unit_of: Callable
    noun: str = "rows"
    #: ``(case, buffer, index)``: the unit holding the element ``index`` of the input ``buffer`` the
    #: backend wrote into (None: no hint)
    written_unit: Callable | None = None


def elementwise(lead: str, arrays: tuple, upstream: str) -> Shrinking:
    """The unit of an elementwise kernel: an element of the flattened arrays. ``lead``: the argument
    whose elements are the units; ``arrays``: those restricted with it (a broadcast one is
    materialised), ``upstream`` among them only where it has ``lead``'s shape (not a reduction's
    scalar). An input element written by the backend is its own unit."""

    def units(case: Case) -> int:
        x = case.kwargs[lead]
        return int(np.size(x)) if np.ndim(x) else 0

    def select(case: Case, keep) -> dict:
        kw = dict(case.kwargs)
        shape = np.shape(kw[lead])
        for name in arrays:
            v = kw.get(name)
            if isinstance(v, np.ndarray) and (name != upstream or v.shape == shape):
                kw[name] = np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1)[keep]
        return kw

    return Shrinking(units, select, lambda case, flat_index, output: flat_index, "elements",
                     written_unit=lambda case, buffer, index: int(np.ravel_multi_index(index,
                                                                                       case.kwargs[buffer].shape)))


def _shrinking(case: Case) -> Shrinking | None:
    spec = KERNELS.get(case.kernel)
    return None if spec is None else spec.load("descriptor").shrinking


def units(case: Case) -> int:
    own = _shrinking(case)
    return 0 if own is None else own.units(case)


def select(case: Case, keep) -> Case:
    """``case`` restricted to the units ``keep`` (sorted indices)."""
    own = _shrinking(case)
    keep = np.asarray(keep, dtype=np.int64)
    label = f"{case.label}; " if case.label else ""
    return Case(case.kernel, case.mode, case.dtype, own.select(case, keep),
                f"{label}{len(keep)} of {units(case)} {own.noun} kept")


def _unit_of(case: Case, flat_index: int, output: int) -> int:
    """The unit holding element ``flat_index`` of output ``output`` (-1: none)."""
    own = _shrinking(case)
    return -1 if own is None else own.unit_of(case, flat_index, output)


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
    own = _shrinking(case)
    if isinstance(exc, InputWritten) and own is not None and own.written_unit is not None:
        found = [own.written_unit(case, exc.buffer, exc.index)] if exc.index else []
    smaller = shrink(case, fails, found)
    if smaller is case:
        return failure
    try:  # the exception of the kept case, for its message
        attempt(smaller, count=False)
    except Exception as e:
        return smaller, e
    return failure  # pragma: no cover - it failed a moment ago
