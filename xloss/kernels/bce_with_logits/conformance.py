"""Descriptor of binary cross entropy with logits (modes: forward, grad, forward+grad)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance, underflow, upstream_rounding
from xloss.conformance.shrink import elementwise
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64, bce_logits, sigmoid_pair

from . import ROW, api

_FUNCTIONS = {"forward": "bce_with_logits", "grad": "bce_with_logits_grad",
              "forward+grad": "bce_with_logits_with_grad"}
POS_WEIGHT_DISTS = (
    V.uniform("pos_weights", 0.0, 10.0, (0.0, 1.0, 3.0)),
    V.constant("unit pos_weights", 1.0),
)
#: the fixed cases' logits: V.EXTREME_LOGITS and the infinities (NaN where the formula has 0 * inf)
LOGITS = (*V.EXTREME_LOGITS, math.inf, -math.inf)


def _kwargs(x, y, dtype, *, reduction, weight=None, pos_weight=None, grad=None, mode="forward"):
    kw = dict(x=V.cast(x, dtype), y=V.cast(y, dtype), reduction=reduction)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    if pos_weight is not None:
        kw["pos_weight"] = V.cast(pos_weight, dtype)
    if mode != "forward":
        kw["grad"] = 1.0 if grad is None else grad
    return kw


def draw_case(draw, dtype, mode, caps) -> Case:
    shape, x, y, reduction, weight = V.draw_elementwise(draw, V.LOGIT_DISTS, caps)
    pos_weight = None
    if draw(st.sampled_from(sorted(caps.variants["pos_weight"])), label="pos_weighted"):
        pshape = V.broadcast_shape(draw, shape)
        pos_weight = V.draw_values(draw, math.prod(pshape), POS_WEIGHT_DISTS).reshape(pshape)
    grad = V.draw_upstream(draw, reduction, shape, dtype) if mode != "forward" else None
    return Case(ROW.name, mode, dtype, _kwargs(x, y, dtype, reduction=reduction, weight=weight, pos_weight=pos_weight,
                                               grad=grad, mode=mode))


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    """The fixed cases (those using a weight, a pos_weight or a reduction a backend does not declare
    are left out by the runner)."""
    cases = []

    def add(label, x, y, **kw):
        cases.append(Case(ROW.name, mode, dtype, _kwargs(np.asarray(x, float), np.asarray(y, float), dtype,
                                                         mode=mode, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"empty, {red}", np.zeros(0), np.zeros(0), reduction=red)
        add(f"empty 2-D, {red}", np.zeros((0, 3)), np.zeros((0, 3)), reduction=red)
        add(f"0-d, {red}", np.asarray(1.5), np.asarray(1.0), reduction=red)
        add(f"one element, {red}", [-3.0], [0.0], reduction=red)
    xs = np.array(LOGITS)
    for y0 in (0.0, 1.0, 0.5, 1e-7):
        add(f"extreme logits, y={y0}", xs, np.full(xs.shape, y0), reduction="none")
        for pw in (0.0, 3.0, 1e3):
            add(f"extreme logits, y={y0}, pos_weight={pw}", xs, np.full(xs.shape, y0), reduction="none",
                pos_weight=np.full(xs.shape, pw))
    rng = np.random.default_rng(0)
    for n in (4097, 65537):
        x = rng.uniform(-12, 12, n)
        y = rng.uniform(0, 1, n)
        for red in ("none", "mean", "sum"):
            add(f"odd size {n}, {red}", x, y, reduction=red)
            add(f"odd size {n}, weight and pos_weight, {red}", x, y, reduction=red, weight=rng.uniform(0, 2, n),
                pos_weight=rng.uniform(0, 5, n))
    x = rng.uniform(-6, 6, (33, 17))
    add("all-zero targets", x, np.zeros(x.shape), reduction="mean")
    add("all-one targets", x, np.ones(x.shape), reduction="sum")
    add("per-class pos_weight (C,)", x, (x > 1).astype(float), reduction="none", pos_weight=rng.uniform(0, 4, 17))
    add("per-class pos_weight (C,), mean", x, rng.uniform(0, 1, x.shape), reduction="mean",
        pos_weight=rng.uniform(0, 4, 17))
    add("row weight (N, 1) and class pos_weight (C,)", x, (x > 0).astype(float), reduction="sum",
        weight=rng.uniform(0, 2, (33, 1)), pos_weight=rng.uniform(0.5, 4, 17))
    add("one weight (1, 1)", x, rng.uniform(0, 1, x.shape), reduction="mean", weight=np.full((1, 1), 0.75))
    x3 = rng.uniform(-5, 5, (4, 9, 65))
    add("3-D, pos_weight along the last dim", x3, (rng.random(x3.shape) < 0.3).astype(float), reduction="none",
        pos_weight=rng.uniform(0, 3, 65))
    if mode != "forward":  # the tolerance contract: g/n of a subnormal g may underflow in the compute dtype
        for red in ("mean", "sum"):
            add(f"subnormal upstream gradient, {red}", [-30.0, -2.0, 0.5, 3.0, 17.0], [0.0, 1.0, 0.0, 1.0, 0.3],
                reduction=red, grad=V.smallest_subnormal(dtype))
    return cases


def error_cases() -> list[ErrorCase]:
    x = np.linspace(-3, 3, 6, dtype=np.float32)
    y = (x > 0).astype(np.float32)
    base = dict(x=x, y=y)
    errs = [
        ("x of integer dtype", dict(x=np.arange(6), y=y), XLossTypeError, r"x must have a floating dtype"),
        ("y shape mismatch", dict(x=x, y=y[:5]), XLossValueError, r"y must have shape \(6,\); got \(5,\)"),
        ("y of string dtype", dict(x=x, y=np.array(["a"] * 6)), XLossTypeError, r"y must have a floating"),
        ("bad reduction", dict(base, reduction="avg"), XLossValueError, r"reduction must be one of .*'avg'"),
        ("weight not broadcastable", dict(base, weight=np.ones(4, np.float32)), XLossValueError,
         r"weight of shape \(4,\) does not broadcast to \(6,\)"),
        ("pos_weight not broadcastable", dict(base, pos_weight=np.ones(5, np.float32)), XLossValueError,
         r"pos_weight of shape \(5,\) does not broadcast to \(6,\)"),
        ("pos_weight with more dims", dict(base, pos_weight=np.ones((2, 6), np.float32)), XLossValueError,
         r"pos_weight of shape \(2, 6\) does not broadcast to \(6,\)"),
        ("pos_weight of string dtype", dict(base, pos_weight=np.array(["a"] * 6)), XLossTypeError,
         r"pos_weight must have a floating"),
    ]
    out = [ErrorCase(fn, kw, exc, match, label) for fn in _FUNCTIONS.values() for label, kw, exc, match in errs]
    for fn in ("bce_with_logits_grad", "bce_with_logits_with_grad"):
        out.append(ErrorCase(fn, dict(base, reduction="none", grad=np.ones(5, np.float32)), XLossValueError,
                             r"grad must have shape \(6,\)", "grad of wrong shape (none)"))
        out.append(ErrorCase(fn, dict(base, grad=np.ones(6, np.float32)), XLossValueError,
                             r"grad must be a scalar \(one element\) for reduction='mean'", "grad array for mean"))
    for fn, shape in (("bce_with_logits", ()), ("bce_with_logits_grad", (6,))):
        out.append(ErrorCase(fn, dict(base, out=np.full(5, 7.0, np.float32)), XLossValueError,
                             rf"out must have shape \({'6,' if shape else ''}\)", "out of wrong shape", "out"))
        out.append(ErrorCase(fn, dict(base, out=np.full(shape, 7.0, np.float64)), XLossTypeError,
                             r"out must have dtype float32", "out of wrong dtype", "out"))
        out.append(ErrorCase(fn, dict(base, reduction="bad", out=np.full(shape, 7.0, np.float32)), XLossValueError,
                             r"reduction must be one of", "bad reduction with out", "out"))
    shared = np.linspace(-3, 3, 6).astype(np.float32)
    out.append(ErrorCase("bce_with_logits_grad", dict(x=shared, y=y, out=shared), XLossValueError,
                         r"out overlaps input x", "out aliasing x", None))
    return out


def call(case: Case, backend):
    res = getattr(api, _FUNCTIONS[case.mode])(**case.kwargs, backend=backend)
    return tuple(np.asarray(r) for r in (res if isinstance(res, tuple) else (res,)))


def oracle(case: Case):
    kw = dict(case.kwargs)
    grad = kw.pop("grad", 1.0)
    x, y = kw.pop("x"), kw.pop("y")
    loss = bce_logits.bce_with_logits_loss(x, y, **kw)
    dx = bce_logits.bce_with_logits_grad(x, y, grad, **kw)
    return {"forward": (loss,), "grad": (dx,), "forward+grad": (loss, dx)}[case.mode]


def term_scales(x, y, *, weight=None, pos_weight=None):
    """Per element: the loss and the magnitude of its terms (what one rounding of each costs), times
    |weight|; the magnitude of the gradient's terms before the weight; |weight| (or 1)."""
    linear, lw, tail = bce_logits.terms(x, y, pos_weight)
    y = as_f64(y)
    pw = 1.0 if pos_weight is None else as_f64(pos_weight)
    w = 1.0 if weight is None else np.abs(as_f64(weight))
    p, s = sigmoid_pair(x)
    with np.errstate(invalid="ignore"):
        loss = w * (linear + lw * tail)
        loss_scale = w * (np.abs(linear) + (1.0 + np.abs((pw - 1.0) * y) + np.abs(lw)) * tail)
    grad_terms = np.abs(1.0 - y) * p + np.abs(pw * y) * s
    shape = np.shape(x)
    return loss, np.broadcast_to(loss_scale, shape), np.broadcast_to(grad_terms, shape), w


