"""The fixed ladder of large cases: the sizes a real tiling sees, which drawn inputs never reach.

Per kernel a few rungs, each with a label that names it in reports and replay files, e.g.:

* elementwise kernels: every one of 8 cores above 65536 elements (a 16-bit DMA count wraps
  there), above 2**20 and above 2**24 elements (partial sums of tiles, 24-bit counts):
  :data:`ELEMENTWISE`, built with :func:`elementwise_ladder`;
* a kernel over rows (tokens, rows of a 2-D input): its own rungs.

Each descriptor holds its kernel's :class:`Ladder` (``KernelDescriptor.ladder``): the rungs, the
argument whose leading axis a rung's period repeats along, and what of its arguments and outputs
does not simply repeat with it. The ladders are built in the descriptor modules; this module reads
them from the descriptors and knows no kernel.

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

from ..kernels import KERNELS
from . import values as V
from .descriptor import Case

PER_CORE = 65536  # elements per core beyond which 16-bit counts wrap
CORES = 8
#: The elementwise inputs repeat with this period (a prime: no power-of-two offset maps an element
#: onto an equal one), so the oracle is computed on one period; the sizes are whole periods.
PERIOD = 131071
#: (label, periods, reduction, agree) of an elementwise kernel's rungs; ``agree``: repeated and run
#: under every configuration (the 2**24 rung runs once: it is there for counts and sums that overflow).
ELEMENTWISE = (
    ("8 cores x >65536 elements, none", 5, "none", True),  # 655355: 81919 per core
    ("8 cores x >65536 elements, sum", 5, "sum", True),
    ("2^20+ elements, mean", 9, "mean", True),  # 1179639
    ("2^24+ elements, mean", 129, "mean", False),  # 16908159
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
    repeated along (``"x"`` for the elementwise kernels: their flattened elements). For a ladder
    over rows:

    * ``per_class``: arguments that are not per row though their leading length may equal it
      (weights per class): never repeated;
    * ``bit_packed``: ``(argument, unpack, pack)`` of an argument that may hold one bit a row
      (a uint8 array): ``unpack(value, rows)`` gives a bool per row, ``pack(bools)`` the bytes;
    * ``summed_outputs``: outputs that are a sum over the rows (a weight gradient).

    ``mean_as_sum(kwargs, n)``: rewrites in place a period's arguments whose reduction is a mean
    over the ``n`` rows (elements) of the whole case into the sum over one period with the same
    per-element outputs; True where it did (a summed output is then divided by ``n``)."""

    rungs: tuple
    rows: str
    per_class: tuple = ()
    bit_packed: tuple = ()
    summed_outputs: tuple = ()
    mean_as_sum: Callable | None = None


def _rng(seed: int, *parts) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(parts).encode())])


#: The deterministic generator of a rung's values (for descriptors' own rungs).
rng_for = _rng


def mean_as_sum(kwargs: dict, n: int) -> bool:
    """:attr:`Ladder.mean_as_sum` of a kernel with a ``reduction`` argument and an upstream ``grad``:
    a mean over ``n`` is, per element, the sum over one period with ``grad / n``."""
    if kwargs.get("reduction") != "mean":
        return False
    kwargs["reduction"] = "sum"
    if "grad" in kwargs:
        kwargs["grad"] = float(kwargs["grad"]) / n
    return True


def elementwise_ladder(kernel: str, period_kwargs: Callable) -> Ladder:
    """The :data:`ELEMENTWISE` ladder of an elementwise kernel. ``period_kwargs(rng, n, dtype, mode,
    reduction, grad, caps)``: the kwargs of one period of ``n`` elements, drawn from ``rng`` after
    ``grad`` (the upstream gradient: one period of it for reduction ``none``, else 0.75)."""

    def period(reduction):
        def build(dtype, mode, seed, label, caps=None):
            rng = _rng(seed, kernel, dtype, mode, label)
            n = PERIOD
            grad = V.cast(rng.uniform(-2.0, 2.0, n), dtype) if reduction == "none" else 0.75
            return Case(kernel, mode, dtype, period_kwargs(rng, n, dtype, mode, reduction, grad, caps),
                        f"large: {label}")

        return build

    return Ladder(tuple(Rung(label, periods, agree, period(red)) for label, periods, red, agree in ELEMENTWISE), "x",
                  mean_as_sum=mean_as_sum)


def _tiled(case: Case, reps: int, ladder: Ladder) -> Case:
    """``case`` with every per-element (rows ``"x"``) or per-row (of the array ``ladder.rows``)
    array repeated ``reps`` times (an argument per class is not per-row)."""
    lead = ladder.rows
    rows = lead != "x"
    n = np.shape(case.kwargs[lead])[0]
    packed = {name: (unpack, pack) for name, unpack, pack in ladder.bit_packed} if rows else {}
    kw = {}
    for k, v in case.kwargs.items():
        if k in packed and v.dtype == np.uint8:  # bit-packed: tile the bits
            unpack, pack = packed[k]
            kw[k] = pack(np.tile(unpack(v, n), reps))
        elif isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n and not (rows and k in ladder.per_class):
            kw[k] = np.tile(v, (reps,) + (1,) * (v.ndim - 1))
        else:
            kw[k] = v
    return Case(case.kernel, case.mode, case.dtype, kw, case.label)


def __getattr__(name: str):
    """The rung tables that moved into the descriptor modules, still readable here under their old
    names: a descriptor module lists those it holds in ``LARGE_TABLES``."""
    if not name.startswith("__"):
        for spec in KERNELS.values():
            module = spec.resolve(spec.descriptor.partition(":")[0])  # a link may be relative to its family
            if name in getattr(module, "LARGE_TABLES", ()):
                return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    variant fits the rung (uint8 targets, say, cannot index tens of thousands of classes)."""
    base, reps, _ = _base(kernel, dtype, mode, rung, seed, caps)
    if base is None:
        return None
    case = _tiled(base, reps, _ladder(kernel)) if reps > 1 else base
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
    ladder = _ladder(kernel)
    rows = lead != "x"
    if reps == 1:
        expected = d.oracle(case)
        return expected, d.allowed(case, expected, caps)
    n_full = np.shape(case.kwargs[lead])[0]
    mean = ladder.mean_as_sum is not None and ladder.mean_as_sum(base.kwargs, n_full)
    expected = d.oracle(base)
    allowed = d.allowed(base, expected, caps)
    names = d.output_names(case.mode)
    growth = np.log2(n_full + 1) / np.log2(np.shape(base.kwargs[lead])[0] + 1)
    out_e, out_a = [], []
    for name, e, a in zip(names, expected, allowed):
        e, a = np.asarray(e, dtype=np.float64), np.broadcast_to(np.asarray(a, dtype=np.float64), np.shape(e))
        summed = (rows and name in ladder.summed_outputs) or e.ndim == 0
        if not summed:
            out_e.append(np.tile(e, (reps,) + (1,) * (e.ndim - 1)))
            out_a.append(np.tile(a, (reps,) + (1,) * (e.ndim - 1)))
            continue
        full = e * reps
        a_full = a * reps * growth + allowance(full, 0.0, case.dtype)
        if mean:  # the sum over every period, divided by N (rounded once more)
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
