"""Running one case the way ``xloss check`` holds a port to its contract.

The backend gets a private copy of the case's inputs; the case itself stays the pre-call
snapshot, from which the oracle is computed and which a replay file stores. After the call
the copy is compared with the snapshot byte for byte: a library that writes into an input
fails ("wrote into input `self`") even where the checked mode of its adapter cannot see it.
The backend should be in its checked mode (:meth:`xloss.Backend.checked`): guard regions
turn a write out of bounds into :class:`~xloss.errors.OutOfBoundsWrite` at the call.
Process-wide state (the floating-point environment, signal dispositions, the thread count: see
:mod:`.process_state`) is compared around the call too: a change is :class:`StateChanged`.
"""

from __future__ import annotations

import zlib

import numpy as np

from .. import abi_log
from .. import dtypes as xdt
from ..errors import PortViolation
from . import process_state
from .descriptor import Case, Comparison, KernelDescriptor, compare

#: The bias check needs this many well-conditioned elements of a 16-bit output.
BIAS_MIN_ELEMENTS = 1000
#: Mean signed error, in ulps of the output dtype toward larger magnitude, beyond which the
#: output is biased: round-to-nearest-even gives about 0, truncation about -0.5.
BIAS_LIMIT_ULPS = 0.2
#: At most this many elements (a strided sample) enter the bias check.
BIAS_SAMPLE = 1 << 18


class CheckFailure(AssertionError):
    """A failure the suite detected (as opposed to an exception the backend raised)."""

    status = "fail"


class Mismatch(CheckFailure):
    """An output is outside its tolerance of the oracle."""

    def __init__(self, message: str, comparisons=()):
        super().__init__(message)
        self.comparisons = list(comparisons)


class InputWritten(CheckFailure):
    """The caller's input array changed during the call."""

    def __init__(self, message: str, *, buffer: str, index: tuple):
        super().__init__(message)
        self.buffer = buffer
        self.index = index


class Disagreement(CheckFailure):
    """Two runs (``nondeterministic``) or two configurations (``mask-dependent``) disagree."""

    def __init__(self, message: str, *, status: str, first: tuple, second: tuple):
        super().__init__(message)
        self.status = status
        self.first = first  # (label, tuple of output arrays)
        self.second = second


class StateChanged(CheckFailure):
    """The call left process-wide state changed (rounding mode, FTZ/DAZ, a signal handler, threads)."""

    def __init__(self, message: str, *, changed: list):
        super().__init__(message)
        self.changed = list(changed)


def watched_call(d: KernelDescriptor, case: Case, backend) -> tuple:
    """``d.call(case, backend)``, raising :class:`StateChanged` if it changed process-wide state
    (which is then put back, so nothing after it runs under the port's settings)."""
    if not process_state.watching():
        return d.call(case, backend)
    before = process_state.snapshot()
    try:
        outputs = d.call(case, backend)
    except BaseException:
        process_state.restore(before)
        raise
    after = process_state.settle(before, process_state.snapshot())
    changed = process_state.changes(before, after)
    if changed:
        process_state.restore(before)
        raise StateChanged("the call changed process-wide state and left it changed: " + "; ".join(changed)
                           + " (a library must put back what it changes; xloss restored it for the rest of the "
                           "check)", changed=changed)
    return outputs


def copy_case(case: Case) -> Case:
    kw = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in case.kwargs.items()}
    return Case(case.kernel, case.mode, case.dtype, kw, case.label)


def first_difference(before: np.ndarray, after: np.ndarray) -> tuple[tuple, int] | None:
    """(index of the first element whose bytes differ, how many differ), or None if none do."""
    if before.size == 0:
        return None
    a = np.ascontiguousarray(before).reshape(-1).view(np.uint8)
    b = np.ascontiguousarray(after).reshape(-1).view(np.uint8)
    if np.array_equal(a, b):  # the common case, one pass
        return None
    changed = (a.reshape(before.size, -1) != b.reshape(after.size, -1)).any(axis=1)
    if not changed.any():
        return None
    at = np.unravel_index(int(np.argmax(changed)), before.shape)
    return tuple(int(i) for i in at), int(changed.sum())


