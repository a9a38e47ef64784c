"""Descriptors of the cross-entropy rows (no modes; variants: weight, label smoothing, z-loss, target dtype),
and of xloss's fused loss-and-gradient row (at the end).

The forward's outputs are checked as CANN returns them: loss, log_prob, and with a z-loss the
z-loss alone and the row log-sum-exp. The backward's cases hold a real forward's log-probabilities
(the float64 log-softmax of drawn logits, rounded to the dtype), as a training step passes them.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss import dtypes as xdt
from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance, underflow
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossIndexError, XLossTypeError, XLossValueError
from xloss.reference import as_f64
from xloss.reference import cross_entropy_loss as ref

from . import FORWARD, GRAD, WITH_GRAD, api

_INDEX = {"int64": np.int64, "int32": np.int32}
_SMOOTHING = (0.1, 0.25, 1.0)
_ZLOSS = (1e-4, 0.05)


# -- building cases ----------------------------------------------------------------------------------


def _common(target, dtype, *, reduction, weight=None, ignore_index=-100, label_smoothing=0.0, zloss=0.0):
    kw = dict(target=target, reduction=reduction, ignore_index=ignore_index)
    if weight is not None:
        kw["weight"] = np.asarray(weight, np.float64).astype(xdt.compute_dtype(dtype))
    if label_smoothing:
        kw["label_smoothing"] = label_smoothing
    if zloss:
        kw["lse_square_scale_for_zloss"] = zloss
    return kw


def forward_case(logits, target, dtype, label="", **kw) -> Case:
    args = dict(input=V.cast(logits, dtype), **_common(target, dtype, **kw))
    if kw.get("zloss"):
        args["return_zloss"] = True
    return Case(FORWARD.name, None, dtype, args, label)


def grad_case(logits, target, dtype, grad, label="", grad_zloss=None, **kw) -> Case:
    """The backward at the log-probabilities of ``logits`` (float64 log-softmax rounded to ``dtype``)."""
    log_prob, lse = ref.log_softmax_rows(as_f64(logits))
    args = dict(grad=grad, log_prob=V.cast(log_prob, dtype), **_common(target, dtype, **kw))
    if kw.get("zloss"):
        args["lse_for_zloss"] = V.cast(lse, dtype)
        if grad_zloss is not None:
            args["grad_zloss"] = grad_zloss
    return Case(GRAD.name, None, dtype, args, label)


def _draw_problem(draw, caps):
    """(logits, target, options) of one drawn problem within ``caps``' variants."""
    tdtype = draw(st.sampled_from(sorted(caps.variants["target_dtype"])), label="target dtype")
    c = draw(st.one_of(st.integers(1, 12), st.sampled_from((1, 2, 17, 64, 255, 513, 1000))), label="C")
    n = draw(st.one_of(st.integers(0, 24), st.sampled_from(V.ODD_SIZES)), label="N")
    ignore_index = draw(st.sampled_from((-100, -1, 0, c - 1)), label="ignore_index")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    t = rng.integers(0, c, n)
    if ignore_index < 0 and n and draw(st.booleans(), label="some rows ignored"):
        t[rng.random(n) < 0.3] = ignore_index
    logits = V.draw_values(draw, n * c, V.LOGIT_DISTS).reshape(n, c)
    weight = V.draw_values(draw, c, V.WEIGHT_DISTS) if draw(
        st.sampled_from(sorted(caps.variants["weight"])), label="weighted") else None
    ls = draw(st.sampled_from(_SMOOTHING), label="label_smoothing") if draw(
        st.sampled_from(sorted(caps.variants["label_smoothing"])), label="smoothed") else 0.0
    zl = draw(st.sampled_from(_ZLOSS), label="z-loss scale") if draw(
        st.sampled_from(sorted(caps.variants.get("zloss", (False,)))), label="z-loss") else 0.0
    reduction = draw(st.sampled_from(sorted(caps.reductions)), label="reduction")
    kw = dict(reduction=reduction, weight=weight, ignore_index=ignore_index, label_smoothing=ls, zloss=zl)
    return logits, t.astype(_INDEX[tdtype]), kw