def allowed(case: Case, expected, caps=None):
    kw = case.kwargs
    loss, loss_scale, grad_terms, w = term_scales(kw["x"], kw["y"], weight=kw.get("weight"),
                                               pos_weight=kw.get("pos_weight"))
    n = loss.size
    red = kw["reduction"]
    out = []
    if case.mode in ("forward", "forward+grad"):
        if red == "none":
            scale = loss_scale
        else:  # summation error of a careful (pairwise/blocked) float accumulation
            finite = np.isfinite(loss)
            scale = np.asarray(loss_scale[finite].sum() + math.log2(n + 1) * np.abs(loss[finite]).sum())
            if red == "mean" and n:
                scale = scale / n
        out.append(allowance(expected[0], np.where(np.isfinite(scale), scale, 0.0), case.dtype))
    if case.mode in ("grad", "forward+grad"):
        upstream = np.abs(as_f64(kw["grad"]))
        g = upstream / n if red == "mean" and n else upstream
        # the local derivative, the weight, the upstream gradient and 1/n in any order (descriptor.underflow)
        out.append(allowance(expected[-1], grad_terms * w * g, case.dtype)
                   + underflow(case.dtype, grad_terms, w, upstream, 1.0 / max(n, 1))
                   + upstream_rounding(expected[-1], case.dtype, caps, g))
    return tuple(out)


