"""The FT78NE's int8 ``nllloss`` (the manual's ``i8_nllloss_s``), called from Python, and its check.

The page declares the int8 form (FT78NE only, shared memory: it shows no ``_p`` form for any dtype) with int8_t
log-probabilities and weights and int32_t loss and total weight, and says nothing of scale, overflow or the
rounding of its mean ("averaged over the weight sum"). No kernel row carries an int8 dtype (every family and the
generic layers speak floating dtypes), so this form is reached here, not through ``xloss.nll_loss``:
:func:`nll_loss_i8` runs it on a ``ft78ne`` backend (the emulator or any library, shared memory, the backend's
core mask), and :func:`check` runs the conformance cases of this form against one — a port author's check of
their ``i8_nllloss_s``. The oracle (:mod:`xloss.reference.nllloss_i8`) is exact for none, sum and the total
weight, and takes either integer next to the exact quotient for the mean: the emulator's truncation toward zero
is xloss's choice, not the vendor's.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedRequestError, XLossTypeError, XLossValueError
from ...reference import nllloss_i8 as oracle
from . import abi
from .backend import DspBackend
from .int8_forms import draw_int8, dsp_backend, entry_point, int8_operand, run_check

UNWRITTEN = -(2**31)  # external libraries write into scratch filled with this


def nll_loss_i8(backend: DspBackend, log_probs, labels, weight=None, reduction: str = "mean"):
    """(loss, total_weight) of int8 ``log_probs`` (batch x classes), integer ``labels`` in [0, classes) and int8
    ``weight`` (classes; None: all ones, as the page has no NULL weight) from the backend's ``i8_nllloss_s``:
    ``loss`` int32, ``batch`` rows for ``reduction="none"``, else a 0-d int32; ``total_weight`` a 0-d int32.
    The page has no ignore_index (as the fp_ form): leave ignored rows out of ``log_probs`` and ``labels``."""
    b = dsp_backend(backend)
    x = int8_operand(log_probs, "log_probs")
    if x.ndim != 2:
        raise XLossValueError(f"log_probs must be 2-D (batch_size x class_num); got shape {x.shape}")
    n, k = x.shape
    t = np.asarray(labels)
    if t.dtype.kind not in "iu":
        raise XLossTypeError(f"labels must be integers (the page's int); got {t.dtype}")
    if t.shape != (n,):
        raise XLossValueError(f"labels must have shape ({n},) (one per row of log_probs); got {t.shape}")
    if t.size and (t.min() < 0 or t.max() >= k):
        bad = int(np.flatnonzero((t < 0) | (t >= k))[0])
        raise XLossValueError(f"labels must lie in [0, {k}) (the page: 0 <= label < class_num); "
                              f"labels[{bad}] = {int(t[bad])}")
    t = np.ascontiguousarray(t, np.intc)
    w = np.ones(k, np.int8) if weight is None else int8_operand(weight, "weight")
    if w.shape != (k,):
        raise XLossValueError(f"weight must have shape ({k},) (one per class); got {w.shape}")
    if reduction not in oracle.REDUCTIONS:
        raise XLossValueError(f"reduction must be one of {', '.join(oracle.REDUCTIONS)}; got {reduction!r}")
    fname = entry_point(b, abi.NLLLOSS_I8_S, "i8_nllloss is", "hp and fp")
    if b.memory != "shared":
        raise UnsupportedRequestError(f"backend {b.name!r}: the nllloss page declares i8_nllloss_s only (no _p "
                                      f"form); use memory='shared'")
    abi.c_int("batch_size", n), abi.c_int("class_num", k), abi.c_int("batch_size x class_num", n * k)
    none = reduction == "none"
    direct = b._features.direct
    loss = np.empty(n if none else 1, np.int32) if direct else np.full(n if none else 1, UNWRITTEN, np.int32)
    tw = np.empty(1, np.int32) if direct else np.full(1, UNWRITTEN, np.int32)
    b._invoke(fname, b._ptr(x, "int8_t"), b._ptr(t, "int"), b._ptr(w, "int8_t"), b._ptr(loss, "int32_t"),
              b._ptr(tw, "int32_t"), n, k, b._codes["nllloss"][reduction], b.core_mask)
    return (loss if none else loss.reshape(())), tw.reshape(())


# -- the check ---------------------------------------------------------------------------------------------------
Case = tuple  # (name, log_probs, labels, weight, reduction)


def _every_product() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """512 rows x 512 classes, row j labelled class j: log_probs[j, j] runs over every int8 value twice; the
    weights over every int8 value, then over every one in reverse (v * v and v * -(v + 1): -128 * -128, whose
    negation does not fit int16, and -128 * 127 among them)."""
    every = np.arange(-128, 128)
    x = np.zeros((512, 512), np.int8)
    x[np.arange(512), np.arange(512)] = np.tile(every, 2)
    return x, np.arange(512), np.concatenate([every, every[::-1]]).astype(np.int8)


def edge_cases() -> list[Case]:
    """Every int8 product, sums past int16 (a narrow accumulator wraps), means whose weight sum is not the batch
    size and whose exact quotient is negative and not an integer, a batch of one, one class, lengths around the
    emulator's 1024-row blocks, and the empty batch (none and sum: the page gives no mean over no weight)."""
    x, t, w = _every_product()
    cases = [(f"every int8 product, {r}", x, t, w, r) for r in oracle.REDUCTIONS]
    big = np.full((9, 2), -128, np.int8)  # 9 * 128 * 127 = 146304: past int16, inside int32
    for r in ("sum", "mean"):
        cases.append((f"sum past int16, {r}", big, np.zeros(9, int), np.array([127, 1], np.int8), r))
    cases += [("negative inexact mean", np.array([[7, 3], [5, -1], [2, 9]], np.int8), np.array([0, 1, 0]),
               np.array([3, -1], np.int8), "mean"),
              ("weights far from one", np.array([[-100, -50], [-90, -10]], np.int8), np.array([0, 1]),
               np.array([5, 2], np.int8), "mean"),
              ("one row", np.array([[-128, 0, 0]], np.int8), np.array([0]), np.array([-128, 1, 1], np.int8), "sum"),
              ("one class", np.array([[-3], [-4]], np.int8), np.array([0, 0]), np.array([7], np.int8), "mean")]
    for r in ("none", "sum"):
        cases.append((f"empty, {r}", np.zeros((0, 4), np.int8), np.zeros(0, int), np.ones(4, np.int8), r))
    rng = np.random.default_rng(0)
    for n in (1023, 1025, 8 * 1024 + 3):
        for r in oracle.REDUCTIONS:
            cases.append((f"{n} rows, {r}", rng.integers(-128, 128, (n, 3)).astype(np.int8),
                          rng.integers(0, 3, n), rng.integers(1, 128, 3).astype(np.int8), r))
    return cases


