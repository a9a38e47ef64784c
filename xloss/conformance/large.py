"""The fixed ladder of large cases: the sizes a real tiling sees, which drawn inputs never reach.

Per kernel a few rungs, each with a label that names it in reports and replay files:

* elementwise (focal, BCE): every one of 8 cores above 65536 elements (a 16-bit DMA count
  wraps there), above 2**20 and above 2**24 elements (partial sums of tiles, 24-bit counts);
* NLL backward: C in the tens of thousands with enough rows for every core;
* FLCE: V >= 32000 and BT >= 4096, H small so the C emulators finish in seconds;
* the vocabulary-parallel forward: its own rungs (``xloss/conformance/vocab_parallel.py``).

Each descriptor holds its kernel's :class:`Ladder` (``KernelDescriptor.ladder``): the rungs, and
the argument whose leading axis a rung's period repeats along. The built-in kernels' ladders are
built here from the tables below.

Values are drawn deterministically from ``(seed, kernel, dtype, mode, rung)`` and realistic:
logits ~N(0, 3) with a few extremes, binary targets with some soft ones (all binary for a backend
declaring binary targets only). A case is rebuilt from its rung label and seed and the declared
variants of the backend that runs it (a replay file stores the label and seed, not hundreds of
MiB of arrays).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import reference
from ..kernels import BCE_GRAD, FLCE_GRAD, FOCAL, KERNELS, NLL_GRAD
from . import values as V
from .descriptor import Case

PER_CORE = 65536  # elements per core beyond which 16-bit counts wrap
CORES = 8
#: The elementwise inputs repeat with this period (a prime: no power-of-two offset maps an element
#: onto an equal one), so the oracle is computed on one period; the sizes are whole periods.
PERIOD = 131071
#: FLCE rows repeat with this period (tokens); BT is a whole number of periods.
ROW_PERIOD = 97
#: (label, periods, reduction, agree) for focal and BCE; ``agree``: repeated and run under every
#: configuration (the 2**24 rung runs once: it is there for counts and sums that overflow).
ELEMENTWISE = (
    ("8 cores x >65536 elements, none", 5, "none", True),  # 655355: 81919 per core
    ("8 cores x >65536 elements, sum", 5, "sum", True),
    ("2^20+ elements, mean", 9, "mean", True),  # 1179639
    ("2^24+ elements, mean", 129, "mean", False),  # 16908159
)
#: (label, N, C, reduction) for the NLL backward (every rung agrees across runs and configurations).
NLL = (
    ("N=67 C=32003, none", 67, 32003, "none"),
    ("N=263 C=20011, mean", 263, 20011, "mean"),
)
#: (label, row periods, H, V, agree) for FLCE: one shard of a vocabulary of V + 7993 rows.
FLCE = (
    ("BT=291 H=8 V=4099", 3, 8, 4099, True),
    ("BT=4171 H=8 V=32003", 43, 8, 32003, False),
)


@dataclass(frozen=True)
class Rung:
    """One rung of a descriptor's own ladder: ``period(dtype, mode, seed, label, caps)`` builds one
    period (a Case, or None where no declared variant fits), repeated ``periods`` times along the
    rows; ``agrees``: repeated and run under every configuration."""

    label: str
    periods: int
    agrees: bool
    period: Callable


@dataclass(frozen=True)
class Ladder:
    """A kernel's large ladder: its rungs, and the argument whose leading axis a rung's period is
    repeated along (``"x"`` for the elementwise kernels: their flattened elements)."""

    rungs: tuple
    rows: str


def _rng(seed: int, *parts) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(parts).encode())])


#: The deterministic generator of a rung's values (for descriptors' own rungs).
rng_for = _rng


def _logits(rng, n: int) -> np.ndarray:
    x = rng.normal(0.0, 3.0, n)
    k = max(1, n // 4096)  # a few extremes, spread over the whole array
    x[rng.integers(0, n, k)] = rng.choice(np.array(V.EXTREME_LOGITS), k)
    return x


def _targets(rng, n: int, binary: bool = False) -> np.ndarray:
    """Binary targets with about 5% soft ones (``binary``: those rounded to 0 or 1)."""
    y = (rng.random(n) < 0.3).astype(np.float64)
    soft = rng.random(n) < 0.05
    y[soft] = rng.random(int(soft.sum()))
    return np.round(y) if binary else y


def _period_case(kernel, dtype, mode, seed, label, reduction, caps=None) -> Case:
    """One period of an elementwise rung (reduction ``none`` grads: one period of them)."""
    rng = _rng(seed, kernel, dtype, mode, label)
    n = PERIOD
    grad = V.cast(rng.uniform(-2.0, 2.0, n), dtype) if reduction == "none" else 0.75
    if kernel == FOCAL.name:
        from .focal import _kwargs
        kw = _kwargs(_logits(rng, n), _targets(rng, n, V.binary_targets_only(caps)), dtype, alpha=0.25, gamma=2.0,
                     reduction=reduction,
                     grad=grad if mode != "forward" else None, mode=mode)
    else:
        from .bce import _kwargs
        x = rng.uniform(0.0, 1.0, n)
        k = n // 4096
        x[rng.integers(0, n, k)] = rng.choice(np.array([0.0, 1.0, 1e-12, 1e-7, 1 - 1e-7]), k)
        kw = _kwargs(x, (rng.random(n) < 0.5).astype(np.float64), dtype, reduction=reduction, eps_mode=mode,
                     weight=rng.uniform(0.0, 2.0, n) if reduction == "sum" else None, grad=grad)
    return Case(kernel, mode, dtype, kw, f"large: {label}")


def _tiled(case: Case, reps: int, lead: str = "x") -> Case:
    """``case`` with every per-element (``lead`` "x") or per-row (of the array ``lead``) array
    repeated ``reps`` times (a weight of rows is not per-row)."""
    rows = lead != "x"
    n = np.shape(case.kwargs[lead])[0]
    kw = {}
    for k, v in case.kwargs.items():
        if rows and k == "target_mask" and v.dtype == np.uint8:  # bit-packed: tile the bits
            kw[k] = reference.pack_mask(np.tile(reference.mask_as_bool(v, n), reps))
        elif isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n and not (rows and k == "weight"):
            kw[k] = np.tile(v, (reps,) + (1,) * (v.ndim - 1))
        else:
            kw[k] = v
    return Case(case.kernel, case.mode, case.dtype, kw, case.label)


def _nll(dtype, seed, label, n, c, reduction, target_dtype) -> Case:
    from .nll import _kwargs
    rng = _rng(seed, NLL_GRAD.name, dtype, target_dtype, label)
    t = rng.integers(0, c, n)
    t[rng.random(n) < 0.1] = -100
    self_values = -np.abs(rng.normal(0.0, 3.0, (n, c)))
    kw = _kwargs(self_values, t.astype(np.dtype(target_dtype)), dtype, reduction=reduction,
                 grad=V.cast(rng.uniform(-2.0, 2.0, n), dtype) if reduction == "none" else 0.75,
                 weight=rng.uniform(0.0, 2.0, c) if reduction == "mean" else None)
    return Case(NLL_GRAD.name, None, dtype, kw, f"large: {label}, {target_dtype} targets")


def _flce_period(dtype, mode, seed, label, h, v, mask_formats) -> Case:
    """ROW_PERIOD tokens of one shard [start, start + v) of a vocabulary of k rows."""
    rng = _rng(seed, FLCE_GRAD.name, dtype, mode, label)
    bt, k, start = ROW_PERIOD, v + 7993, 5000
    scale = (3.0 / np.sqrt(h)) ** 0.5  # logits x.w ~ N(0, 3)
    xs = rng.normal(0.0, scale, (bt, h))
    xs[rng.choice(bt, 3, replace=False)] *= 12.0  # a few rows with logits ~ +-40
    target = rng.integers(0, k, bt)
    target[rng.random(bt) < 0.05] = -100
    ws = rng.normal(0.0, scale, (k, h))
    grad = np.where(target == -100, 0.0, rng.uniform(-1.0, 1.0, bt))
    from .flce import shard_case
    fmt = "bool" if "bool" in mask_formats and (mode == "softmax" or len(mask_formats) == 1) else "bitpacked"
    return shard_case(dtype, mode, x=xs, w_global=ws, target=target, start=start, v=v, grad=grad,
                      mask_format=fmt, label=f"large: {label}")


def _elementwise_ladder(kernel: str) -> Ladder:
    def period(reduction):
        return lambda dtype, mode, seed, label, caps: _period_case(kernel, dtype, mode, seed, label, reduction, caps)

    return Ladder(tuple(Rung(label, periods, agree, period(red)) for label, periods, red, agree in ELEMENTWISE), "x")


def _nll_rung(n, c, reduction):
    def period(dtype, mode, seed, label, caps):
        declared = sorted(caps.variants["target_dtype"]) if caps is not None else ["int64"]
        tdt = "int64" if "int64" in declared else "int32" if "int32" in declared else None
        return None if tdt is None else _nll(dtype, seed, label, n, c, reduction, tdt)

    return period


def _flce_rung(h, v):
    def period(dtype, mode, seed, label, caps):
        formats = tuple(sorted(caps.variants["mask"])) if caps is not None else ("bool", "bitpacked")
        return _flce_period(dtype, mode, seed, label, h, v, formats)

    return period


FOCAL_LADDER = _elementwise_ladder(FOCAL.name)
BCE_LADDER = _elementwise_ladder(BCE_GRAD.name)
NLL_LADDER = Ladder(tuple(Rung(label, 1, True, _nll_rung(n, c, red)) for label, n, c, red in NLL), "self")
FLCE_LADDER = Ladder(tuple(Rung(label, periods, agree, _flce_rung(h, v)) for label, periods, h, v, agree in FLCE),
                     "input")


def _ladder(kernel: str) -> Ladder | None:
    spec = KERNELS.get(kernel)
    return None if spec is None else spec.load("descriptor").ladder


def _rung(kernel: str, label: str) -> Rung:
    return next(r for r in _ladder(kernel).rungs if r.label == label)


def rungs(kernel: str) -> list[str]:
    """The labels of ``kernel``'s rungs (none for a kernel without a ladder)."""
    ladder = _ladder(kernel)
    return [] if ladder is None else [r.label for r in ladder.rungs]


