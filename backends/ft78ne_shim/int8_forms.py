"""What the FT78NE's int8 forms (:mod:`.sigmoid_ce_i8`, :mod:`.nllloss_i8`) share: their argument checks, the
mix of drawn int8 values, and the check's loop over edge cases, core-mask configurations and draws. These forms
are reached here, not through a kernel row: no family or generic layer carries an int8 dtype."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ...errors import BackendUnavailableError, UnsupportedRequestError, XLossTypeError
from .backend import DspBackend

#: values a third of each drawn int8 operand is taken from: the ends of the range and the neighbours of 0
ENDS = (-128, -127, -1, 0, 1, 126, 127)


def dsp_backend(backend) -> DspBackend:
    if not isinstance(backend, DspBackend):
        raise XLossTypeError(f"backend must be a ft78ne backend (xloss.backend('ft78ne', ...)); got {backend!r}")
    return backend


def int8_operand(obj, name: str) -> np.ndarray:
    arr = np.asarray(obj)
    if arr.dtype != np.int8:
        raise XLossTypeError(f"{name} must be int8 (the page's int8_t); got {arr.dtype}")
    return np.ascontiguousarray(arr)


def entry_point(b: DspBackend, fname: str, form: str, mt7004: str) -> str:
    """``fname`` once ``b`` is an FT78NE whose library exports it (``form``: what is FT78NE's, for the message;
    ``mt7004``: the dtypes the page gives MT7004)."""
    if b.chip != "ft78ne":
        raise UnsupportedRequestError(f"backend {b.name!r}: {form} FT78NE's (the page: MT7004 supports {mt7004}); "
                                      "use backend 'ft78ne'")
    if not b.lib.has(fname):
        raise BackendUnavailableError(f"{':'.join(b.paths)} does not export {fname}")
    return fname


def draw_int8(rng: np.random.Generator, shape) -> np.ndarray:
    """int8 values over the whole range, a third of them from :data:`ENDS`."""
    v = rng.integers(-128, 128, shape)
    pick = rng.random(shape) < 1 / 3
    v[pick] = rng.choice(ENDS, int(pick.sum()))
    return v.astype(np.int8)


def run_check(backend: DspBackend, edge: Iterable, drawn: Iterable,
              failure: Callable[[DspBackend, tuple, str], str | None]) -> list[str]:
    """The edge cases under ``backend`` and each of its core-mask configurations, then the drawn cases under
    ``backend``; ``failure(b, case, where)`` is a line saying how ``case`` failed on ``b``, or None."""
    runs = [("", backend)] + [(f" [{label}]", b) for label, b in backend.configurations()]
    found = [failure(b, case, where) for case in edge for where, b in runs]
    found += [failure(backend, case, "") for case in drawn]
    return [msg for msg in found if msg]