def drawn_cases(examples: int, seed: int) -> list[Case]:
    """int8 log-probabilities and weights over the whole range (a third from its ends), 0 to 300 rows of 1 to 40
    classes, each reduction in turn: every sum stays inside int32 (300 * 128 * 128 < 2**31). A mean whose weight
    sum is 0 is drawn again with all-one weights."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(examples):
        r = oracle.REDUCTIONS[i % 3]
        n, k = int(rng.integers(0 if r != "mean" else 1, 301)), int(rng.integers(1, 41))
        x, t, w = draw_int8(rng, (n, k)), rng.integers(0, k, n), draw_int8(rng, k)
        if r == "mean" and not int(w.astype(np.int64)[t].sum()):
            w = np.ones(k, np.int8)
        out.append((f"drawn #{i} (seed {seed}), {n} x {k}, {r}", x, t, w, r))
    return out


def _mismatch(case: Case, loss: np.ndarray, tw: np.ndarray, where: str) -> str | None:
    name, x, t, w, r = case
    rows, total, weights = oracle.expected(x, t, w, r)
    head = f"{name}{where}"
    if int(tw) != weights:
        return f"{head}: total_weight = {int(tw)}, expected {weights} (the labelled rows' weights summed)"
    if r == "none":
        bad = np.flatnonzero(loss != rows)
        if bad.size:
            i = int(bad[0])
            return (f"{head}: {bad.size} of {rows.size} row loss(es) wrong; first at row {i}: log_probs[{i}, "
                    f"{int(t[i])}] = {int(x[i, t[i]])}, weight = {int(w[t[i]])} gave {int(loss[i])}, expected "
                    f"{int(rows[i])}")
    elif r == "sum":
        if int(loss) != total:
            return f"{head}: loss[0] = {int(loss)}, expected the sum {total}"
    elif not oracle.mean_accepted(int(loss), x, t, w):
        s, sw = oracle.exact_sums(x, t, w)
        lo, hi = oracle.mean_neighbours(s, sw)
        want = f"{lo}" if lo == hi else f"{lo} or {hi}"
        return (f"{head}: loss[0] = {int(loss)}, expected {want} (the sum {s} over the weight sum {sw}, "
                f"rounded either way)")
    return None


def check(backend: DspBackend, *, examples: int = 20, seed: int = 0) -> list[str]:
    """The int8 form's conformance: the edge cases under the backend and each of its core-mask configurations,
    then ``examples`` drawn cases under the backend; one line per failing case (empty: pass)."""
    return run_check(backend, edge_cases(), drawn_cases(examples, seed),
                     lambda b, case, where: _mismatch(case, *nll_loss_i8(b, *case[1:]), where))
