"""Running the suite against one backend: per target statistics, shrunk failures, undeclared probes.

A *target* is one (kernel, dtype, mode). Every target of the universe (all kernels × all float
dtypes × all modes) gets a status:

* declared by the backend: run the edge cases (also under each of ``backend.configurations()``)
  and ``max_examples`` hypothesis examples → ``pass`` or ``fail`` (with the shrunk failing
  input), ``mask-dependent`` (configurations disagree); where the declaration names the range its
  vendor kernel is good for (``KernelCaps.vendor_range``), the cases with an input outside it are
  run and tallied apart, and a target passing every case inside it but failing some outside is
  ``pass in the vendor's range`` (not a failure; reported on its own line); then, as its own group ``large``, the
  ladder of large cases (:mod:`.large`), each repeated (``nondeterministic`` if runs disagree)
  and run under every configuration;
* not declared: probe it with the capability check switched off (a few examples) →
  ``not implemented`` (the library lacks the symbol), ``refused`` (it rejects the request),
  ``fail`` ("works but undeclared": the declaration is incomplete), or ``wrong if forced``
  (it runs but disagrees with the oracle, which is why it is not declared).

Every run goes through the backend's checked mode and :func:`.execute.call_checked`: a write
out of bounds or into an input is a ``fail`` naming the buffer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed
from hypothesis import strategies as st

from ..backend import Backend, KernelCaps
from ..dtypes import FLOAT_DTYPES
from ..errors import BackendUnavailableError, PortViolation
from . import DESCRIPTORS, large, process_state, supports
from .casefile import case_to_json, outputs_to_json
from .configs import (
    MASK_DEPENDENT,
    NONDETERMINISTIC,
    REPEATS,
    across_configurations,
    checked_configurations,
    repeat_runs,
)
from .descriptor import Case
from .draws import seed_only
from .execute import (
    CheckFailure,
    Disagreement,
    InputWritten,
    Mismatch,
    StateChanged,
    call_checked,
    check_case,
    describe_failure,
)
from .shrink import minimise

PASS, FAIL, NOT_IMPLEMENTED, REFUSED, WRONG_IF_FORCED, CRASH, HANG = (
    "pass", "fail", "not implemented", "refused", "wrong if forced", "crash", "hang")
#: every case inside the backend's declared vendor range passes, some outside it fail (KernelCaps.vendor_range)
PASS_IN_VENDOR_RANGE = "pass in the vendor's range"
FAILING = (FAIL, CRASH, HANG, NONDETERMINISTIC, MASK_DEPENDENT)
#: the leak measurement repeats the largest passing case of at most this many elements
LEAK_CASE_ELEMENTS = 1 << 16
PROBE_EXAMPLES = 8
DRAWN, LARGE = "drawn", "large"


@dataclass
class TargetResult:
    kernel: str
    dtype: str
    mode: Any
    declared: bool
    status: str = PASS
    examples: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    message: str = ""
    case: dict | None = None  # JSON of the (shrunk) failing input, as it was before the call
    seconds: float = 0.0
    found_at: int | None = None  # 1-based index of the first failing example (edge cases count first)
    group: str = DRAWN  # "drawn" (edge and hypothesis cases) or "large" (the ladder)
    max_ratio: float = 0.0  # the worst |error| / allowed error over every output element
    tolerance: float = 0.0  # the allowed error at that element
    outputs: dict | None = None  # the two disagreeing outputs (nondeterministic, mask-dependent)
    # cases with an input outside the declared vendor range: {"range", "cases", "failed", "first"}
    outside_vendor_range: dict | None = None
    warnings: list = field(default_factory=list)  # findings that do not fail the target (a memory leak)
    abi_calls: list = field(default_factory=list)  # the failing case as the vendor-ABI call(s) the library received

    def to_json(self) -> dict:
        return asdict(self)


class _Unchecked(Backend):
    """Runs a backend's kernels without its capability check, to probe undeclared targets."""

    def __init__(self, inner: Backend):
        super().__init__(name=inner.name)
        self.inner = inner

    def capabilities(self):
        return {k: KernelCaps.declare(k, dtypes=tuple(FLOAT_DTYPES)) for k in DESCRIPTORS}

    def run(self, args):
        kernel = args.request().kernel
        fn = self.inner.kernel(kernel)  # the backend's own lookup (a backend may keep a table, not methods)
        if fn is None:
            raise BackendUnavailableError(f"backend {self.inner.name!r} has no implementation of {kernel}")
        fn(args)


