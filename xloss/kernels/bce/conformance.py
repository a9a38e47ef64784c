"""Descriptor of the binary-cross-entropy gradient (modes: the epsilon form, clamp or add)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from xloss import reference
from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance, underflow, upstream_rounding
from xloss.conformance.shrink import elementwise
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64

from . import ROW
from .api import bce_grad

EPS_CHOICES = (1e-12, 1e-7, 1e-3)


def _kwargs(x, y, dtype, *, reduction, eps_mode, eps=1e-12, weight=None, grad=1.0):
    kw = dict(x=V.cast(x, dtype), y=V.cast(y, dtype), grad=grad, reduction=reduction, eps=eps, eps_mode=eps_mode)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    return kw


def draw_case(draw, dtype, mode, caps) -> Case:
    shape, x, y, reduction, weight = V.draw_elementwise(draw, V.PROB_DISTS, caps)
    eps = caps.fixed["eps"] if "eps" in caps.fixed else draw(st.sampled_from(EPS_CHOICES), label="eps")
    grad = V.draw_upstream(draw, reduction, shape, dtype)
    return Case(ROW.name, mode, dtype, _kwargs(x, y, dtype, reduction=reduction, eps_mode=mode, eps=eps,
                                                weight=weight, grad=grad))


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    cases = []

    def add(label, x, y, **kw):
        cases.append(Case(ROW.name, mode, dtype,
                          _kwargs(np.asarray(x, float), np.asarray(y, float), dtype, eps_mode=mode, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"empty, {red}", np.zeros(0), np.zeros(0), reduction=red)
        add(f"0-d, {red}", np.asarray(0.3), np.asarray(1.0), reduction=red)
        add(f"one element, {red}", [0.7], [0.0], reduction=red)
    probs = np.array([0.0, 1.0, 1e-12, 1e-9, 1e-7, 0.5, 1 - 1e-7, 1 - 2.0**-24, 1e-300])
    for y0 in (0.0, 1.0, 0.5):
        add(f"probabilities at and near 0 and 1, y={y0}", probs, np.full(probs.shape, y0), reduction="none")
    # Where x(1-x) is near eps the two epsilon forms differ by up to 2x, in every dtype (at eps=1e-12
    # they agree to float16's rounding): an undeclared mode is told apart without a lucky draw.
    near = np.array([0.0, 1.0, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 0.5, 1 - 1e-3, 1 - 5e-4])
    add("x(1-x) near eps=1e-3", near, (np.arange(near.size) % 2).astype(float), reduction="none", eps=1e-3)
    rng = np.random.default_rng(1)
    for n in (4097, 65537):
        for red in ("none", "mean", "sum"):
            add(f"odd size {n}, {red}", rng.uniform(0, 1, n), (rng.random(n) > 0.5).astype(float), reduction=red,
                weight=rng.uniform(0, 2, n))
    # the tolerance contract: g/n (or g*(1/n)) of a subnormal g may underflow in the compute dtype
    for red in ("mean", "sum"):
        add(f"subnormal upstream gradient, {red}", [0.0, 1e-12, 0.5, 0.25, 1.0], [1.0, 0.0, 0.0, 1.0, 0.0],
            reduction=red, grad=V.smallest_subnormal(dtype), weight=np.array([0.5, 2.0, 1.0, 3.0, 0.25]))
    x = rng.uniform(0, 1, (31, 9))
    add("row weight (N, 1)", x, rng.uniform(0, 1, x.shape), reduction="mean", weight=rng.uniform(0, 2, (31, 1)))
    add("column weight (C,)", x, rng.uniform(0, 1, x.shape), reduction="none", weight=rng.uniform(0, 2, 9),
        grad=V.cast(rng.uniform(-1, 1, x.shape), dtype))
    return cases


def error_cases() -> list[ErrorCase]:
    x = np.linspace(0.1, 0.9, 5, dtype=np.float32)
    y = np.array([0, 1, 0, 1, 1], np.float32)
    base = dict(x=x, y=y)
    errs = [
        ("x of integer dtype", dict(x=np.arange(5), y=y), XLossTypeError, r"x must have a floating dtype"),
        ("y shape mismatch", dict(x=x, y=y[:3]), XLossValueError, r"y must have shape \(5,\); got \(3,\)"),
        ("bad reduction", dict(base, reduction="total"), XLossValueError, r"reduction must be one of"),
        ("negative eps", dict(base, eps=-1e-12), XLossValueError, r"eps must be >= 0; got -1e-12"),
        ("nan eps", dict(base, eps=float("nan")), XLossValueError, r"eps must be finite"),
        ("bad eps_mode", dict(base, eps_mode="max"), XLossValueError, r"eps_mode must be 'clamp' .* or 'add'"),
        ("weight not broadcastable", dict(base, weight=np.ones(3, np.float32)), XLossValueError,
         r"weight of shape \(3,\) does not broadcast to \(5,\)"),
        ("grad wrong shape (none)", dict(base, reduction="none", grad=np.ones(4, np.float32)), XLossValueError,
         r"grad must have shape \(5,\)"),
        ("grad array for sum", dict(base, reduction="sum", grad=np.ones(5, np.float32)), XLossValueError,
         r"grad must be a scalar \(one element\) for reduction='sum'"),
        ("grad string", dict(base, grad="one"), XLossTypeError, r"grad must be a real number"),
    ]
    out = [ErrorCase("bce_grad", kw, exc, match, label) for label, kw, exc, match in errs]
    out.append(ErrorCase("bce_grad", dict(base, out=np.full(4, 7.0, np.float32)), XLossValueError,
                         r"out must have shape \(5,\)", "out of wrong shape", "out"))
    out.append(ErrorCase("bce_grad", dict(base, eps_mode="bad", out=np.full(5, 7.0, np.float32)), XLossValueError,
                         r"eps_mode must be", "bad eps_mode with out", "out"))
    out.append(ErrorCase("bce_grad", dict(base, out=np.full(5, 7.0, np.float16)), XLossTypeError,
                         r"out must have dtype float32", "out of wrong dtype", "out"))
    return out


def call(case: Case, backend):
    return (np.asarray(bce_grad(**case.kwargs, backend=backend)),)


def oracle(case: Case):
    kw = dict(case.kwargs)
    return (reference.bce_grad(kw.pop("x"), kw.pop("y"), kw.pop("grad"), **kw),)


def allowed(case: Case, expected, caps=None):
    # (x - y), 1 - x, the product, the clamp or sum, the division, weight and grad: a handful of
    # roundings, each relative to the result; no cancellation a careful implementation could avoid.
    # The factors may be applied in any order in the compute dtype (underflow included: the mean's
    # g/n of a subnormal g may be zero), see descriptor.underflow.
    kw = case.kwargs
    n = np.size(kw["x"])
    upstream = np.abs(as_f64(kw["grad"]))
    g = upstream / (n if kw["reduction"] == "mean" and n else 1)
    x = as_f64(kw["x"])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        raw = np.abs(x - as_f64(kw["y"])) / reference.bce_denominator(x, kw["eps"], kw["eps_mode"])
    w = np.abs(as_f64(kw["weight"])) if "weight" in kw else 1.0
    raw = np.where(np.isfinite(raw), raw, 0.0)
    scale = raw * w * g
    shape = np.shape(expected[0])
    return (allowance(expected[0], np.broadcast_to(scale, shape), case.dtype)
            + np.broadcast_to(underflow(case.dtype, raw, w, upstream, 1.0 / max(n, 1)), shape)
            + upstream_rounding(expected[0], case.dtype, caps, g),)


# -- the shrinker's and the large ladder's view of a case: a unit is an element

def _large_period(rng, n, dtype, mode, reduction, grad, caps) -> dict:
    """One period of an elementwise rung (reduction ``none`` grads: one period of them)."""
    x = rng.uniform(0.0, 1.0, n)
    k = n // 4096
    x[rng.integers(0, n, k)] = rng.choice(np.array([0.0, 1.0, 1e-12, 1e-7, 1 - 1e-7]), k)
    return _kwargs(x, (rng.random(n) < 0.5).astype(np.float64), dtype, reduction=reduction, eps_mode=mode,
                   weight=rng.uniform(0.0, 2.0, n) if reduction == "sum" else None, grad=grad)


SHRINKING = elementwise("x", ("x", "y", "weight", "grad"), "grad")
LADDER = large.elementwise_ladder(ROW.name, _large_period)


DESCRIPTOR = KernelDescriptor(spec=ROW, draw_case=draw_case, edge_cases=edge_cases,
                              error_cases=error_cases, call=call, oracle=oracle, allowed=allowed,
                              output_names=lambda mode: ("dx",), shrinking=SHRINKING,
                              ladder=LADDER)
