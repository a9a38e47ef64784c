"""The validated, normalised arguments a backend kernel receives.

:mod:`xloss.validation` builds these from whatever the caller passed; a backend can rely on
every invariant stated here and must not re-validate. All arrays are NumPy arrays
(bfloat16 as ``ml_dtypes.bfloat16``); float operands share the primary input's dtype; the
output arrays are C-contiguous, writeable, of the stated shape and dtype, and do not
overlap any input. A backend writes its results into the ``*_out`` arrays and returns
nothing. It must not leave an output half-written: if it can still fail after it starts
writing, it computes into scratch memory and copies at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Request:
    """What a call asks of a backend, in the terms capabilities are declared in."""

    kernel: str
    dtype: str
    reduction: str | None
    variant: Mapping[str, object]
    numel: int
    params: Mapping[str, object] = field(default_factory=dict)  # scalars a backend may fix or bound (eps, hidden)


class LazyVariant(Mapping):
    """A request's variant values, some given as zero-argument functions evaluated on first use:
    a value that costs a pass over an input (are the focal targets binary?) is computed only for
    a backend whose declaration depends on it."""

    def __init__(self, values: dict):
        self._values = dict(values)

    def __getitem__(self, axis):
        v = self._values[axis]
        if callable(v):
            v = self._values[axis] = v()
        return v

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        return repr(dict(self))


def target_kind(y: np.ndarray) -> str:
    """``"binary"`` where every element of ``y`` is 0 or 1, else ``"soft"`` (NaN is soft)."""
    flat = y.reshape(-1)
    step = 1 << 20  # in blocks: a soft value usually shows early, and the temporaries stay small
    for start in range(0, flat.size, step):
        part = flat[start:start + step]
        if not ((part == 0) | (part == 1)).all():
            return "soft"
    return "binary"


def __getattr__(name):
    """The kernels' Args types live in their families (``xloss.kernels.<family>``); the names stay
    readable here for code written against this module."""
    from .kernels import linked_named

    found = linked_named("args", name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found