@dataclass
class _Stats:
    examples: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    max_ratio: float = 0.0
    tolerance: float = 0.0

    def add(self, comparisons):
        for c in comparisons:
            if c.name.endswith(")"):  # a statistic over the output ("(rounding bias)", "(error scale)"), not an error
                continue
            self.max_abs = max(self.max_abs, c.max_abs)
            self.max_rel = max(self.max_rel, c.max_rel)
            self.max_ulp = max(self.max_ulp, c.max_ulp)
            if c.n and (c.ratio > self.max_ratio or not self.tolerance):
                self.max_ratio, self.tolerance = max(c.ratio, self.max_ratio), c.tolerance

    def store(self, res: TargetResult):
        res.examples, res.max_abs, res.max_rel, res.max_ulp = self.examples, self.max_abs, self.max_rel, self.max_ulp
        res.max_ratio, res.tolerance = self.max_ratio, self.tolerance


def _size(case: Case) -> int:
    return sum(v.size for v in case.kwargs.values() if hasattr(v, "size"))


def universe():
    """Every (kernel, dtype, mode) the suite knows."""
    return [(k, dt, m) for k, d in DESCRIPTORS.items() for dt in FLOAT_DTYPES for m in d.modes()]


def declared_caps(backend: Backend, kernel: str, dtype: str, mode) -> KernelCaps | None:
    caps = backend.capabilities().get(kernel)
    if caps is None or dtype not in caps.dtypes:
        return None
    primary = DESCRIPTORS[kernel].spec.primary
    if primary is not None and mode not in caps.variants[primary]:
        return None
    return caps


def probe_caps(backend: Backend, kernel: str, dtype: str) -> KernelCaps:
    """What an undeclared target is probed with: every variant, except within the axes the kernel's
    descriptor keeps (``probe_keeps``: a backend declaring focal loss for binary targets only is
    probed with binary targets, as its ABI cannot take others)."""
    declared = backend.capabilities().get(kernel)
    restricted = {}
    for axis in DESCRIPTORS[kernel].probe_keeps:
        if declared is not None and axis in declared.variants:
            restricted[axis] = tuple(declared.variants[axis])
    return KernelCaps.declare(kernel, dtypes=(dtype,), **restricted)


def main_label(backend: Backend) -> str:
    return ", ".join(f"{k}={v}" for k, v in backend.options.items()) or "default options"


def outside_vendor_range(caps: KernelCaps | None, case: Case) -> bool:
    """Whether an input of ``case`` lies outside the range ``caps`` declares for the vendor's kernel
    (non-finite values count as outside)."""
    for name, (lo, hi) in (caps.vendor_range if caps is not None else {}).items():
        v = case.kwargs.get(name)
        if v is None:
            continue
        v = np.asarray(v, dtype=np.float64)
        if v.size and not np.all((v >= lo) & (v <= hi)):
            return True
    return False