def draw_forward(draw, dtype, mode, caps) -> Case:
    logits, t, kw = _draw_problem(draw, caps)
    return forward_case(logits, t, dtype, **kw)


def draw_grad(draw, dtype, mode, caps) -> Case:
    logits, t, kw = _draw_problem(draw, caps)
    grad = V.draw_upstream(draw, kw["reduction"], (len(t),), dtype)
    gz = V.draw_upstream(draw, kw["reduction"], (len(t),), dtype) if kw["zloss"] and draw(
        st.booleans(), label="grad_zloss given") else None
    return grad_case(logits, t, dtype, grad, grad_zloss=gz, **kw)


def _edge_problems(dtype, caps):
    """(label, logits, target, options) shared by both rows' edge cases, within ``caps``."""
    rng = np.random.default_rng(7)
    declared = caps.variants if caps is not None else {"weight": (False, True), "label_smoothing": (False, True),
                                                       "zloss": (False, True), "target_dtype": ("int64",)}
    tdt = _INDEX["int64" if "int64" in declared["target_dtype"] else "int32"]
    w = (lambda c: rng.uniform(0.1, 2.0, c)) if True in declared["weight"] else (lambda c: None)
    ls = 0.1 if True in declared["label_smoothing"] else 0.0
    zl = 1e-3 if True in declared.get("zloss", ()) else 0.0
    big = 60000.0 if dtype == "float16" else 1e4
    out = []
    for red in ("none", "mean", "sum"):
        out += [
            (f"no rows, {red}", np.zeros((0, 5)), np.zeros(0), dict(reduction=red)),
            (f"one class, {red}", rng.normal(0, 3, (6, 1)), np.zeros(6), dict(reduction=red, weight=w(1),
                                                                              label_smoothing=ls)),
            (f"all rows ignored, {red}", rng.normal(0, 3, (9, 4)), np.full(9, -100),
             dict(reduction=red, label_smoothing=ls, zloss=zl)),
            (f"extreme logits, {red}", np.array([[big, -big, 0.0], [-big, -big, -big], [big, big, -big]]),
             np.array([1, 2, 0]), dict(reduction=red, weight=w(3), label_smoothing=ls)),
            # rows past a block (the emulators' reductions sum 4096 rows a block); 37 classes, not 300, which
            # cost seconds of tolerance work per target (labels past 255 and class chunks: the C=1537 case)
            (f"N=4097 C=37 with ignored rows, {red}", rng.normal(0, 4, (4097, 37)),
             np.where(rng.random(4097) < 0.15, -100, rng.integers(0, 37, 4097)),
             dict(reduction=red, weight=w(37), label_smoothing=ls, zloss=zl)),
            (f"C=1537 (chunks of the online max/sum), {red}", rng.normal(0, 20, (5, 1537)),
             np.array([0, 1536, 512, 513, 3]), dict(reduction=red, label_smoothing=ls)),
        ]
    out += [
        ("zero class weights (mean over a zero total weight)", rng.normal(0, 1, (4, 3)), np.array([0, 0, 1, 1]),
         dict(reduction="mean", weight=np.array([0.0, 0.0, 1.0]) if True in declared["weight"] else None)),
        ("ignore_index is a valid class", rng.normal(0, 1, (8, 4)), np.arange(8) % 4,
         dict(reduction="mean", ignore_index=2, label_smoothing=ls)),
        ("full smoothing", rng.normal(0, 2, (7, 5)), rng.integers(0, 5, 7),
         dict(reduction="mean", weight=w(5), label_smoothing=1.0 if ls else 0.0)),
        ("large z-loss scale", rng.normal(0, 5, (6, 9)), rng.integers(0, 9, 6), dict(reduction="sum", zloss=zl * 100)),
    ]
    return [(label, x, np.asarray(t).astype(tdt), kw) for label, x, t, kw in out]