def _value(a: np.ndarray, index: tuple) -> str:
    v = a[index]
    return str(int(v)) if np.issubdtype(a.dtype, np.integer) or a.dtype == bool else repr(float(v))


def _digests(case: Case) -> dict:
    return {k: zlib.crc32(np.ascontiguousarray(v).reshape(-1).view(np.uint8))
            for k, v in case.kwargs.items() if isinstance(v, np.ndarray)}


def _call_large(d: KernelDescriptor, case: Case, backend) -> tuple:
    """A large case is called on its own arrays (copying hundreds of MiB costs more than the call)
    and checked by checksum; on a change the snapshot is rebuilt from the ladder to find it."""
    from .large import build

    before = case.__dict__.setdefault("_digests", _digests(case))
    outputs = watched_call(d, case, backend)
    changed = [k for k, v in _digests(case).items() if v != before[k]]
    if changed:
        pristine = build(case.kernel, case.dtype, case.mode, case.ladder["rung"], case.ladder["seed"],
                         backend.capabilities().get(case.kernel))
        work, case.kwargs = case.kwargs, pristine.kwargs  # the case is the snapshot again
        _raise_if_written(case, work)
    return tuple(np.asarray(o) for o in outputs)  # fresh arrays of the API: no copy of hundreds of MiB


def call_checked(d: KernelDescriptor, case: Case, backend) -> tuple:
    """Call ``backend`` on a copy of ``case``; raise :class:`InputWritten` if it changed an input.
    Exceptions of the backend (a :class:`PortViolation` included) propagate."""
    if case.ladder is not None:
        return _call_large(d, case, backend)
    work = copy_case(case)
    outputs = watched_call(d, work, backend)
    _raise_if_written(case, work.kwargs)
    return tuple(np.array(o, copy=True) for o in outputs)


def _raise_if_written(case: Case, work: dict):
    for name, before in case.kwargs.items():
        if isinstance(before, np.ndarray):
            diff = first_difference(before, work[name])
            if diff is not None:
                at, changed = diff
                raise InputWritten(
                    f"wrote into input `{name}`: element {list(at)} was {_value(before, at)}, is "
                    f"{_value(work[name], at)} after the call ({changed} of {before.size} elements changed)",
                    buffer=name, index=at)