def clipped_to_vendor_range(caps: KernelCaps, case: Case) -> Case:
    """``case`` with its inputs clipped into the declared vendor range (NaN to its middle), so the
    range itself is tested as densely as the whole line would be."""
    kwargs = dict(case.kwargs)
    for name, (lo, hi) in caps.vendor_range.items():
        v = kwargs.get(name)
        if isinstance(v, np.ndarray) and v.size:
            c = np.clip(np.nan_to_num(v.astype(np.float64), nan=(lo + hi) / 2, posinf=hi, neginf=lo), lo, hi)
            kwargs[name] = np.asarray(c, dtype=v.dtype).reshape(v.shape)
    label = f"{case.label}, clipped to the vendor's range" if case.label else "clipped to the vendor's range"
    return dataclasses.replace(case, kwargs=kwargs, label=label)


class _OutsideRange:
    """Tally of the cases outside the declared vendor range: run, but never the target's failure."""

    def __init__(self, caps: KernelCaps | None, kernel: str):
        self.caps, self.kernel = caps, kernel
        self.cases = self.failed = 0
        self.first = ""

    def run(self, case: Case, attempt) -> None:
        self.cases += 1
        try:
            attempt(case, False)
        except Exception as exc:
            self.failed += 1
            if not self.first:
                self.first = describe_failure(exc, self.kernel) + (f" [case: {case.label}]" if case.label else "")

    def store(self, res: TargetResult) -> None:
        if not self.cases:
            return
        span = "; ".join(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in self.caps.vendor_range.items())
        res.outside_vendor_range = dict(range=span, cases=self.cases, failed=self.failed, first=self.first)
        if res.status == PASS and self.failed:
            res.status = PASS_IN_VENDOR_RANGE
            res.message = (f"passes within the vendor's range ({span}), fails outside it: {self.failed} of "
                           f"{self.cases} cases with an input outside that range fail, as the vendor kernel's own "
                           f"numerics do (first: {self.first})")


def _classify(res: TargetResult, case: Case, exc: BaseException):
    res.message = describe_failure(exc, res.kernel)
    if case.label:
        res.message += f" [case: {case.label}]"
    res.case = case_to_json(case)
    res.abi_calls = list(getattr(exc, "abi_calls", None) or [])
    if isinstance(exc, Disagreement):
        res.status = exc.status
        res.outputs = outputs_to_json(DESCRIPTORS[res.kernel].output_names(case.mode), exc.first, exc.second)
    elif res.declared:
        res.status = FAIL
    elif isinstance(exc, BackendUnavailableError):
        res.status, res.case = NOT_IMPLEMENTED, None
    elif isinstance(exc, (CheckFailure, PortViolation)):
        res.status = WRONG_IF_FORCED
    else:  # XLossError from the adapter, a vendor status, or the library refusing otherwise
        res.status, res.case = REFUSED, None


