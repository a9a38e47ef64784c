"""Descriptor of the BCE forward (no modes; variant: weight).

Tolerance: a handful of roundings per element (the logs, the products, the weight), relative to the
terms ``|w y log x|`` and ``|w (1-y) log(1-x)|``; a reduction adds a careful float accumulation's
log2(n) roundings of the running sum.
"""

from __future__ import annotations

import math

import numpy as np

from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance
from xloss.conformance.shrink import elementwise
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64
from xloss.reference import bce as ref_bce

from . import FORWARD, api


def _kwargs(x, y, dtype, *, reduction, weight=None):
    kw = dict(x=V.cast(x, dtype), y=V.cast(y, dtype), reduction=reduction)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    return kw


def draw_case(draw, dtype, mode, caps) -> Case:
    shape, x, y, reduction, weight = V.draw_elementwise(draw, V.PROB_DISTS, caps)
    return Case(FORWARD.name, mode, dtype, _kwargs(x, y, dtype, reduction=reduction, weight=weight))


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    cases = []

    def add(label, x, y, **kw):
        cases.append(Case(FORWARD.name, mode, dtype,
                          _kwargs(np.asarray(x, float), np.asarray(y, float), dtype, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"empty, {red}", np.zeros(0), np.zeros(0), reduction=red)
        add(f"0-d, {red}", np.asarray(0.3), np.asarray(1.0), reduction=red)
        add(f"probability 0 and 1 against the wrong target (log clamped at -100), {red}", [0.0, 1.0], [1.0, 0.0],
            reduction=red)
        add(f"probability 0 and 1 against the right target, {red}", [0.0, 1.0], [0.0, 1.0], reduction=red,
            weight=np.array([2.0, 3.0]))
    probs = np.array([0.0, 1.0, 1e-30, 1e-12, 1e-9, 1e-7, 0.5, 1 - 1e-7, 1 - 2.0**-24, 1e-300])
    for y0 in (0.0, 1.0, 0.5):
        add(f"probabilities at and near 0 and 1, y={y0}", probs, np.full(probs.shape, y0), reduction="none")
    rng = np.random.default_rng(7)
    for n in (4097, 65537):
        for red in ("none", "mean", "sum"):
            add(f"odd size {n}, {red}", rng.uniform(0, 1, n), (rng.random(n) > 0.5).astype(float), reduction=red,
                weight=rng.uniform(0, 2, n))
    x = rng.uniform(0, 1, (31, 9))
    add("row weight (N, 1)", x, rng.uniform(0, 1, x.shape), reduction="mean", weight=rng.uniform(0, 2, (31, 1)))
    add("column weight (C,)", x, rng.uniform(0, 1, x.shape), reduction="none", weight=rng.uniform(0, 2, 9))
    add("one weight for all (1, 1)", x, rng.uniform(0, 1, x.shape), reduction="sum", weight=np.array([[0.5]]))
    return cases


def error_cases() -> list[ErrorCase]:
    x = np.linspace(0.1, 0.9, 5, dtype=np.float32)
    y = np.array([0, 1, 0, 1, 1], np.float32)
    base = dict(x=x, y=y)
    errs = [
        ("x of integer dtype", dict(x=np.arange(5), y=y), XLossTypeError, r"x must have a floating dtype"),
        ("x above 1", dict(base, x=np.array([0.5, 1.5, 0.2, 0.1, 0.0], np.float32)), XLossValueError,
         r"x must lie in \[0, 1\] .*; x\[1\] = 1.5"),
        ("x negative", dict(base, x=np.array([0.5, 0.5, -0.25, 0.1, 0.0], np.float32)), XLossValueError,
         r"x must lie in \[0, 1\]"),
        ("y shape mismatch", dict(x=x, y=y[:3]), XLossValueError, r"y must have shape \(5,\); got \(3,\)"),
        ("bad reduction", dict(base, reduction="total"), XLossValueError, r"reduction must be one of"),
        ("weight not broadcastable", dict(base, weight=np.ones(3, np.float32)), XLossValueError,
         r"weight of shape \(3,\) does not broadcast to \(5,\)"),
    ]
    out = [ErrorCase(FORWARD.name, kw, exc, match, label) for label, kw, exc, match in errs]
    out.append(ErrorCase(FORWARD.name, dict(base, out=np.full(5, 7.0, np.float32)), XLossValueError,
                         r"out must have shape \(\)", "out of x's shape for mean", "out"))
    out.append(ErrorCase(FORWARD.name, dict(base, reduction="none", out=np.full(5, 7.0, np.float16)),
                         XLossTypeError, r"out must have dtype float32", "out of wrong dtype", "out"))
    out.append(ErrorCase(FORWARD.name, dict(base, x=np.array([0.5, 2.0, 0.2, 0.1, 0.0], np.float32),
                                            reduction="none", out=np.full(5, 7.0, np.float32)),
                         XLossValueError, r"x must lie in \[0, 1\]", "x out of range with out", "out"))
    return out


def call(case: Case, backend):
    return (np.asarray(api.binary_cross_entropy(**case.kwargs, backend=backend)),)


def oracle(case: Case):
    kw = dict(case.kwargs)
    return (ref_bce.binary_cross_entropy(kw.pop("x"), kw.pop("y"), **kw),)


def allowed(case: Case, expected, caps=None):
    kw = case.kwargs
    x, y = as_f64(kw["x"]), as_f64(kw["y"])
    with np.errstate(divide="ignore"):
        lx = np.maximum(np.log(x), -100.0)
        l1 = np.maximum(np.log1p(-x), -100.0)
    w = np.abs(as_f64(kw["weight"])) if "weight" in kw else 1.0
    with np.errstate(invalid="ignore"):
        scale = np.broadcast_to((np.abs(y * lx) + np.abs((1.0 - y) * l1)) * w, x.shape)
    scale = np.where(np.isfinite(scale), scale, 0.0)
    if kw["reduction"] == "none":
        return (allowance(expected[0], scale, case.dtype),)
    n = scale.size
    total = (1.0 + math.log2(n + 1)) * float(scale.sum())
    if kw["reduction"] == "mean" and n:
        total /= n
    return (allowance(expected[0], total, case.dtype),)


def _large_period(rng, n, dtype, mode, reduction, grad, caps) -> dict:
    """One period of an elementwise rung: probabilities with a few at and near 0 and 1, binary targets."""
    x = rng.uniform(0.0, 1.0, n)
    k = n // 4096
    x[rng.integers(0, n, k)] = rng.choice(np.array([0.0, 1.0, 1e-12, 1e-7, 1 - 1e-7]), k)
    return _kwargs(x, (rng.random(n) < 0.5).astype(np.float64), dtype, reduction=reduction,
                   weight=rng.uniform(0.0, 2.0, n) if reduction == "sum" else None)


SHRINKING = elementwise("x", ("x", "y", "weight"), "")
LADDER = large.elementwise_ladder(FORWARD.name, _large_period)

DESCRIPTOR = KernelDescriptor(spec=FORWARD, draw_case=draw_case, edge_cases=edge_cases, error_cases=error_cases,
                              call=call, oracle=oracle, allowed=allowed, output_names=lambda mode: ("loss",),
                              shrinking=SHRINKING, ladder=LADDER)
