"""The kernel descriptor (one per kernel, OpInfo-style) and the comparison against the oracle.

A descriptor is the single source of truth for testing one kernel on any backend: it draws
inputs (hypothesis), lists fixed edge cases and error inputs, calls the public API, computes
the float64 oracle, and bounds the error a careful implementation in the input's dtype may
make. The repository's backend tests and ``xloss check`` are both generated from it.

Tolerance model. For each output element the allowed error is

    out_ulps * ulp_dtype(|oracle|)  +  k * eps_c * scale  +  floor

where ``out_ulps = 0.5`` of ``ulp_dtype``, the spacing of the output dtype, is the final
round-to-nearest every backend must do (truncation fails), ``eps_c`` the epsilon of the compute dtype
(float32, or float64 for float64
inputs; a kernel may substitute the storage dtype's epsilon where the vendor contract rounds
an intermediate to it, e.g. FLCE's G), ``scale`` the descriptor's magnitude of the terms
that a careful formulation combines (so cancellation a careful implementation cannot avoid
is allowed and nothing else), ``k`` a small slack (polynomial transcendental helpers,
a handful of roundings), and ``floor`` a tiny absolute allowance for intermediate underflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as xdt
from ..kernels import KernelSpec

# Slack constants (see module docstring).
K_SLACK = 16.0
OUT_ULPS = 0.5  # round-to-nearest: the final rounding to the output dtype


@dataclass
class Case:
    """One concrete call: keyword arguments for the public function plus what it exercises."""

    kernel: str
    mode: Any  # value of the kernel's primary axis (None if it has none)
    dtype: str
    kwargs: dict
    label: str = ""
    ladder: dict | None = None  # for a large case: {"rung": label, "seed": int}, from which it is rebuilt

    def describe(self, limit: int = 12) -> str:
        """A readable rendering (arrays abbreviated to ``limit`` elements)."""
        parts = []
        for k, v in self.kwargs.items():
            if isinstance(v, np.ndarray):
                flat = v.reshape(-1)
                vals = ", ".join(_fmt_value(e) for e in flat[:limit]) + (", ..." if flat.size > limit else "")
                parts.append(f"{k}=array(shape={v.shape}, dtype={xdt.float_name(v.dtype) or v.dtype}, [{vals}])")
            else:
                parts.append(f"{k}={_fmt_value(v) if isinstance(v, (float, np.floating)) else repr(v)}")
        head = f"{self.kernel}[mode={self.mode}, dtype={self.dtype}]"
        return head + (f" ({printable(self.label)})" if self.label else "") + "\n  " + "\n  ".join(parts)


def printable(text) -> str:
    """``text`` with every control or other non-printable character escaped (``\\x1b``): a label or
    path read from a case file never reaches the terminal raw."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _fmt_value(e) -> str:
    if isinstance(e, (np.bool_, bool)):
        return str(bool(e))
    if np.issubdtype(type(e), np.integer):
        return str(int(e))
    return repr(float(e))


@dataclass
class ErrorCase:
    """Arguments that must be refused with ``exc`` whose message matches ``match`` (a regex)."""

    function: str  # public xloss function name
    kwargs: dict
    exc: type
    match: str
    label: str
    out_arg: str | None = None  # if set, kwargs[out_arg] is a caller buffer that must stay untouched


@dataclass
class Comparison:
    """How one output compares with the oracle."""

    name: str
    ok: bool
    n: int
    max_abs: float
    max_rel: float
    max_ulp: float
    worst: tuple | None = None  # index of the worst element relative to its allowance
    detail: str = ""
    ratio: float = 0.0  # the worst |error| / allowance (> 1 fails; inf: a wrong special value)
    tolerance: float = 0.0  # the allowance at that element
    failing: tuple = ()  # flat indices of (up to 8) elements outside tolerance