def agrees(kernel: str, rung: str) -> bool:
    """Whether the rung is repeated and run under every configuration."""
    return _rung(kernel, rung).agrees


def _base(kernel, dtype, mode, rung, seed, caps):
    """(the case of one period, or None where no declared variant fits the rung; the repetitions;
    the argument repeated)."""
    r = _rung(kernel, rung)
    return r.period(dtype, mode, seed, rung, caps), r.periods, _ladder(kernel).rows


def build(kernel: str, dtype: str, mode, rung: str, seed: int = 0, caps=None) -> Case | None:
    """The case of one rung (``caps``, if given, picks declared variants); None where no declared
    variant fits the rung (NLL with only uint8 targets cannot index tens of thousands of classes)."""
    base, reps, lead = _base(kernel, dtype, mode, rung, seed, caps)
    if base is None:
        return None
    case = _tiled(base, reps, lead) if reps > 1 else base
    case.ladder = {"rung": rung, "seed": int(seed)}
    return case


@functools.lru_cache(maxsize=256)
def nbytes(kernel: str, dtype: str, mode, rung: str) -> int:
    """At most the bytes of the arrays of one rung's case (its period's, times the repetitions),
    measured without building the case: a case file's large cases are sized before any is built."""
    base, reps, _ = _base(kernel, dtype, mode, rung, 0, None)
    if base is None:
        return 0
    return reps * sum(v.nbytes for v in base.kwargs.values() if isinstance(v, np.ndarray))


