"""The FT78NE's int8 ``sigmoidcrossentropywithlogits`` (the manual's ``i8_..._s``/``_p``), called from Python,
and its check.

The page declares the int8 forms (FT78NE only) with int8_t logits, labels and loss and says nothing else of
them: no scale, rounding or saturation. No kernel row carries an int8 dtype (every family and the generic
layers speak floating dtypes), so this form is reached here, not through ``xloss.bce_with_logits``:
:func:`sigmoid_cross_entropy_with_logits_i8` runs it on a ``ft78ne`` backend (the emulator or any library:
shared memory with the backend's core mask, or private memory in tiles), and :func:`check` runs the
conformance cases of this form against one — a port author's check of their ``i8_`` functions. The oracle
(:mod:`xloss.reference.sigmoid_ce_i8`) accepts any output within one unit of the exact real loss, saturated to
int8: the emulator's own rounding (to nearest even) is xloss's choice, not the vendor's.
"""

from __future__ import annotations

import numpy as np

from ...errors import XLossValueError
from ...reference import sigmoid_ce_i8 as oracle
from . import abi
from .backend import DspBackend
from .int8_forms import draw_int8, dsp_backend, entry_point, int8_operand, run_check
from .staging import fit, ranges

CT = "int8_t"
UNWRITTEN = -128  # external libraries write into scratch filled with this: for labels 0/1 the loss is >= 0


def sigmoid_cross_entropy_with_logits_i8(backend: DspBackend, input0, input1) -> np.ndarray:
    """The per-element int8 loss of int8 logits ``input0`` and labels ``input1`` (same shape) from the
    backend's ``i8_sigmoidcrossentropywithlogits_s`` (shared memory) or ``_p`` (private memory, tiled)."""
    b = dsp_backend(backend)
    x, y = int8_operand(input0, "input0"), int8_operand(input1, "input1")
    if x.shape != y.shape:
        raise XLossValueError(f"input1 must have input0's shape {x.shape}; got {y.shape}")
    fname = entry_point(b, abi.SCE_LOGITS_I8 + b._suffix, f"the i8_ forms of {abi.SCE_LOGITS} are", "fp16 and fp32")
    n = abi.c_int("length", x.size)
    out = np.empty(x.shape, np.int8)
    if n == 0:
        return out
    xf, yf, flat = x.reshape(-1), y.reshape(-1), out.reshape(-1)
    if b.memory == "shared":
        res = flat if b._features.direct else np.full(n, UNWRITTEN, np.int8)
        b._invoke(fname, b._ptr(xf, CT), b._ptr(yf, CT), b._ptr(res, CT), n, b.core_mask)
    else:
        t = fit(b._budget(), lambda t: 3 * b._blk(t), n)
        if t == 0:
            raise b._too_big(f"{fname} on one element", 3 * b._blk(1))
        tiles = ranges(n, t)
        res = np.full(n, UNWRITTEN, np.int8)

        def stage(i, bufs):
            lo, hi = tiles[i]
            m = hi - lo
            bufs["x"].arr[:m] = xf[lo:hi]
            bufs["y"].arr[:m] = yf[lo:hi]
            bufs["out"].arr[:m] = UNWRITTEN
            b._invoke(fname, bufs["x"].ptr, bufs["y"].ptr, bufs["out"].ptr, m)
            res[lo:hi] = bufs["out"].arr[:m]

        b._run_private({"x": (CT, np.int8, t), "y": (CT, np.int8, t), "out": (CT, np.int8, t)}, len(tiles), stage)
    if res is not flat:
        flat[...] = res
    return out


# -- the check ---------------------------------------------------------------------------------------------------
def edge_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, logits, labels): every int8 logit with each label (the saturation at x = -128, y = 1, whose loss is
    128; x = -128, y = 0, whose |x| does not fit int8), lengths around the emulator's 1024-element blocks, and
    the empty call."""
    every = np.arange(-128, 128, dtype=np.int8)
    cases = [("every logit, label 0", every, np.zeros(256, np.int8)),
             ("every logit, label 1", every, np.ones(256, np.int8)),
             ("saturating elements at both ends of a slice", np.array([-128, 127, -128] * 3, np.int8),
              np.array([1, 0, 0] * 3, np.int8)),
             ("one element", np.array([-128], np.int8), np.array([1], np.int8)),
             ("empty", np.zeros(0, np.int8), np.zeros(0, np.int8))]
    rng = np.random.default_rng(0)
    for n in (1023, 1025, 8 * 1024 + 3):
        cases.append((f"{n} elements", rng.integers(-128, 128, n).astype(np.int8),
                      rng.integers(0, 2, n).astype(np.int8)))
    return cases


def drawn_cases(examples: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, logits, labels): int8 logits drawn over the whole range (a third of them from its ends), labels 0
    or 1 (the page calls them labels and says no more: other values are not drawn), 0 to 300 elements."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(examples):
        n = int(rng.integers(0, 301))
        out.append((f"drawn #{i} (seed {seed})", draw_int8(rng, n), rng.integers(0, 2, n).astype(np.int8)))
    return out


def _mismatch(name: str, q: np.ndarray, x: np.ndarray, y: np.ndarray, where: str) -> str | None:
    bad = np.flatnonzero(~oracle.accepted(q, x, y))
    if not bad.size:
        return None
    i = int(bad[0])
    return (f"{name}{where}: {bad.size} of {x.size} element(s) outside tolerance; first at {i}: input0={int(x[i])}, "
            f"input1={int(y[i])} gave {int(q.reshape(-1)[i])}, expected within 1 of "
            f"{float(oracle.saturated(x[i], y[i])):.6g} (the exact loss {float(oracle.exact(x[i], y[i])):.6g}, "
            f"saturated to int8)")


def check(backend: DspBackend, *, examples: int = 20, seed: int = 0) -> list[str]:
    """The int8 form's conformance: the edge cases under the backend and each of its core-mask
    configurations, then ``examples`` drawn cases under the backend; one line per failing case (empty: pass)."""

    def failure(b, case, where):
        name, x, y = case
        return _mismatch(name, sigmoid_cross_entropy_with_logits_i8(b, x, y), x, y, where)

    return run_check(backend, edge_cases(), drawn_cases(examples, seed), failure)