def compare(name: str, actual, oracle, allowed, dtype: str) -> Comparison:
    """Check ``|actual - oracle| <= allowed`` elementwise, with IEEE specials matched exactly.

    Where the oracle is NaN the result must be NaN; where the oracle (or its rounding to the
    output dtype, i.e. overflow) is infinite the result must be the same infinity.
    """
    a = np.asarray(actual).astype(np.float64)
    o = np.asarray(oracle, dtype=np.float64)
    if a.shape != o.shape:
        return Comparison(name, False, o.size, math.inf, math.inf, math.inf, None,
                          f"shape {a.shape} != expected {o.shape}")
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), o.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.asarray(o).astype(xdt.FLOAT_DTYPES[dtype]).astype(np.float64)
    special = np.isnan(o) | np.isinf(rounded)
    finite = ~special
    bad_special = special & ~((np.isnan(o) & np.isnan(a)) | (np.isinf(rounded) & (a == rounded)))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # where() picks the finite branch
        err = np.where(finite, np.abs(a - o), 0.0)
        err = np.where(finite & np.isnan(a), np.inf, err)
        ulps = err / xdt.ulp(o, dtype)
        # relative error only where the oracle is a normal number of the dtype (underflow is not "100% off")
        rel = np.where(np.abs(o) >= xdt.tiny(dtype), err / np.abs(o), 0.0)
        ratio = np.where(finite, err / np.where(allowed > 0, allowed, np.finfo(float).tiny), 0.0)
    over = (finite & (err > allowed)) | bad_special
    ok = not over.any()
    worst = None
    detail = ""
    if o.size:
        idx = np.unravel_index(int(np.argmax(np.where(bad_special, np.inf, ratio))), o.shape) if o.ndim else ()
        worst = tuple(int(i) for i in idx)
        if not ok and bad_special[idx]:
            want = ("nan" if np.isnan(o[idx])
                    else f"{float(rounded[idx])} (the exact {float(o[idx])!r} overflows {dtype})")
            detail = (f"at index {list(worst)}: got {float(a[idx])!r}, expected {want}; "
                      f"{int(over.sum())} of {o.size} elements outside tolerance")
        elif not ok:
            detail = (f"at index {list(worst)}: got {float(a[idx])!r}, expected {float(o[idx])!r} "
                      f"(|error| {float(err[idx]):.3g}, allowed {float(allowed[idx]):.3g}); "
                      f"{int(over.sum())} of {o.size} elements outside tolerance")
    worst_ratio = tol = 0.0
    if o.size:
        worst_ratio = math.inf if bad_special[idx] else float(ratio[idx])
        tol = float(allowed[idx])
    failing = tuple(int(i) for i in np.flatnonzero(over)[:8])
    return Comparison(name, ok, int(o.size), float(err.max(initial=0.0)), float(rel.max(initial=0.0)),
                      float(ulps.max(initial=0.0)), worst, detail, worst_ratio, tol, failing)


def upstream_rounding(dx, dtype: str, caps, upstream=None) -> np.ndarray | float:
    """Half an ulp of ``dtype``, relative to the gradient, where the backend declares that the
    upstream gradient scale crosses its ABI in the storage dtype (``KernelCaps.upstream_in_dtype``).
    ``upstream``: the smallest magnitude that scale takes (|grad|, over n for a mean): below the
    dtype's smallest normal its spacing is fixed, and the relative rounding grows past eps/2."""
    if caps is None or not caps.upstream_in_dtype:
        return 0.0
    d = np.abs(np.asarray(dx, dtype=np.float64))
    rel = xdt.eps(dtype)
    if upstream is not None:
        u = np.abs(np.asarray(upstream, dtype=np.float64))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.maximum(rel, np.where(u > 0, xdt.ulp(u, dtype) / np.where(u > 0, u, 1.0), 0.0))
    return 0.5 * rel * np.where(np.isfinite(d), d, 0.0)