def forward_edges(dtype, mode, caps=None) -> list[Case]:
    return [forward_case(x, t, dtype, label, **kw) for label, x, t, kw in _edge_problems(dtype, caps)]


def grad_edges(dtype, mode, caps=None) -> list[Case]:
    rng = np.random.default_rng(8)
    cases = []
    for label, x, t, kw in _edge_problems(dtype, caps):
        g = V.cast(rng.uniform(-2, 2, len(t)), dtype) if kw["reduction"] == "none" else 0.5
        cases.append(grad_case(x, t, dtype, g, label, grad_zloss=0.25 if kw.get("zloss") else None, **kw))
    for red in ("mean", "sum"):  # g / total_weight of a subnormal g may underflow in the compute dtype
        cases.append(grad_case(rng.normal(0, 1, (4, 3)), np.array([0, 1, 2, 1]), dtype, V.smallest_subnormal(dtype),
                               f"subnormal upstream gradient, {red}", reduction=red))
    return cases


# -- errors -------------------------------------------------------------------------------------------


def _error_rows():
    x = np.random.default_rng(3).normal(0, 1, (4, 3)).astype(np.float32)
    t = np.array([0, 2, 1, -100])
    return x, t, [
        ("3-D logits", dict(target=t), "input", x.reshape(2, 2, 3), XLossValueError, r"must have shape \(N, C\)"),
        ("no classes", dict(target=t), "input", np.zeros((4, 0), np.float32), XLossValueError,
         r"at least one class"),
        ("integer logits", dict(target=t), "input", np.zeros((4, 3), np.int32), XLossTypeError, r"floating dtype"),
        ("probability targets", dict(target=np.full((4, 3), 1 / 3, np.float32)), None, None, XLossTypeError,
         r"target must hold class indices"),
        ("target int16", dict(target=t.astype(np.int16)), None, None, XLossTypeError,
         r"target must have dtype int64 or int32"),
        ("target wrong length", dict(target=t[:3]), None, None, XLossValueError,
         r"target must have shape \(4,\) for input of shape \(4, 3\); got \(3,\)"),
        ("target out of range", dict(target=np.array([0, 3, 1, 1])), None, None, XLossIndexError,
         r"target\[1\] = 3 is out of range"),
        ("negative target", dict(target=np.array([0, 1, -5, 1])), None, None, XLossIndexError,
         r"target\[2\] = -5 is out of range"),
        ("weight wrong shape", dict(target=t, weight=np.ones(4, np.float32)), None, None, XLossValueError,
         r"weight must have shape \(3,\); got \(4,\)"),
        ("label_smoothing above 1", dict(target=t, label_smoothing=1.5), None, None, XLossValueError,
         r"label_smoothing must lie in \[0, 1\]"),
        ("negative z-loss scale", dict(target=t, lse_square_scale_for_zloss=-0.1), None, None, XLossValueError,
         r"lse_square_scale_for_zloss must be >= 0"),
        ("ignore_index float", dict(target=t, ignore_index=-100.0), None, None, XLossTypeError,
         r"ignore_index must be an integer"),
        ("bad reduction", dict(target=t, reduction="batchmean"), None, None, XLossValueError,
         r"reduction must be one of"),
    ]


def forward_errors() -> list[ErrorCase]:
    x, t, rows = _error_rows()
    out = []
    for label, kw, key, value, exc, match in rows:
        out.append(ErrorCase(FORWARD.name, {"input": value if key else x, **kw}, exc, match, label))
    out.append(ErrorCase(FORWARD.name, dict(input=x, target=np.array([0, 9, 1, 1]),
                                            loss_out=np.full((), 7.0, np.float32)),
                         XLossIndexError, r"target\[1\] = 9 is out of range", "out-of-range target with loss_out",
                         "loss_out"))
    out.append(ErrorCase(FORWARD.name, dict(input=x, target=t, log_prob_out=np.full((3, 3), 7.0, np.float32)),
                         XLossValueError, r"log_prob_out must have shape \(4, 3\)", "log_prob_out of wrong shape",
                         "log_prob_out"))
    return out