def run_target(backend: Backend, kernel: str, dtype: str, mode, *, max_examples: int = 100, seed: int = 0,
               on_case: Callable[[Case], None] | None = None, configurations: bool = True,
               shrink: bool = True, leaks: bool = True) -> TargetResult:
    """Test one target of ``backend`` on edge and drawn cases; see the module docstring for the statuses.

    ``shrink=False`` reports the first failure as found (no property search after a failing edge
    case, no shrinking): enough to know *that* a target fails, at a fraction of the cost.
    ``leaks=False`` leaves out the leak measurement (its call count follows this process's memory,
    which an on-target recording and its playback cannot repeat)."""
    d = DESCRIPTORS[kernel]
    caps = declared_caps(backend, kernel, dtype, mode)
    declared = caps is not None
    runner = backend.checked() if declared else _Unchecked(backend.checked())
    configs = checked_configurations(backend) if declared and configurations else []
    if not declared:
        caps = probe_caps(backend, kernel, dtype)
        max_examples = min(max_examples, PROBE_EXAMPLES)
    res = TargetResult(kernel, dtype, mode, declared)
    stats = _Stats()
    start = time.perf_counter()
    outside = _OutsideRange(caps if declared else None, kernel)
    leak_case = []  # the largest passing case of at most LEAK_CASE_ELEMENTS elements

    def attempt(case: Case, count: bool = True):
        if on_case is not None:
            on_case(case)
        if count:
            stats.examples += 1
        try:
            outputs, comparisons, allowed = check_case(d, case, runner, caps)
            if count:
                stats.add(comparisons)
            size = _size(case)
            if size <= LEAK_CASE_ELEMENTS and (not leak_case or size > _size(leak_case[0])):
                leak_case[:] = [case]
            return outputs, allowed
        except Exception:
            if count and res.found_at is None:
                res.found_at = stats.examples
            raise

    failure = None  # (case, exception) to report
    for case in d.edge_cases(dtype, mode, caps):
        if supports(caps, case) and outside_vendor_range(outside.caps, case):
            outside.run(case, attempt)
            case = clipped_to_vendor_range(caps, case)
        if supports(caps, case):
            try:
                outputs, allowed = attempt(case)
                if configs:
                    across_configurations(d, case, configs, outputs, allowed, backend.deterministic,
                                          main_label(backend))
            except Exception as exc:
                failure = (case, exc)
                if res.found_at is None:
                    res.found_at = stats.examples
                break
    # The property search runs even after a failing edge case: it usually finds a smaller input
    # showing the same bug. A refusal or a disagreement needs no smaller example.
    if max_examples > 0 and (failure is None or (shrink and isinstance(failure[1], Mismatch))):
        last = {}
        phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)

        @settings(max_examples=max_examples, deadline=None, database=None, report_multiple_bugs=False,
                  suppress_health_check=list(HealthCheck), print_blob=False, phases=phases)
        @hyp_seed(seed)
        @given(st.data())
        def prop(data):
            case = data.draw(d.strategy(dtype, mode, caps))
            if outside_vendor_range(outside.caps, case):
                outside.run(case, attempt)
                case = clipped_to_vendor_range(caps, case)
            try:
                attempt(case)
            except Exception as exc:  # the last one recorded is hypothesis's final, shrunk replay
                last.update(case=case, exc=exc)
                raise

        try:
            with seed_only():
                prop()
        except Exception:
            if "case" in last and (failure is None or _size(last["case"]) < _size(failure[0])):
                failure = (last["case"], last["exc"])

    if shrink and failure is not None and isinstance(failure[1], (Mismatch, InputWritten, PortViolation)):
        failure = minimise(failure, attempt)
    if failure is not None:
        _classify(res, *failure)
        if declared and not isinstance(failure[1], Disagreement):
            res.message += _matching_reading(backend, d, failure[0], caps, d.edge_cases(dtype, mode, caps))
    elif not declared:
        res.status = FAIL
        res.message = "works but is not declared: the backend's capability declaration is incomplete"
    outside.store(res)
    if leaks and declared and leak_case and not isinstance(failure and failure[1], StateChanged):
        res.warnings.extend(_leak_warnings(d, leak_case[0], runner, on_case))
    stats.store(res)
    if failure is not None:
        _failing_example(res, failure[1])
    res.seconds = time.perf_counter() - start
    return res


def _leak_warnings(d, case: Case, runner: Backend, on_case) -> list[str]:
    """The memory leak warning for ``case`` repeated (see :func:`.process_state.bytes_per_call`), if any."""
    if on_case is not None:
        on_case(case)
    try:
        per_call = process_state.bytes_per_call(lambda: call_checked(d, case, runner))
    except Exception:  # the case passed once; a later failure is not this measurement's to report
        return []
    warning = process_state.leak_warning(per_call)
    return [f"{warning} [case: {case.label or 'drawn'}, {_size(case)} elements]"] if warning else []


def _matching_reading(backend: Backend, d, case: Case, caps, edge_cases) -> str:
    """Where the vendor's page can be read another way (:meth:`Backend.readings`): the reading under
    which the failing case and every edge case pass, and the option that selects it ('' if none)."""
    for what, option, other in backend.readings(d.name):
        runner = other.checked()
        try:
            for c in [case, *(e for e in edge_cases if supports(caps, e))]:
                check_case(d, c, runner, caps)
        except Exception:
            continue
        return f"; the library's results match another reading of the vendor's page, {what}: pass {option}"
    return ""