def underflow(dtype: str, *factors) -> np.ndarray | float:
    """The absolute error a product of ``factors`` (magnitudes, broadcastable) may carry when it is
    evaluated in the compute dtype in any order, with IEEE gradual underflow: each of the products
    formed on the way (a scale ``g/n`` or ``g*(1/n)`` included) may round to a subnormal or to zero,
    losing up to half the smallest subnormal, which the factors applied after it then multiply (at
    most the product of those above 1). Relative roundings are :func:`allowance`'s; this is the part
    that is not relative to the result (the tolerance contract of docs/porting.md)."""
    compute = xdt.compute_dtype(dtype)
    half_sub = 0.5 * float(np.finfo(compute).smallest_subnormal)
    big = 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        for f in factors:
            f = np.abs(np.asarray(f, dtype=np.float64))
            big = big * np.where(np.isfinite(f), np.maximum(f, 1.0), 1.0)
    return len(factors) * half_sub * big


def allowance(oracle, scale, dtype: str, *, eps_c: float | None = None, k: float = K_SLACK) -> np.ndarray:
    """The allowed error for ``oracle`` given the term magnitude ``scale`` (see module docstring)."""
    eps_c = xdt.eps(xdt.float_name(xdt.compute_dtype(dtype))) if eps_c is None else eps_c
    tiny = float(np.finfo(xdt.compute_dtype(dtype)).tiny)
    o = np.abs(np.asarray(oracle, dtype=np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        return OUT_ULPS * xdt.ulp(np.where(np.isfinite(o), o, 0.0), dtype) + k * eps_c * scale + k * tiny


@dataclass
class KernelDescriptor:
    """Everything needed to test one kernel. Concrete descriptors fill in the callables."""

    spec: KernelSpec
    draw_case: Callable  # (data_or_draw, dtype, mode, caps) -> Case      [hypothesis composite]
    edge_cases: Callable  # (dtype, mode, caps=None) -> list[Case] (caps: the declared variants, e.g. binary targets)
    error_cases: Callable  # () -> list[ErrorCase]
    call: Callable  # (case, backend) -> tuple of outputs
    oracle: Callable  # (case) -> tuple of float64 outputs
    allowed: Callable  # (case, oracle outputs, caps=None) -> tuple of allowed-error arrays
    output_names: Callable  # (mode) -> tuple of names
    #: the unit the last shrinking pass cuts a failing case by (a :class:`~.shrink.Shrinking`)
    shrinking: Any = None
    #: the sizes a real tiling sees (a :class:`~.large.Ladder`); None: no large rungs
    ladder: Any = None
    #: whole-output checks after the per-element ones, (case, outputs, expected, caps) -> comparisons
    #: (FLCE's error scale and G-rounding bias); not run on ladder cases
    statistics: Callable | None = None
    #: (case) -> elements the kernel forms that no array of the case holds (FLCE's BT x V logits):
    #: what a case's deadline scales with, beside its arrays
    implied_elements: Callable | None = None
    #: declared variant axes an undeclared target is still probed within (focal's binary-only
    #: targets: an ABI with one-hot integer targets cannot take soft ones)
    probe_keeps: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    def modes(self) -> Sequence:
        return self.spec.axes[self.spec.primary] if self.spec.primary else (None,)

    def strategy(self, dtype: str, mode, caps):
        """A hypothesis strategy of :class:`Case` restricted to what ``caps`` declares."""
        from hypothesis import strategies as st

        @st.composite
        def _cases(draw):
            return self.draw_case(draw, dtype, mode, caps)

        return _cases()

    def check(self, case: Case, backend) -> list[Comparison]:
        """Run ``case`` on ``backend`` and compare every output with the oracle."""
        actual = self.call(case, backend)
        expected = self.oracle(case)
        allowed = self.allowed(case, expected, backend.capabilities().get(case.kernel))
        names = self.output_names(case.mode)
        return [compare(n, a, e, t, case.dtype) for n, a, e, t in zip(names, actual, expected, allowed)]
