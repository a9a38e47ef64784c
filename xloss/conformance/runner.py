"""Running the suite against one backend: per target statistics, shrunk failures, undeclared probes.

A *target* is one (kernel, dtype, mode). Every target of the universe (all kernels × all float
dtypes × all modes) gets a status:

* declared by the backend: run the edge cases and ``max_examples`` hypothesis examples →
  ``pass`` or ``fail`` (with the shrunk failing input);
* not declared: probe it with the capability check switched off (a few examples) →
  ``not implemented`` (the library lacks the symbol), ``refused`` (it rejects the request),
  ``fail`` ("works but undeclared": the declaration is incomplete), or ``wrong if forced``
  (it runs but disagrees with the oracle, which is why it is not declared).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hyp_seed
from hypothesis import strategies as st

from ..backend import Backend, KernelCaps
from ..dtypes import FLOAT_DTYPES
from ..errors import BackendUnavailableError
from . import DESCRIPTORS, supports
from .casefile import case_to_json
from .descriptor import Case

PASS, FAIL, NOT_IMPLEMENTED, REFUSED, WRONG_IF_FORCED, CRASH = (
    "pass", "fail", "not implemented", "refused", "wrong if forced", "crash")
FAILING = (FAIL, CRASH)
PROBE_EXAMPLES = 8


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
    case: dict | None = None  # JSON of the (shrunk) failing input
    seconds: float = 0.0
    found_at: int | None = None  # 1-based index of the first failing example (edge cases count first)

    def to_json(self) -> dict:
        return asdict(self)


class _Mismatch(AssertionError):
    pass


class _Unchecked(Backend):
    """Runs a backend's kernels without its capability check, to probe undeclared targets."""

    def __init__(self, inner: Backend):
        super().__init__(name=inner.name)
        self.inner = inner

    def capabilities(self):
        return {k: KernelCaps.declare(k, dtypes=tuple(FLOAT_DTYPES)) for k in DESCRIPTORS}

    def run(self, args):
        getattr(self.inner, args.request().kernel)(args)


@dataclass
class _Stats:
    examples: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0

    def add(self, comparisons):
        for c in comparisons:
            self.max_abs = max(self.max_abs, c.max_abs)
            self.max_rel = max(self.max_rel, c.max_rel)
            self.max_ulp = max(self.max_ulp, c.max_ulp)


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


def run_target(backend: Backend, kernel: str, dtype: str, mode, *, max_examples: int = 100, seed: int = 0,
               on_case: Callable[[Case], None] | None = None) -> TargetResult:
    """Test one target of ``backend``; see the module docstring for the statuses."""
    d = DESCRIPTORS[kernel]
    caps = declared_caps(backend, kernel, dtype, mode)
    declared = caps is not None
    runner = backend if declared else _Unchecked(backend)
    if not declared:
        caps = KernelCaps.declare(kernel, dtypes=(dtype,))
        max_examples = min(max_examples, PROBE_EXAMPLES)
    res = TargetResult(kernel, dtype, mode, declared)
    stats = _Stats()
    start = time.perf_counter()

    def run_one(case: Case):
        if on_case is not None:
            on_case(case)
        stats.examples += 1
        try:
            comparisons = d.check(case, runner)
            stats.add(comparisons)
            bad = [c for c in comparisons if not c.ok]
            if bad:
                raise _Mismatch("; ".join(f"{c.name}: {c.detail}" for c in bad))
        except Exception:
            if res.found_at is None:
                res.found_at = stats.examples
            raise

    failure = None  # (case, exception) to report
    for case in d.edge_cases(dtype, mode):
        if supports(caps, case):
            try:
                run_one(case)
            except Exception as exc:
                failure = (case, exc)
                break
    # The property search runs even after a failing edge case (which is not shrunk): it usually
    # finds a smaller input showing the same bug. A refusal needs no smaller example.
    if max_examples > 0 and (failure is None or isinstance(failure[1], _Mismatch)):
        last = {}

        @settings(max_examples=max_examples, deadline=None, database=None, report_multiple_bugs=False,
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @hyp_seed(seed)
        @given(st.data())
        def prop(data):
            case = data.draw(d.strategy(dtype, mode, caps))
            try:
                run_one(case)
            except Exception as exc:  # the last one recorded is hypothesis's final, shrunk replay
                last.update(case=case, exc=exc)
                raise

        try:
            prop()
        except Exception:
            if "case" in last and (failure is None or _size(last["case"]) < _size(failure[0])):
                failure = (last["case"], last["exc"])

    if failure is not None:
        case, exc = failure
        res.message = f"{type(exc).__name__}: {exc}"
        res.case = case_to_json(case)
        if declared:
            res.status = FAIL
        elif isinstance(exc, BackendUnavailableError):
            res.status, res.case = NOT_IMPLEMENTED, None
        elif isinstance(exc, _Mismatch):
            res.status = WRONG_IF_FORCED
        else:  # XLossError from the adapter, a vendor status, or the library refusing otherwise
            res.status, res.case = REFUSED, None
    elif not declared:
        res.status = FAIL
        res.message = "works but is not declared: the backend's capability declaration is incomplete"
    res.examples, res.max_abs, res.max_rel, res.max_ulp = stats.examples, stats.max_abs, stats.max_rel, stats.max_ulp
    res.seconds = time.perf_counter() - start
    return res


def run_suite(backend: Backend, *, kernels=None, max_examples: int = 100, seed: int = 0, on_case=None,
              on_result=None, targets=None) -> list[TargetResult]:
    """Run every target (or the given ones, restricted to ``kernels``) in this process."""
    out = []
    for kernel, dtype, mode in (targets or universe()):
        if kernels and kernel not in kernels:
            continue
        r = run_target(backend, kernel, dtype, mode, max_examples=max_examples, seed=seed, on_case=on_case)
        out.append(r)
        if on_result is not None:
            on_result(r)
    return out