def cases(kernel: str, dtype: str, mode, seed: int = 0, caps=None):
    """Every rung of ``kernel``, as ``(rung label, case)``, built lazily (one at a time in memory)."""
    for rung in rungs(kernel):
        case = build(kernel, dtype, mode, rung, seed, caps)
        if case is not None:
            yield rung, case


def expectations(d, case: Case, caps) -> tuple[tuple, tuple]:
    """(oracle, allowed) of a rung, computed on one period and repeated: per-element (per-row)
    outputs are the period's, tiled; a sum over ``reps`` periods gets the period's allowance
    times ``reps`` and the longer accumulation (log2 of the length), plus its own final rounding."""
    from .descriptor import allowance

    kernel = case.kernel
    base, reps, lead = _base(kernel, case.dtype, case.mode, case.ladder["rung"], case.ladder["seed"], caps)
    rows = lead != "x"
    red = base.kwargs.get("reduction")
    if reps == 1:
        expected = d.oracle(case)
        return expected, d.allowed(case, expected, caps)
    n_full = np.shape(case.kwargs[lead])[0]
    if red == "mean":  # per element: the same as a sum over one period with grad / N
        base.kwargs["reduction"] = "sum"
        if "grad" in base.kwargs:
            base.kwargs["grad"] = float(base.kwargs["grad"]) / n_full
    expected = d.oracle(base)
    allowed = d.allowed(base, expected, caps)
    names = d.output_names(case.mode)
    growth = np.log2(n_full + 1) / np.log2(np.shape(base.kwargs[lead])[0] + 1)
    out_e, out_a = [], []
    for name, e, a in zip(names, expected, allowed):
        e, a = np.asarray(e, dtype=np.float64), np.broadcast_to(np.asarray(a, dtype=np.float64), np.shape(e))
        summed = (rows and name == "weight_grad") or e.ndim == 0
        if not summed:
            out_e.append(np.tile(e, (reps,) + (1,) * (e.ndim - 1)))
            out_a.append(np.tile(a, (reps,) + (1,) * (e.ndim - 1)))
            continue
        full = e * reps
        a_full = a * reps * growth + allowance(full, 0.0, case.dtype)
        if red == "mean":  # the sum over every period, divided by N (rounded once more)
            full = full / n_full
            a_full = a_full / n_full + allowance(full, 0.0, case.dtype)
        out_e.append(full)
        out_a.append(a_full)
    return tuple(out_e), tuple(out_a)