def _failing_example(res: TargetResult, exc: BaseException):
    """A FAIL row shows the errors of the failing example (the statistics gather only the passing
    ones, whose err/tol is below 1 by definition)."""
    if not isinstance(exc, Mismatch):
        return
    failing = _Stats()
    failing.add(exc.comparisons)
    if not failing.tolerance and not failing.max_ratio:
        return
    res.max_abs, res.max_rel = max(res.max_abs, failing.max_abs), max(res.max_rel, failing.max_rel)
    res.max_ulp = max(res.max_ulp, failing.max_ulp)
    res.max_ratio, res.tolerance = failing.max_ratio, failing.tolerance


def run_large(backend: Backend, kernel: str, dtype: str, mode, *, seed: int = 0, repeats: int = REPEATS,
              on_case: Callable[[Case], None] | None = None, configurations: bool = True) -> TargetResult | None:
    """The ladder of large cases of a declared target (group ``large``); None if none applies."""
    d = DESCRIPTORS[kernel]
    caps = declared_caps(backend, kernel, dtype, mode)
    if caps is None:
        return None
    runner = backend.checked()
    configs = checked_configurations(backend) if configurations else []
    res = TargetResult(kernel, dtype, mode, True, group=LARGE)
    stats = _Stats()
    failure = None
    start = time.perf_counter()
    outside = _OutsideRange(caps, kernel)
    for rung, case in large.cases(kernel, dtype, mode, seed, caps):
        if not supports(caps, case):
            continue
        if outside_vendor_range(caps, case):
            outside.run(case, lambda c, _count: check_case(d, c, runner, caps))
            case = clipped_to_vendor_range(caps, case)
        if on_case is not None:
            on_case(case)
        stats.examples += 1
        try:
            outputs, comparisons, allowed = check_case(d, case, runner, caps)
            stats.add(comparisons)
            if not large.agrees(kernel, rung):
                continue
            repeat_runs(d, case, runner, outputs, allowed, repeats)
            if configs:
                across_configurations(d, case, configs, outputs, allowed, backend.deterministic,
                                      main_label(backend))
        except Exception as exc:
            res.found_at = stats.examples
            _classify(res, case, exc)
            failure = exc
            break
    if not stats.examples and not outside.cases:
        return None
    outside.store(res)
    stats.store(res)
    if failure is not None:
        _failing_example(res, failure)
    res.seconds = time.perf_counter() - start
    return res


def run_suite(backend: Backend, *, kernels=None, max_examples: int = 100, seed: int = 0, on_case=None,
              on_result=None, targets=None, large_cases: bool = False, repeats: int = REPEATS,
              configurations: bool = True, shrink: bool = True, leaks: bool = True) -> list[TargetResult]:
    """Run every target (or the given ones, restricted to ``kernels``) in this process: the drawn
    group of every target, then (``large_cases``, as ``xloss check`` does) the large group of every
    declared one. ``shrink``, ``leaks``: see :func:`run_target`."""
    out = []
    chosen = [t for t in (targets or universe()) if not kernels or t[0] in kernels]
    for kernel, dtype, mode in chosen:
        r = run_target(backend, kernel, dtype, mode, max_examples=max_examples, seed=seed, on_case=on_case,
                       configurations=configurations, shrink=shrink, leaks=leaks)
        out.append(r)
        if on_result is not None:
            on_result(r)
    if large_cases:
        for kernel, dtype, mode in chosen:
            r = run_large(backend, kernel, dtype, mode, seed=seed, repeats=repeats, on_case=on_case,
                          configurations=configurations)
            if r is not None:
                out.append(r)
                if on_result is not None:
                    on_result(r)
    return out