def bias(name: str, actual, oracle, allowed, dtype: str) -> Comparison | None:
    """The mean signed error of a 16-bit output over its well-conditioned elements (those whose
    allowance is within 0.6 ulp, i.e. almost all of it is the final rounding) with distinct exact
    values, toward larger magnitude, in ulps. None where too few elements qualify or the dtype is
    not 16-bit."""
    if dtype not in ("float16", "bfloat16"):
        return None
    o = np.asarray(oracle, dtype=np.float64).reshape(-1)
    if o.size < BIAS_MIN_ELEMENTS:
        return None
    step = -(-o.size // BIAS_SAMPLE)  # a strided sample of a large output is plenty for a mean
    o = o[::step]
    a = np.asarray(actual).reshape(-1)[::step].astype(np.float64)
    t = np.broadcast_to(np.asarray(allowed, dtype=np.float64), np.shape(oracle)).reshape(-1)[::step]
    with np.errstate(invalid="ignore", over="ignore"):
        u = xdt.ulp(o, dtype)
        use = np.isfinite(o) & np.isfinite(a) & (np.abs(o) >= xdt.tiny(dtype)) & (t <= 0.6 * u)
        use &= np.isfinite(o.astype(xdt.FLOAT_DTYPES[dtype]).astype(np.float64))  # no overflow to inf
    # one vote per distinct exact value (to 1/1024 ulp): a value repeated (saturated logits, the
    # mean of equal terms) rounds the same way every time, which is no bias
    _, first = np.unique(np.round(o[use] / u[use] * 1024) * u[use], return_index=True)
    n = int(first.size)
    if n < BIAS_MIN_ELEMENTS:
        return None
    a_u, o_u, u_u = a[use][first], o[use][first], u[use][first]
    signed = float(np.mean((a_u - o_u) * np.sign(o_u) / u_u))
    ok = abs(signed) <= BIAS_LIMIT_ULPS
    detail = "" if ok else (
        f"mean signed error {signed:+.2f} ulp over {n} distinct values (limit {BIAS_LIMIT_ULPS}): the results are "
        f"{'truncated toward zero' if signed < 0 else 'rounded away from zero'}, not rounded to nearest even")
    return Comparison(f"{name} (rounding bias)", ok, n, 0.0, 0.0, abs(signed), None, detail)


def expectations(d: KernelDescriptor, case: Case, caps) -> tuple[tuple, tuple]:
    """(oracle outputs, allowed errors) of ``case`` (a large case: from one period, see :mod:`.large`)."""
    if case.ladder is not None:
        from .large import expectations as periodic

        return periodic(d, case, caps)
    expected = d.oracle(case)
    return expected, d.allowed(case, expected, caps)


def judge(d: KernelDescriptor, case: Case, outputs: tuple, caps, expected=None) -> list[Comparison]:
    """Compare ``outputs`` with the oracle of ``case`` (the snapshot), plus the rounding-bias check.
    ``expected``: the ``(oracle, allowed)`` of :func:`expectations`, if already computed."""
    expected, allowed = expected or expectations(d, case, caps)
    reps, lead = (1, 0)
    if case.ladder is not None:
        from .large import compare_repeated, repetitions

        reps, lead = repetitions(case)
    out = []
    for n, a, e, t in zip(d.output_names(case.mode), outputs, expected, allowed):
        if reps > 1 and np.ndim(e) and np.shape(e)[0] == lead and np.shape(a) == np.shape(e):
            out.append(compare_repeated(n, a, e, t, case.dtype, reps))
        else:
            out.append(compare(n, a, e, t, case.dtype))
        b = bias(n, a, e, t, case.dtype)
        if b is not None:
            out.append(b)
    if d.statistics is not None and case.ladder is None:  # kernel-specific checks over all elements
        out.extend(d.statistics(case, outputs, expected, caps))
    return out


def check_case(d: KernelDescriptor, case: Case, backend, caps=None, expected=None):
    """Run ``case`` on ``backend`` (see :func:`call_checked`) and judge it; raise :class:`Mismatch`
    if an output is outside tolerance. Returns ``(outputs, comparisons, allowed)``."""
    abi_log.begin()
    try:
        outputs = call_checked(d, case, backend)
    except Exception as exc:
        exc.abi_calls = abi_log.taken()  # what the library received: the report shows it
        raise
    calls = abi_log.taken()
    caps = backend.capabilities().get(case.kernel) if caps is None else caps
    expected = expected or expectations(d, case, caps)
    comparisons = judge(d, case, outputs, caps, expected)
    bad = [c for c in comparisons if not c.ok]
    if bad:
        exc = Mismatch("; ".join(f"{c.name}: {c.detail}" for c in bad), comparisons)
        exc.abi_calls = calls
        raise exc
    return outputs, comparisons, expected[1]


def describe_failure(exc: BaseException, kernel: str) -> str:
    """One readable line for a failing run (no internal class names)."""
    if isinstance(exc, PortViolation):
        where = f" at byte offset {exc.offset}" if exc.offset is not None else ""
        size = f" ({exc.nbytes} bytes)" if exc.nbytes is not None else ""
        return f"{exc.kind} in `{exc.buffer}`{where}{size} by {kernel}: {exc}"
    if isinstance(exc, CheckFailure):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