def repetitions(case: Case) -> tuple[int, int]:
    """(periods, leading length) of a large case: outputs whose leading axis has that length
    repeat with the period where the library is correct (see :func:`compare_repeated`)."""
    periods = _rung(case.kernel, case.ladder["rung"]).periods
    return periods, int(np.shape(case.kwargs[_ladder(case.kernel).rows])[0])


def compare_repeated(name, actual, oracle, allowed, dtype: str, reps: int):
    """:func:`~.descriptor.compare` of an output whose oracle repeats ``reps`` times along its
    leading axis, in about one pass: the first period is compared with the oracle, every other
    element whose bits equal its counterpart's in the first period needs no more (same oracle,
    same allowance), the rest are compared one by one. A failure is redone in full (its message
    counts every element)."""
    from .descriptor import compare

    a = np.ascontiguousarray(actual).reshape(reps, -1)
    o = np.asarray(oracle, dtype=np.float64).reshape(reps, -1)
    t = np.broadcast_to(np.asarray(allowed, dtype=np.float64), np.shape(oracle)).reshape(reps, -1)
    first = compare(name, a[0], o[0], t[0], dtype)
    bits = a.view(f"u{a.dtype.itemsize}")
    other = np.flatnonzero((bits != bits[0]).reshape(-1))
    rest = compare(name, a.reshape(-1)[other], o.reshape(-1)[other], t.reshape(-1)[other], dtype)
    if not (first.ok and rest.ok):
        return compare(name, actual, oracle, allowed, dtype)
    best = first if first.ratio >= rest.ratio or not other.size else rest
    flat = (np.ravel_multi_index(best.worst, o[0].shape) if best is first and best.worst is not None
            else int(other[best.worst[0]]) if best.worst is not None else None)
    worst = tuple(int(i) for i in np.unravel_index(flat, np.shape(oracle))) if flat is not None else None
    return type(first)(name, True, int(np.size(oracle)), max(first.max_abs, rest.max_abs),
                       max(first.max_rel, rest.max_rel), max(first.max_ulp, rest.max_ulp), worst, "",
                       best.ratio, best.tolerance, ())
