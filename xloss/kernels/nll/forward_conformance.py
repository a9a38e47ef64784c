"""Descriptor of the NLL-loss forward (no modes; variants: (C) / (N, C) / (N, C, d...) input, weight, target dtype).

Outputs: the loss and ``total_weight``. Tolerances: one rounding per position for ``none``; for a sum, a careful
float accumulation (log2(n) roundings of the running sum) of the terms ``w*x``; ``mean`` adds the total weight's
own summation error, relative, through the division.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossIndexError, XLossTypeError, XLossValueError
from xloss.reference import as_f64
from xloss.reference import nll as ref_nll

from . import FORWARD, api

_INDEX = {"int64": np.int64, "int32": np.int32, "uint8": np.uint8}
LOGP_DISTS = (
    V.uniform("log-probabilities", -12.0, 0.0, (0.0, -0.0, -1e-30, -1e-7)),
    V.uniform("very negative log-probabilities", -1e4, 0.0, (-100.0, -745.0, -1e4, 0.0)),
)


def _kwargs(logp, target, dtype, *, reduction, weight=None, ignore_index=-100):
    kw = dict(self=V.cast(logp, dtype), target=target, reduction=reduction, ignore_index=ignore_index)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    return kw


def _shape(draw, layout: str, c: int) -> tuple:
    if layout == "C":
        return (c,)
    if layout == "NC":
        return (draw(st.one_of(st.integers(0, 24), st.sampled_from(V.ODD_SIZES)), label="N"), c)
    dims = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3), label="d1..dk")
    return (draw(st.integers(0, 4), label="N"), c, *dims)


def draw_case(draw, dtype, mode, caps) -> Case:
    layout = draw(st.sampled_from(sorted(caps.variants["input"])), label="input layout")
    tdtype = draw(st.sampled_from(sorted(caps.variants["target_dtype"])), label="target dtype")
    c = draw(st.one_of(st.integers(1, 12), st.sampled_from((1, 2, 17, 64, 255, 1000))), label="C")
    shape = _shape(draw, layout, c)
    t_shape = (shape[0], *shape[2:]) if len(shape) >= 2 else ()
    n = math.prod(t_shape)
    hi = min(c, 256) if tdtype == "uint8" else c
    ignore_index = draw(st.sampled_from((-100, -1, 0, hi - 1) if tdtype != "uint8" else (-100, 0, hi - 1)),
                        label="ignore_index")
    t = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="target seed")).integers(0, hi, max(n, 1))
    if tdtype != "uint8" and ignore_index < 0 and draw(st.booleans(), label="some positions ignored"):
        t[np.random.default_rng(n).random(t.size) < 0.3] = ignore_index
    target = t[:n].reshape(t_shape).astype(_INDEX[tdtype])
    logp = -np.abs(V.draw_values(draw, math.prod(shape), LOGP_DISTS)).reshape(shape)
    reduction = draw(st.sampled_from(sorted(caps.reductions)), label="reduction")
    weight = V.draw_values(draw, c, V.WEIGHT_DISTS) \
        if draw(st.sampled_from(sorted(caps.variants["weight"])), label="weighted") else None
    return Case(FORWARD.name, None, dtype, _kwargs(logp, target, dtype, reduction=reduction, weight=weight,
                                                   ignore_index=ignore_index))


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    cases = []
    rng = np.random.default_rng(5)

    def add(label, logp, target, **kw):
        cases.append(Case(FORWARD.name, None, dtype, _kwargs(logp, np.asarray(target), dtype, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"no rows, {red}", -rng.random((0, 5)), np.zeros(0, np.int64), reduction=red)
        add(f"no positions (N, C, 0), {red}", -rng.random((2, 3, 0)), np.zeros((2, 0), np.int64), reduction=red)
        add(f"(C) input, {red}", -rng.random(7), 3, reduction=red, weight=rng.uniform(0, 2, 7))
        add(f"(C) input ignored, {red}", -rng.random(7), -100, reduction=red)
        add(f"all rows ignored, {red}", -rng.random((9, 4)), np.full(9, -100), reduction=red)
        add(f"zero total weight, {red}", -rng.random((4, 3)), [0, 0, 2, 2], reduction=red,
            weight=np.array([0.0, 1.0, 0.0]))
        add(f"log-probability -inf (probability 0), {red}", np.array([[0.0, -np.inf], [-np.inf, -1.0]]), [1, 1],
            reduction=red)
        add(f"-inf at a zero-weight class, {red}", np.array([[0.0, -np.inf], [-0.5, -1.0]]), [1, 0], reduction=red,
            weight=np.array([1.0, 0.0]))
        add(f"one class, {red}", -rng.random((6, 1)), np.zeros(6, np.int64), reduction=red, weight=np.array([2.0]))
        add(f"(N, C, H, W) with ignored pixels, {red}", -5 * rng.random((3, 5, 4, 7)),
            np.where(rng.random((3, 4, 7)) < 0.2, -100, rng.integers(0, 5, (3, 4, 7))), reduction=red,
            weight=rng.uniform(0, 2, 5))
        add(f"(N, C, d1) odd sizes, {red}", -5 * rng.random((2, 3, 129)), rng.integers(0, 3, (2, 129)),
            reduction=red)
    t = rng.integers(0, 37, 4097)
    t[::7] = -100
    for red in ("none", "mean", "sum"):  # rows past a block (the cpu kernel's are 16384 positions: the N-d case)
        add(f"N=4097 C=37 with ignored rows, {red}", -20 * rng.random((4097, 37)), t, reduction=red,
            weight=rng.uniform(0, 2, 37))
    add("ignore_index is a valid class", -rng.random((8, 4)), [0, 1, 2, 3, 0, 1, 2, 3], reduction="mean",
        ignore_index=2)
    add("uint8 targets", -rng.random((6, 300)), np.array([0, 255, 17, 3, 200, 9], np.uint8), reduction="sum")
    add("int32 targets", -rng.random((5, 4)), np.array([3, 2, 1, 0, -100], np.int32), reduction="mean")
    add("large N, many positions per row (mean)", -3 * rng.random((2, 4, 20000)), rng.integers(0, 4, (2, 20000)),
        reduction="mean", weight=rng.uniform(0.5, 1.5, 4))
    return cases


def error_cases() -> list[ErrorCase]:
    s = -np.random.default_rng(3).random((4, 3)).astype(np.float32)
    t = np.array([0, 2, 1, -100])
    base = dict(self=s, target=t)
    errs = [
        ("self 0-d", dict(base, self=np.float32(-1.0), target=np.array(0)), XLossValueError,
         r"self must have shape \(C\), \(N, C\) or \(N, C, d1, ..., dk\); got \(\)"),
        ("self integer", dict(base, self=np.zeros((4, 3), np.int32)), XLossTypeError, r"self must have a floating"),
        ("target float", dict(base, target=t.astype(np.float32)), XLossTypeError,
         r"target must have dtype int64, int32 or uint8; got float32"),
        ("target int16", dict(base, target=t.astype(np.int16)), XLossTypeError, r"target must have dtype"),
        ("target wrong length", dict(base, target=t[:3]), XLossValueError,
         r"target must have shape \(4,\) for self of shape \(4, 3\); got \(3,\)"),
        ("target of a 4-D self without its spatial dims", dict(base, self=s.reshape(1, 3, 2, 2), target=t[:1]),
         XLossValueError, r"target must have shape \(1, 2, 2\) for self of shape \(1, 3, 2, 2\); got \(1,\)"),
        ("target not 0-d for (C) self", dict(base, self=s[0], target=np.array([1])), XLossValueError,
         r"target must have shape \(\) for self of shape \(3,\)"),
        ("target out of range", dict(base, target=np.array([0, 3, 1, 1])), XLossIndexError,
         r"target\[1\] = 3 is out of range: class indices must lie in \[0, 3\)"),
        ("negative target", dict(base, target=np.array([0, 1, -5, 1])), XLossIndexError,
         r"target\[2\] = -5 is out of range"),
        ("ignore_index float", dict(base, ignore_index=-100.0), XLossTypeError, r"ignore_index must be an integer"),
        ("weight wrong shape", dict(base, weight=np.ones(4, np.float32)), XLossValueError,
         r"weight must have shape \(3,\); got \(4,\)"),
        ("bad reduction", dict(base, reduction="batchmean"), XLossValueError, r"reduction must be one of"),
    ]
    out = [ErrorCase(FORWARD.name, kw, exc, match, label) for label, kw, exc, match in errs]
    out.append(ErrorCase(FORWARD.name, dict(base, target=np.array([0, 9, 1, 1]), out=np.full((), 7.0, np.float32)),
                         XLossIndexError, r"target\[1\] = 9 is out of range", "out-of-range target with out", "out"))
    out.append(ErrorCase(FORWARD.name, dict(base, reduction="none", out=np.full((3,), 7.0, np.float32)),
                         XLossValueError, r"out must have shape \(4,\)", "out of wrong shape (none)", "out"))
    out.append(ErrorCase(FORWARD.name, dict(base, total_weight_out=np.full((), 7.0, np.float64)), XLossTypeError,
                         r"total_weight_out must have dtype float32", "total_weight_out of another dtype",
                         "total_weight_out"))
    return out


def call(case: Case, backend):
    loss, total_weight = api.nll_loss(**case.kwargs, backend=backend)
    return np.asarray(loss), np.asarray(total_weight)


def oracle(case: Case):
    kw = dict(case.kwargs)
    return ref_nll.nll_loss(kw.pop("self"), kw.pop("target"), **kw)


def _terms(kw) -> tuple[np.ndarray, np.ndarray]:
    """(|w[t] * x[.., t, ..]|, w[t]) per position not ignored (float64)."""
    x, t = ref_nll.rows_view(kw["self"], kw["target"])
    w = np.ones(x.shape[1]) if kw.get("weight") is None else as_f64(kw["weight"])
    keep = np.nonzero(t != kw.get("ignore_index", -100))[0]
    w_t = w[t[keep]]
    with np.errstate(invalid="ignore"):
        return np.abs(w_t * x[keep, t[keep]]), w_t


def allowed(case: Case, expected, caps=None):
    kw = case.kwargs
    loss, tw = (as_f64(e) for e in expected)
    terms, w_t = _terms(kw)
    terms = np.where(np.isfinite(terms), terms, 0.0)
    depth = 1.0 + math.log2(terms.size + 1)  # roundings a term sees in a careful (blocked/pairwise) sum
    tw_scale = depth * float(np.abs(w_t).sum())
    if kw["reduction"] == "none":
        loss_allow = allowance(loss, np.abs(np.where(np.isfinite(loss), loss, 0.0)), case.dtype)
    else:
        scale = depth * float(terms.sum())
        if kw["reduction"] == "mean":
            t = float(np.abs(w_t).sum())
            scale = (scale + abs(float(loss)) * tw_scale) / t if t else 0.0
            scale = scale if math.isfinite(scale) else 0.0
        loss_allow = allowance(loss, scale, case.dtype)
    return loss_allow, allowance(tw, tw_scale, case.dtype)


# -- the shrinker's view of a case: a unit is a sample (a row of the leading axis)

def _units(case: Case) -> int:
    s = case.kwargs["self"]
    return int(np.shape(s)[0]) if np.ndim(s) >= 2 else 0


def _select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    kw["self"], kw["target"] = kw["self"][keep], kw["target"][keep]
    return kw


def _unit_of(case: Case, flat_index: int, output: int) -> int:
    t = case.kwargs["target"]  # the loss of none has target's shape: its leading index is the sample
    if output != 0 or case.kwargs["reduction"] != "none" or np.ndim(t) == 0:
        return -1
    return flat_index // max(1, math.prod(np.shape(t)[1:]))


SHRINKING = Shrinking(_units, _select, _unit_of)

DESCRIPTOR = KernelDescriptor(spec=FORWARD, draw_case=draw_case, edge_cases=edge_cases, error_cases=error_cases,
                              call=call, oracle=oracle, allowed=allowed,
                              output_names=lambda mode: ("loss", "total_weight"), shrinking=SHRINKING)
