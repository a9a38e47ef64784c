"""Descriptor of the sigmoid focal loss kernel (modes: forward, grad, forward+grad)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss import reference
from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance, underflow, upstream_rounding
from xloss.conformance.shrink import elementwise
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64

from . import ROW as FOCAL
from . import api

ALPHAS = st.one_of(st.sampled_from((0.25, -1.0, 0.0, 0.5, 1.0)), st.floats(0.0, 1.0))
GAMMAS = st.one_of(st.sampled_from((2.0, 0.0, 0.5, 0.25, 1.0, 3.0)), st.floats(0.0, 5.0))

_FUNCTIONS = {"forward": "focal_loss", "grad": "focal_loss_grad", "forward+grad": "focal_loss_with_grad"}


def _kwargs(x, y, dtype, *, alpha, gamma, reduction, weight=None, grad=None, mode="forward"):
    kw = dict(x=V.cast(x, dtype), y=V.cast(y, dtype), alpha=alpha, gamma=gamma, reduction=reduction)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    if mode != "forward":
        kw["grad"] = 1.0 if grad is None else grad
    return kw


def draw_case(draw, dtype, mode, caps) -> Case:
    shape, x, y, reduction, weight = V.draw_elementwise(draw, V.LOGIT_DISTS, caps)
    grad = V.draw_upstream(draw, reduction, shape, dtype) if mode != "forward" else None
    kw = _kwargs(x, y, dtype, alpha=draw(ALPHAS, label="alpha"), gamma=draw(GAMMAS, label="gamma"),
                 reduction=reduction, weight=weight, grad=grad, mode=mode)
    return Case(FOCAL.name, mode, dtype, kw)


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    """The fixed cases; for a backend declaring binary targets only (``caps``), every target is
    rounded to {0, 1} (the soft-only cases are left out, the others keep their sizes and logits)."""
    cases = []
    binary = V.binary_targets_only(caps)
    kind = "binary" if binary else "soft"

    def add(label, x, y, **kw):
        y = V.binarized(y, caps)
        cases.append(Case(FOCAL.name, mode, dtype, _kwargs(np.asarray(x, float), np.asarray(y, float), dtype,
                                                           mode=mode, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"empty, {red}", np.zeros(0), np.zeros(0), alpha=0.25, gamma=2.0, reduction=red)
        add(f"empty 2-D, {red}", np.zeros((0, 3)), np.zeros((0, 3)), alpha=0.25, gamma=2.0, reduction=red)
        add(f"0-d, {red}", np.asarray(1.5), np.asarray(1.0), alpha=0.25, gamma=2.0, reduction=red)
        add(f"one element, {red}", [-3.0], [0.0], alpha=0.25, gamma=2.0, reduction=red)
    xs = np.array(V.EXTREME_LOGITS)
    for y0 in (0.0, 1.0) if binary else (0.0, 1.0, 0.5, 1e-7):
        for gamma in (0.0, 0.25, 0.5, 1.0, 2.0, 3.5):
            for alpha in (0.25, -1.0):
                add(f"extreme logits, y={y0}, gamma={gamma}, alpha={alpha}", xs, np.full(xs.shape, y0),
                    alpha=alpha, gamma=gamma, reduction="none")
    rng = np.random.default_rng(0)
    for n in (4097, 65537):
        x = rng.uniform(-10, 10, n)
        for red in ("none", "mean", "sum"):
            add(f"odd size {n}, {kind} targets, {red}", x, rng.uniform(0, 1, n), alpha=0.25, gamma=2.0, reduction=red)
    x = rng.uniform(-6, 6, (33, 17))
    add("all-zero targets", x, np.zeros(x.shape), alpha=0.25, gamma=2.0, reduction="mean")
    add("all-one targets", x, np.ones(x.shape), alpha=0.25, gamma=2.0, reduction="sum")
    add("per-anchor weight (N, 1)", x, (x > 0).astype(float), alpha=0.25, gamma=2.0, reduction="mean",
        weight=rng.uniform(0, 2, (33, 1)))
    add("per-class weight (C,)", x, (x > 1).astype(float), alpha=0.5, gamma=1.5, reduction="none",
        weight=rng.uniform(0, 2, 17))
    add("gamma 0 alpha -1 is BCE", x, rng.uniform(0, 1, x.shape), alpha=-1.0, gamma=0.0, reduction="sum")
    if mode != "forward":  # the tolerance contract: g/n of a subnormal g may underflow in the compute dtype
        for red in ("mean", "sum"):
            add(f"subnormal upstream gradient, {red}", [-30.0, -2.0, 0.5, 3.0, 17.0], [0.0, 1.0, 0.0, 1.0, 0.0],
                alpha=0.25, gamma=0.5, reduction=red, grad=V.smallest_subnormal(dtype),
                weight=np.array([2.0, 0.5, 1.0, 3.0, 1.0]))
    return cases


def error_cases() -> list[ErrorCase]:
    x = np.linspace(-3, 3, 6, dtype=np.float32)
    y = (x > 0).astype(np.float32)
    base = dict(x=x, y=y)
    errs = [
        ("x of integer dtype", dict(x=np.arange(6), y=y), XLossTypeError, r"x must have a floating dtype"),
        ("x complex", dict(x=x.astype(np.complex64), y=y), XLossTypeError, r"x must have a floating dtype"),
        ("y shape mismatch", dict(x=x, y=y[:5]), XLossValueError, r"y must have shape \(6,\); got \(5,\)"),
        ("y of string dtype", dict(x=x, y=np.array(["a"] * 6)), XLossTypeError, r"y must have a floating"),
        ("bad reduction", dict(base, reduction="avg"), XLossValueError, r"reduction must be one of .*'avg'"),
        ("alpha above 1", dict(base, alpha=1.5), XLossValueError, r"alpha must be in \[0, 1\].*1.5"),
        ("alpha nan", dict(base, alpha=float("nan")), XLossValueError, r"alpha must be finite"),
        ("alpha bool", dict(base, alpha=True), XLossTypeError, r"alpha must be a real number"),
        ("negative gamma", dict(base, gamma=-1.0), XLossValueError, r"gamma must be >= 0; got -1.0"),
        ("gamma inf", dict(base, gamma=float("inf")), XLossValueError, r"gamma must be finite"),
        ("weight not broadcastable", dict(base, weight=np.ones(4, np.float32)), XLossValueError,
         r"weight of shape \(4,\) does not broadcast to \(6,\)"),
        ("weight with more dims", dict(base, weight=np.ones((2, 6), np.float32)), XLossValueError,
         r"weight of shape \(2, 6\) does not broadcast to \(6,\)"),
        ("huge broadcast view", dict(x=np.broadcast_to(np.float32(1), (10**6, 10**6)),
                                     y=np.broadcast_to(np.float32(0), (10**6, 10**6))), XLossValueError,
         r"a contiguous copy of x \(1000000, 1000000\) would need 3725.3 GiB of memory"),
    ]
    out = []
    for fn in ("focal_loss", "focal_loss_grad", "focal_loss_with_grad"):
        for label, kw, exc, match in errs:
            out.append(ErrorCase(fn, kw, exc, match, label))
    for fn in ("focal_loss_grad", "focal_loss_with_grad"):
        out.append(ErrorCase(fn, dict(base, grad=np.ones(5, np.float32)), XLossValueError,
                             r"grad must have shape \(6,\)", "grad of wrong shape (none)"))
        out.append(ErrorCase(fn, dict(base, grad=np.ones(6, np.float32), reduction="mean"), XLossValueError,
                             r"grad must be a scalar \(one element\) for reduction='mean'", "grad array for mean"))
    for fn, shape in (("focal_loss", (6,)), ("focal_loss_grad", (6,))):
        out.append(ErrorCase(fn, dict(base, out=np.full(5, 7.0, np.float32)), XLossValueError,
                             r"out must have shape \(6,\)", "out of wrong shape", "out"))
        out.append(ErrorCase(fn, dict(base, out=np.full(shape, 7.0, np.float64)), XLossTypeError,
                             r"out must have dtype float32", "out of wrong dtype", "out"))
        ro = np.full(shape, 7.0, np.float32)
        ro.flags.writeable = False
        out.append(ErrorCase(fn, dict(base, out=ro), XLossValueError, r"out is read-only", "read-only out", "out"))
        out.append(ErrorCase(fn, dict(base, out=np.full((6, 2), 7.0, np.float32)[:, 0]), XLossValueError,
                             r"out must be C-contiguous", "strided out", "out"))
        out.append(ErrorCase(fn, dict(base, reduction="bad", out=np.full(shape, 7.0, np.float32)), XLossValueError,
                             r"reduction must be one of", "bad reduction with out", "out"))
    shared = np.linspace(-3, 3, 6).astype(np.float32)
    out.append(ErrorCase("focal_loss", dict(x=shared, y=y, out=shared), XLossValueError,
                         r"out overlaps input x", "out aliasing x", None))
    out.append(ErrorCase("focal_loss", dict(base, reduction="mean", out=np.zeros(6, np.float32)), XLossValueError,
                         r"out must have shape \(\)", "out not 0-d for mean", "out"))
    return out


def call(case: Case, backend):
    fn = getattr(api, _FUNCTIONS[case.mode])
    res = fn(**case.kwargs, backend=backend)
    return tuple(np.asarray(r) for r in (res if isinstance(res, tuple) else (res,)))


def oracle(case: Case):
    kw = dict(case.kwargs)
    grad = kw.pop("grad", 1.0)
    x, y = kw.pop("x"), kw.pop("y")
    loss = reference.sigmoid_focal_loss(x, y, **kw)
    dx = reference.sigmoid_focal_loss_grad(x, y, grad, **kw)
    return {"forward": (loss,), "grad": (dx,), "forward+grad": (loss, dx)}[case.mode]


def term_scales(x, y, *, alpha, gamma, weight=None):
    """Per element: the loss, the scales of the loss and gradient terms (see descriptor.py), and
    the magnitudes of d(loss)/d(alpha) and d(dx)/d(alpha) (for alpha's rounding to the compute dtype)."""
    x, y = as_f64(x), as_f64(y)
    p, s = reference.sigmoid_pair(x)
    q = p * (1 - y) + s * y
    ce = reference.bce_with_logits(x, y)
    w = np.abs(alpha * y + (1 - alpha) * (1 - y)) if alpha >= 0 else np.ones_like(x)
    if weight is not None:
        w = w * np.abs(as_f64(weight))
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        qg = q**gamma
        pow_cond = 1.0 + gamma * np.where(q > 0, np.abs(np.log(np.where(q > 0, q, 1.0))), 0.0)
        r = np.where(q > 0, p * s / np.where(q > 0, q, 1.0), 1.0)
    ce_terms = np.maximum(x, 0) + np.abs(x * y) + np.log1p(np.exp(-np.abs(x)))
    loss = w * ce * qg
    loss_scale = w * qg * (ce_terms + ce * pow_cond)
    t1 = qg * (q + np.abs(p * (1 - y) - s * y) * pow_cond)
    t2 = gamma * qg * r * ((1 + 2 * y) * ce_terms + np.abs(1 - 2 * y) * ce * (pow_cond + 2))
    # a_t = alpha*y + (1-alpha)*(1-y): d a_t / d alpha = 2y - 1
    da = np.abs(2 * y - 1) * (np.abs(as_f64(weight)) if weight is not None else 1.0) if alpha >= 0 else 0 * x
    dx_terms = qg * np.abs(p * (1 - y) - s * y) + gamma * qg * r * np.abs(1 - 2 * y) * ce
    return loss, loss_scale, w * (t1 + t2), da * ce * qg, da * dx_terms


def allowed(case: Case, expected, caps=None):
    kw = case.kwargs
    loss, loss_scale, grad_scale, loss_da, grad_da = term_scales(kw["x"], kw["y"], alpha=kw["alpha"],
                                                                 gamma=kw["gamma"], weight=kw.get("weight"))
    # alpha is a scalar of the compute dtype (C ABIs pass it as float): its rounding is allowed
    d_alpha = 0.0 if case.dtype == "float64" else abs(kw["alpha"] - float(np.float32(kw["alpha"])))
    n = loss.size
    red = kw["reduction"]
    out = []
    if case.mode in ("forward", "forward+grad"):
        if red == "none":
            scale, extra = loss_scale, d_alpha * loss_da
        else:  # summation error of a careful (pairwise/blocked) float accumulation
            scale = np.asarray(loss_scale.sum() + math.log2(n + 1) * np.abs(loss).sum())
            extra = d_alpha * loss_da.sum()
            if red == "mean" and n:
                scale, extra = scale / n, extra / n
        out.append(allowance(expected[0], scale, case.dtype) + extra)
    if case.mode in ("grad", "forward+grad"):
        upstream = np.abs(as_f64(kw["grad"]))
        g = upstream / n if red == "mean" and n else upstream
        # the local derivative, the upstream gradient and 1/n in any order (descriptor.underflow)
        out.append(allowance(expected[-1], grad_scale * g, case.dtype) + d_alpha * grad_da * g
                   + underflow(case.dtype, np.where(np.isfinite(grad_scale), grad_scale, 0.0), upstream,
                               1.0 / max(n, 1))
                   + upstream_rounding(expected[-1], case.dtype, caps, g))
    return tuple(out)


# -- the shrinker's and the large ladder's view of a case: a unit is an element

def _large_logits(rng, n: int) -> np.ndarray:
    x = rng.normal(0.0, 3.0, n)
    k = max(1, n // 4096)  # a few extremes, spread over the whole array
    x[rng.integers(0, n, k)] = rng.choice(np.array(V.EXTREME_LOGITS), k)
    return x


def _large_targets(rng, n: int, binary: bool = False) -> np.ndarray:
    """Binary targets with about 5% soft ones (``binary``: those rounded to 0 or 1)."""
    y = (rng.random(n) < 0.3).astype(np.float64)
    soft = rng.random(n) < 0.05
    y[soft] = rng.random(int(soft.sum()))
    return np.round(y) if binary else y


def _large_period(rng, n, dtype, mode, reduction, grad, caps) -> dict:
    """One period of an elementwise rung (reduction ``none`` grads: one period of them)."""
    return _kwargs(_large_logits(rng, n), _large_targets(rng, n, V.binary_targets_only(caps)), dtype, alpha=0.25,
                   gamma=2.0, reduction=reduction, grad=grad if mode != "forward" else None, mode=mode)


SHRINKING = elementwise("x", ("x", "y", "weight", "grad"), "grad")
LADDER = large.elementwise_ladder(FOCAL.name, _large_period)


def output_names(mode):
    return {"forward": ("loss",), "grad": ("dx",), "forward+grad": ("loss", "dx")}[mode]


DESCRIPTOR = KernelDescriptor(spec=FOCAL, draw_case=draw_case, edge_cases=edge_cases,
                              error_cases=error_cases, call=call, oracle=oracle, allowed=allowed,
                              output_names=output_names, shrinking=SHRINKING, ladder=LADDER,
                              probe_keeps=("targets",))