def grad_errors() -> list[ErrorCase]:
    x, t, rows = _error_rows()
    lp = (x - np.log(np.exp(x).sum(1, keepdims=True))).astype(np.float32)
    out = []
    for label, kw, key, value, exc, match in rows:
        match = match.replace("for input of", "for log_prob of")
        out.append(ErrorCase(GRAD.name, {"grad": 1.0, "log_prob": value if key else lp, **kw}, exc, match, label))
    base = dict(grad=1.0, log_prob=lp, target=t)
    out += [
        ErrorCase(GRAD.name, dict(base, reduction="none", grad=np.ones(3, np.float32)), XLossValueError,
                  r"grad must have shape \(4,\)", "grad wrong shape (none)"),
        ErrorCase(GRAD.name, dict(base, grad=np.ones(4, np.float32)), XLossValueError,
                  r"grad must be a scalar \(one element\) for reduction='mean'", "grad array for mean"),
        ErrorCase(GRAD.name, dict(base, lse_square_scale_for_zloss=0.1), XLossValueError,
                  r"lse_for_zloss .* is required", "z-loss without lse_for_zloss"),
        ErrorCase(GRAD.name, dict(base, target=np.array([0, 9, 1, 1]), out=np.full((4, 3), 7.0, np.float32)),
                  XLossIndexError, r"target\[1\] = 9 is out of range", "out-of-range target with out", "out"),
    ]
    return out


# -- running and judging -----------------------------------------------------------------------------


def _forward_kwargs(case):
    kw = dict(case.kwargs)
    for k in ("return_zloss",):
        kw.pop(k, None)
    return kw


def call_forward(case: Case, backend):
    r = api.cross_entropy_loss(**case.kwargs, backend=backend)
    outs = (r.loss, r.log_prob)
    if case.kwargs.get("lse_square_scale_for_zloss"):
        outs += (r.zloss, r.lse_for_zloss)
    return tuple(np.asarray(o) for o in outs)


def oracle_forward(case: Case):
    kw = _forward_kwargs(case)
    r = ref.cross_entropy_loss(kw.pop("input"), kw.pop("target"), **kw)
    outs = (r.loss, r.log_prob)
    return outs + (r.zloss, r.lse) if case.kwargs.get("lse_square_scale_for_zloss") else outs


def _row_terms(kw, x_or_lp, lse):
    """Per-row facts of the tolerance: keep mask, w_t, weights, the lse error scale A (in units of eps)."""
    n, c = x_or_lp.shape
    t = np.asarray(kw["target"]).astype(np.int64)
    keep = t != kw.get("ignore_index", -100)
    w = np.abs(as_f64(kw["weight"])) if kw.get("weight") is not None else np.ones(c)
    w_t = np.where(keep, w[np.where(keep, t, 0)], 0.0) if n else np.zeros(0)
    a = np.where(np.isfinite(lse), np.abs(lse), 0.0) + 2.0 + math.log2(c + 1)
    return t, keep, w, w_t, a


def _reduced(per_row, reduction, denominator, n):
    if reduction == "none":
        return per_row
    factor = 1.0 + math.log2(n + 1)
    total = per_row.sum() * factor
    if reduction == "mean":
        return total / abs(denominator) if denominator else 0.0
    return total