# -- the shrinker's and the large ladder's view of a case: a unit is an element

def _large_period(rng, n, dtype, mode, reduction, grad, caps) -> dict:
    """One period of an elementwise rung: logits ~N(0, 3) with a few extremes, soft and binary targets."""
    x = rng.normal(0.0, 3.0, n)
    k = max(1, n // 4096)
    x[rng.integers(0, n, k)] = rng.choice(np.array(V.EXTREME_LOGITS), k)
    y = (rng.random(n) < 0.3).astype(np.float64)
    soft = rng.random(n) < 0.05
    y[soft] = rng.random(int(soft.sum()))
    return _kwargs(x, y, dtype, reduction=reduction, grad=grad if mode != "forward" else None, mode=mode)


SHRINKING = elementwise("x", ("x", "y", "weight", "pos_weight", "grad"), "grad")
LADDER = large.elementwise_ladder(ROW.name, _large_period)


def output_names(mode):
    return {"forward": ("loss",), "grad": ("dx",), "forward+grad": ("loss", "dx")}[mode]


DESCRIPTOR = KernelDescriptor(spec=ROW, draw_case=draw_case, edge_cases=edge_cases, error_cases=error_cases,
                              call=call, oracle=oracle, allowed=allowed, output_names=output_names,
                              shrinking=SHRINKING, ladder=LADDER)