def allowed_forward(case: Case, expected, caps=None):
    kw = case.kwargs
    x = as_f64(kw["input"])
    n, c = x.shape
    lse = ref.log_softmax_rows(x)[1]
    t, keep, w, w_t, a = _row_terms(kw, x, lse)
    ax = np.where(np.isfinite(x), np.abs(x), 0.0)
    ls, scale, red = kw.get("label_smoothing", 0.0), kw.get("lse_square_scale_for_zloss", 0.0), kw["reduction"]
    x_t = ax[np.arange(n), np.where(keep, t, 0)] if n else np.zeros(0)
    nll_scale = w_t * (x_t + a)
    smooth_scale = np.where(keep, ls / c * ((ax + a[:, None]) * w).sum(axis=1) * (1 + math.log2(c + 1)), 0.0)
    alse = np.where(np.isfinite(lse), np.abs(lse), 0.0)
    z_scale = np.where(keep, scale * alse * (2 * a + alse), 0.0)
    loss_scale = (_reduced(nll_scale + smooth_scale, red, w_t.sum(), n)
                  + _reduced(z_scale, red, float(keep.sum()), n))
    o = np.abs(as_f64(expected[0]))
    loss_scale = loss_scale + np.where(np.isfinite(o), o, 0.0) * (1 + math.log2(n + 1))
    out = (allowance(expected[0], loss_scale, case.dtype),
           allowance(expected[1], ax + a[:, None], case.dtype))
    if scale:
        out += (allowance(expected[2], _reduced(z_scale, red, float(keep.sum()), n), case.dtype),
                allowance(expected[3], a, case.dtype))
    return out


def call_grad(case: Case, backend):
    return (np.asarray(api.cross_entropy_loss_grad(**case.kwargs, backend=backend)),)


def oracle_grad(case: Case):
    kw = dict(case.kwargs)
    return (ref.cross_entropy_loss_grad(kw.pop("grad"), kw.pop("log_prob"), kw.pop("target"), **kw),)


def allowed_grad(case: Case, expected, caps=None):
    kw = case.kwargs
    lp = as_f64(kw["log_prob"])
    n, c = lp.shape
    t, keep, w, w_t, _ = _row_terms(kw, lp, np.zeros(n))
    g = np.abs(as_f64(kw["grad"])).reshape(-1)
    g = np.broadcast_to(g, (n,)) if kw["reduction"] == "none" else np.full(n, g[0] if g.size else 0.0)
    ls, scale = kw.get("label_smoothing", 0.0), kw.get("lse_square_scale_for_zloss", 0.0)
    mean = kw["reduction"] == "mean"
    d = w_t.sum() if mean else 1.0
    inv_d = 1.0 / d if d else 0.0
    b = g * w_t * inv_d
    s = np.where(keep, g * ls / c * inv_d, 0.0)
    coef = b + s * w.sum()
    if scale:
        gz = g + (np.abs(as_f64(kw.get("grad_zloss", 0.0))).reshape(-1) if kw.get("grad_zloss") is not None else 0.0)
        cnt = float(keep.sum()) if mean else 1.0
        lse = np.abs(as_f64(kw["lse_for_zloss"]))
        coef = coef + np.where(keep, 2 * scale * lse * gz / (cnt or 1.0), 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(lp)
        p = np.where(np.isfinite(p), p, 0.0)
        size = p * coef[:, None] * (2 + math.log2(c + 1)) + s[:, None] * w[None, :]
        if n:
            rows = np.arange(n)[keep]
            size[rows, t[keep]] += b[keep]
        size = size * ((1 + math.log2(n + 1)) if mean else 1.0)
    o = np.abs(as_f64(expected[0]))
    o = np.where(np.isfinite(o), o, 0.0)
    half = xdt.eps(case.dtype) * o if case.dtype in ("float16", "bfloat16") else 0.0  # 16-bit scalars on the way in
    return (allowance(expected[0], size, case.dtype) + half
            + underflow(case.dtype, np.max(g, initial=0.0), np.max(w, initial=1.0), 1.0 / d if d else 1.0),)


# -- shrinking and the large ladder: a unit is a row --------------------------------------------------


def _units(case: Case) -> int:
    return int(len(case.kwargs["target"]))


def _select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    n = len(kw["target"])
    for k in ("input", "log_prob", "target", "lse_for_zloss"):
        if k in kw:
            kw[k] = kw[k][keep]
    for k in ("grad", "grad_zloss"):
        if isinstance(kw.get(k), np.ndarray) and kw[k].shape == (n,):
            kw[k] = kw[k][keep]
    return kw


def _unit_of(case: Case, flat_index: int, output: int) -> int:
    if output == 1 or case.kernel == GRAD.name:  # (N, C) outputs
        x = case.kwargs.get("input", case.kwargs.get("log_prob"))
        return flat_index // max(1, np.shape(x)[1])
    return flat_index if case.kwargs["reduction"] == "none" else -1


SHRINKING = Shrinking(_units, _select, _unit_of)

#: (label, N, C, reduction) of the large rungs: C in the tens of thousands (many chunks per row),
#: rows for every core
LARGE = (("N=67 C=32003, none", 67, 32003, "none"), ("N=263 C=20011, sum", 263, 20011, "sum"))


def _large_rung(kernel, n, c, reduction):
    def period(dtype, mode, seed, label, caps):
        declared = sorted(caps.variants["target_dtype"]) if caps is not None else ["int64"]
        tdt = "int64" if "int64" in declared else "int32"
        rng = large.rng_for(seed, kernel, dtype, tdt, label)
        t = rng.integers(0, c, n)
        t[rng.random(n) < 0.1] = -100
        x = rng.normal(0.0, 3.0, (n, c))
        kw = dict(reduction=reduction, weight=rng.uniform(0.0, 2.0, c) if caps is None or
                  True in caps.variants["weight"] else None)
        if kernel == FORWARD.name:
            return forward_case(x, t.astype(np.dtype(tdt)), dtype, f"large: {label}", **kw)
        g = V.cast(rng.uniform(-2.0, 2.0, n), dtype) if reduction == "none" else 0.75
        return grad_case(x, t.astype(np.dtype(tdt)), dtype, g, f"large: {label}", **kw)

    return period


def _ladder(kernel, rows):
    return large.Ladder(tuple(large.Rung(label, 1, True, _large_rung(kernel, n, c, red)) for label, n, c, red in LARGE),
                        rows, per_class=("weight",))


FORWARD_DESCRIPTOR = KernelDescriptor(
    spec=FORWARD, draw_case=draw_forward, edge_cases=forward_edges, error_cases=forward_errors, call=call_forward,
    oracle=oracle_forward, allowed=allowed_forward,
    output_names=lambda mode: ("loss", "log_prob", "zloss", "lse_for_zloss"), shrinking=SHRINKING,
    ladder=_ladder(FORWARD.name, "input"))
GRAD_DESCRIPTOR = KernelDescriptor(
    spec=GRAD, draw_case=draw_grad, edge_cases=grad_edges, error_cases=grad_errors, call=call_grad,
    oracle=oracle_grad, allowed=allowed_grad, output_names=lambda mode: ("grad_input",), shrinking=SHRINKING,
    ladder=_ladder(GRAD.name, "log_prob"))


# -- xloss's fused row: the loss and its gradient from the logits (cross_entropy_loss_with_grad) ------------------


def with_grad_case(logits, target, dtype, grad, label="", **kw) -> Case:
    kw.pop("zloss", None)  # the fused row has no z-loss
    args = dict(input=V.cast(logits, dtype), grad=grad, **_common(target, dtype, **kw))
    return Case(WITH_GRAD.name, None, dtype, args, label)


def draw_with_grad(draw, dtype, mode, caps) -> Case:
    logits, t, kw = _draw_problem(draw, caps)
    return with_grad_case(logits, t, dtype, V.draw_upstream(draw, kw["reduction"], (len(t),), dtype), **kw)


def with_grad_edges(dtype, mode, caps=None) -> list[Case]:
    rng = np.random.default_rng(9)
    cases = []
    for label, x, t, kw in _edge_problems(dtype, caps):
        if label.startswith("N=4097") and kw["reduction"] != "none":  # one of the three: many rows, test time
            continue
        g = V.cast(rng.uniform(-2, 2, len(t)), dtype) if kw["reduction"] == "none" else 0.5
        cases.append(with_grad_case(x, t, dtype, g, label, **kw))
    for red in ("mean", "sum"):  # g / total_weight of a subnormal g may underflow in the compute dtype
        cases.append(with_grad_case(rng.normal(0, 1, (4, 3)), np.array([0, 1, 2, 1]), dtype,
                                    V.smallest_subnormal(dtype), f"subnormal upstream gradient, {red}", reduction=red))
    return cases


def with_grad_errors() -> list[ErrorCase]:
    x, t, rows = _error_rows()
    out = [ErrorCase(WITH_GRAD.name, {"input": value if key else x, "grad": 1.0, **kw}, exc, match, label)
           for label, kw, key, value, exc, match in rows if "lse_square_scale_for_zloss" not in kw]
    base = dict(input=x, target=t, grad=1.0)
    out += [
        ErrorCase(WITH_GRAD.name, dict(base, reduction="none", grad=np.ones(3, np.float32)), XLossValueError,
                  r"grad must have shape \(4,\)", "grad wrong shape (none)"),
        ErrorCase(WITH_GRAD.name, dict(base, grad=np.ones(4, np.float32)), XLossValueError,
                  r"grad must be a scalar \(one element\) for reduction='mean'", "grad array for mean"),
        ErrorCase(WITH_GRAD.name, dict(base, target=np.array([0, 9, 1, 1]), grad_out=np.full((4, 3), 7.0, np.float32)),
                  XLossIndexError, r"target\[1\] = 9 is out of range", "out-of-range target with grad_out", "grad_out"),
        ErrorCase(WITH_GRAD.name, dict(base, grad_out=np.full((4, 3), 7.0, np.float64)), XLossTypeError,
                  r"grad_out must have dtype float32", "grad_out of the wrong dtype", "grad_out"),
    ]
    return out


def call_with_grad(case: Case, backend):
    return tuple(np.asarray(o) for o in api.cross_entropy_loss_with_grad(**case.kwargs, backend=backend))


def oracle_with_grad(case: Case):
    kw = dict(case.kwargs)
    return ref.cross_entropy_loss_with_grad(kw.pop("input"), kw.pop("target"), kw.pop("grad"), **kw)


def allowed_with_grad(case: Case, expected, caps=None):
    """The loss as the forward's; the gradient as the backward's at the exact log-probabilities, plus what the
    fused kernel's own probabilities may carry: ``p`` relative to within ``(|x| + A) eps``, as the forward's
    log_prob (absolute) allowance."""
    kw = dict(case.kwargs)
    grad = kw.pop("grad")
    x = as_f64(kw["input"])
    loss_ok = allowed_forward(Case(FORWARD.name, None, case.dtype, kw), (expected[0], expected[1]))[0]
    log_prob, lse = ref.log_softmax_rows(x)
    back = dict(kw, grad=grad, log_prob=log_prob)
    del back["input"]
    grad_ok = allowed_grad(Case(GRAD.name, None, case.dtype, back), (expected[1],))[0]
    n, c = x.shape
    t, keep, w, w_t, a = _row_terms(kw, x, lse)
    g = np.abs(as_f64(grad)).reshape(-1)
    g = np.broadcast_to(g, (n,)) if kw["reduction"] == "none" else np.full(n, g[0] if g.size else 0.0)
    d = w_t.sum() if kw["reduction"] == "mean" else 1.0
    ls = kw.get("label_smoothing", 0.0)
    coef = np.where(keep, g * (w_t + ls / c * w.sum()) / (d or 1.0), 0.0)
    ax = np.where(np.isfinite(x), np.abs(x), 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(log_prob)
        extra = np.where(np.isfinite(p), p, 0.0) * coef[:, None] * (ax + a[:, None])
    return loss_ok, grad_ok + allowance(np.zeros_like(extra), extra, case.dtype)


WITH_GRAD_DESCRIPTOR = KernelDescriptor(
    spec=WITH_GRAD, draw_case=draw_with_grad, edge_cases=with_grad_edges, error_cases=with_grad_errors,
    call=call_with_grad, oracle=oracle_with_grad, allowed=allowed_with_grad,
    output_names=lambda mode: ("loss", "grad_input"), shrinking=SHRINKING)
