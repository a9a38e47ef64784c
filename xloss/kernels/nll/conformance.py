"""Descriptor of the NLL-loss backward (no modes; variants: (C), (N, C) or (N, C, d1, ..., dk) input, weight,
target dtype).

``xloss.conformance.nll`` is this module (an alias).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss import dtypes as xdt
from xloss import reference
from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance, underflow
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossIndexError, XLossTypeError, XLossValueError
from xloss.reference import as_f64

from . import ROW as NLL_GRAD
from . import api

_INDEX = {"int64": np.int64, "int32": np.int32, "uint8": np.uint8}


def _kwargs(self_values, target, dtype, *, reduction, grad=1.0, weight=None, ignore_index=-100, total_weight=None):
    kw = dict(grad=grad, self=V.cast(self_values, dtype), target=target, reduction=reduction,
              ignore_index=ignore_index)
    if weight is not None:
        kw["weight"] = V.cast(weight, dtype)
    if total_weight is not None:
        kw["total_weight"] = total_weight
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
    t = np.array(draw(st.lists(st.integers(0, hi - 1), min_size=n, max_size=n)) if n <= V.ELEMENTWISE_MAX else
                 np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, hi, n), dtype=np.int64)
    if tdtype != "uint8" and ignore_index < 0 and t.size and draw(st.booleans(), label="some rows ignored"):
        t[np.random.default_rng(t.size).random(t.size) < 0.3] = ignore_index
    target = t.reshape(t_shape).astype(_INDEX[tdtype])
    self_values = -np.abs(V.draw_values(draw, math.prod(shape), V.GRAD_DISTS)).reshape(shape)
    reduction = draw(st.sampled_from(sorted(caps.reductions)), label="reduction")
    weight = None
    if draw(st.sampled_from(sorted(caps.variants["weight"])), label="weighted"):
        weight = V.draw_values(draw, c, V.WEIGHT_DISTS)
    total_weight = draw(st.one_of(st.none(), st.floats(0.5, 50.0)), label="total_weight") \
        if reduction == "mean" else None
    grad = V.draw_upstream(draw, reduction, t_shape, dtype, per_element=layout != "C")
    return Case(NLL_GRAD.name, None, dtype, _kwargs(self_values, target, dtype, reduction=reduction, grad=grad,
                                                     weight=weight, ignore_index=ignore_index,
                                                     total_weight=total_weight))


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    cases = []
    rng = np.random.default_rng(2)

    def add(label, shape, target, **kw):
        cases.append(Case(NLL_GRAD.name, None, dtype, _kwargs(-rng.random(shape), target, dtype, **kw), label))

    for red in ("none", "mean", "sum"):
        add(f"no rows, {red}", (0, 5), np.zeros(0, np.int64), reduction=red)
        add(f"1-D input, {red}", (7,), np.array(3), reduction=red)
        add(f"1-D input ignored, {red}", (7,), np.array(-100), reduction=red)
        add(f"all rows ignored, {red}", (9, 4), np.full(9, -100), reduction=red)
        add(f"one class, {red}", (6, 1), np.zeros(6, np.int64), reduction=red, weight=np.array([2.0]))
    t = rng.integers(0, 300, 4097)
    t[::7] = -100
    for red in ("none", "mean", "sum"):
        add(f"N=4097 C=300 with ignored rows, {red}", (4097, 300), t, reduction=red,
            grad=V.cast(rng.uniform(-1, 1, 4097), dtype) if red == "none" else 0.5, weight=rng.uniform(0, 2, 300))
    add("total_weight 0 (mean): inf/nan rows", (5, 3), np.array([0, 1, -100, 2, 1]), reduction="mean",
        total_weight=0.0, weight=np.array([1.0, 0.0, 2.0]))
    add("total_weight 0, every row ignored: zeros", (4, 3), np.full(4, -100), reduction="mean", total_weight=0.0)
    add("default total_weight 0 (zero class weights)", (4, 3), np.array([0, 0, 1, 1]), reduction="mean",
        weight=np.array([0.0, 0.0, 1.0]))
    add("ignore_index is a valid class", (8, 4), np.array([0, 1, 2, 3, 0, 1, 2, 3]), reduction="mean",
        ignore_index=2)
    # the tolerance contract: g/total_weight of a subnormal g may underflow in the compute dtype
    for red in ("mean", "sum"):
        add(f"subnormal upstream gradient, {red}", (4, 3), np.array([0, 1, 2, 1]), reduction=red,
            grad=V.smallest_subnormal(dtype), weight=np.array([3e4, 0.5, 2.0]))
    add("uint8 targets", (6, 300), np.array([0, 255, 17, 3, 200, 9], np.uint8), reduction="sum")
    add("int32 targets", (5, 4), np.array([3, 2, 1, 0, -100], np.int32), reduction="mean")
    # (N, C, d1, ..., dk): every position a row; non-square planes, so a plane read transposed shows
    t4 = rng.integers(0, 5, (3, 4, 7))
    t4[rng.random(t4.shape) < 0.2] = -100
    for red in ("none", "mean", "sum"):
        add(f"4-D input (N, C, H, W) with ignored positions, {red}", (3, 5, 4, 7), t4, reduction=red,
            grad=V.cast(rng.uniform(-1, 1, t4.shape), dtype) if red == "none" else 0.75, weight=rng.uniform(0, 2, 5))
        add(f"no positions (a zero spatial dim), {red}", (2, 3, 0, 4), np.zeros((2, 0, 4), np.int64), reduction=red)
        add(f"4-D input, every position ignored, {red}", (2, 3, 2, 5), np.full((2, 2, 5), -100), reduction=red)
    add("3-D input (N, C, L), none with one grad", (2, 4, 9), rng.integers(0, 4, (2, 9)), reduction="none", grad=-1.5)
    add("3-D input (N, C, L), none", (2, 4, 9), rng.integers(0, 4, (2, 9)), reduction="none",
        grad=V.cast(rng.uniform(-1, 1, (2, 9)), dtype))
    add("5-D input, sum", (2, 3, 2, 3, 4), rng.integers(0, 3, (2, 2, 3, 4)), reduction="sum", grad=-0.5)
    add("4-D input, W = 1, none", (2, 6, 5, 1), rng.integers(0, 6, (2, 5, 1)), reduction="none",
        grad=V.cast(rng.uniform(-1, 1, (2, 5, 1)), dtype))
    add("4-D input, H = 1, mean", (2, 6, 1, 5), rng.integers(0, 6, (2, 1, 5)), reduction="mean",
        weight=rng.uniform(0.5, 1.5, 6))
    add("4-D input, caller's total_weight, mean", (2, 4, 3, 2), rng.integers(0, 4, (2, 3, 2)), reduction="mean",
        total_weight=7.25)
    add("4-D input, ignore_index is a valid class, mean", (2, 4, 3, 5), rng.integers(0, 4, (2, 3, 5)),
        reduction="mean", ignore_index=1)
    add("4-D uint8 targets, none", (2, 300, 2, 3), np.array([[[0, 255, 17], [3, 200, 9]]] * 2, np.uint8),
        reduction="none", grad=V.cast(rng.uniform(-1, 1, (2, 2, 3)), dtype))
    add("4-D int32 targets, sum", (2, 4, 2, 3), np.array([[[3, 2, 1], [0, -100, 2]]] * 2, np.int32), reduction="sum")
    t4 = rng.integers(0, 19, (2, 33, 40))
    t4[rng.random(t4.shape) < 0.1] = -100
    add("N=2 C=19 33x40 with ignored positions, none", (2, 19, 33, 40), t4, reduction="none",
        grad=V.cast(rng.uniform(-2, 2, t4.shape), dtype), weight=rng.uniform(0, 2, 19))
    return cases


def error_cases() -> list[ErrorCase]:
    s = -np.random.default_rng(3).random((4, 3)).astype(np.float32)
    t = np.array([0, 2, 1, -100])
    base = dict(grad=1.0, self=s, target=t)
    errs = [
        ("self 0-d", dict(base, self=np.float32(-1.0), target=np.array(0)), XLossValueError,
         r"self must have shape \(C\), \(N, C\) or \(N, C, d1, ..., dk\); got \(\)"),
        ("target of a 4-D self without its spatial dims", dict(base, self=s.reshape(1, 3, 2, 2), target=t[:1]),
         XLossValueError, r"target must have shape \(1, 2, 2\) for self of shape \(1, 3, 2, 2\); got \(1,\)"),
        ("grad of the wrong shape (none, 4-D)", dict(base, self=s.reshape(1, 3, 2, 2), target=np.zeros((1, 2, 2), int),
                                                     reduction="none", grad=np.ones((1, 4), np.float32)),
         XLossValueError, r"grad must have shape \(1, 2, 2\)"),
        ("4-D target out of range", dict(base, self=s.reshape(1, 3, 2, 2), target=np.array([[[0, 1], [3, 2]]])),
         XLossIndexError, r"target\[2\] = 3 is out of range"),
        ("self integer", dict(base, self=np.zeros((4, 3), np.int32)), XLossTypeError, r"self must have a floating"),
        ("target float", dict(base, target=t.astype(np.float32)), XLossTypeError,
         r"target must have dtype int64, int32 or uint8; got float32"),
        ("target int16", dict(base, target=t.astype(np.int16)), XLossTypeError, r"target must have dtype"),
        ("target bool", dict(base, target=np.ones(4, bool)), XLossTypeError, r"target must have dtype"),
        ("target wrong length", dict(base, target=t[:3]), XLossValueError,
         r"target must have shape \(4,\) for self of shape \(4, 3\); got \(3,\)"),
        ("target not 0-d for 1-D self", dict(base, self=s[0], target=np.array([1])), XLossValueError,
         r"target must have shape \(\) for self of shape \(3,\)"),
        ("target out of range", dict(base, target=np.array([0, 3, 1, 1])), XLossIndexError,
         r"target\[1\] = 3 is out of range: class indices must lie in \[0, 3\)"),
        ("negative target", dict(base, target=np.array([0, 1, -5, 1])), XLossIndexError,
         r"target\[2\] = -5 is out of range"),
        ("1-D target out of range", dict(base, self=s[0], target=np.array(7)), XLossIndexError,
         r"target = 7 is out of range"),
        ("ignore_index float", dict(base, ignore_index=-100.0), XLossTypeError, r"ignore_index must be an integer"),
        ("weight wrong shape", dict(base, weight=np.ones(4, np.float32)), XLossValueError,
         r"weight must have shape \(3,\); got \(4,\)"),
        ("grad wrong shape (none)", dict(base, reduction="none", grad=np.ones(3, np.float32)), XLossValueError,
         r"grad must have shape \(4,\)"),
        ("grad array for mean", dict(base, grad=np.ones(4, np.float32)), XLossValueError,
         r"grad must be a scalar \(one element\) for reduction='mean'"),
        ("total_weight nan", dict(base, total_weight=float("nan")), XLossValueError, r"total_weight must be finite"),
        ("bad reduction", dict(base, reduction="batchmean"), XLossValueError, r"reduction must be one of"),
    ]
    out = [ErrorCase("nll_loss_grad", kw, exc, match, label) for label, kw, exc, match in errs]
    wrong = dict(base, target=np.array([0, 9, 1, 1]), out=np.full((4, 3), 7.0, np.float32))
    out.append(ErrorCase("nll_loss_grad", wrong,
                         XLossIndexError, r"target\[1\] = 9 is out of range", "out-of-range target with out", "out"))
    out.append(ErrorCase("nll_loss_grad", dict(base, out=np.full((3, 3), 7.0, np.float32)), XLossValueError,
                         r"out must have shape \(4, 3\)", "out of wrong shape", "out"))
    return out


def call(case: Case, backend):
    return (np.asarray(api.nll_loss_grad(**case.kwargs, backend=backend)),)


def oracle(case: Case):
    kw = dict(case.kwargs)
    return (reference.nll_loss_grad(kw.pop("grad"), kw.pop("self"), kw.pop("target"), **kw),)


def allowed(case: Case, expected, caps=None):
    # -w * g / total_weight: three roundings; the default total weight is a float sum over N rows.
    # Vendor ABIs take grad and total_weight as tensors of self's dtype, so a 16-bit request may
    # round each of them once on the way in: half an ulp of the dtype each, relative.
    n = np.size(case.kwargs["target"])
    factor = 3.0 + (math.log2(n + 1) if case.kwargs["reduction"] == "mean" else 0.0)
    o = np.abs(as_f64(expected[0]))
    o = np.where(np.isfinite(o), o, 0.0)
    scalar_rounding = xdt.eps(case.dtype) * o if case.dtype in ("float16", "bfloat16") else 0.0
    # w, g and 1/total_weight in any order, each product free to underflow (descriptor.underflow)
    kw = case.kwargs
    w = np.max(np.abs(as_f64(kw["weight"])), initial=1.0) if kw.get("weight") is not None else 1.0
    g = np.max(np.abs(as_f64(kw["grad"])), initial=0.0)
    tw = kw.get("total_weight")
    if tw is None and kw["reduction"] == "mean":  # the default: the weights of the kept rows
        t = np.asarray(kw["target"]).reshape(-1).astype(np.int64)
        t = t[t != kw.get("ignore_index", -100)]
        tw = float(np.abs(as_f64(kw["weight"]))[t].sum()) if kw.get("weight") is not None else float(t.size)
    inv_tw = 1.0 / abs(float(tw)) if kw["reduction"] == "mean" and tw else 1.0
    return (allowance(expected[0], o * factor, case.dtype) + scalar_rounding + underflow(case.dtype, w, g, inv_tw),)


# -- the shrinker's and the large ladder's view of a case: a unit is a sample (a row of a 2-D input, an
# (C, d1, ..., dk) block of an N-d one)

def _units(case: Case) -> int:
    s = case.kwargs["self"]
    return int(np.shape(s)[0]) if np.ndim(s) >= 2 else 0


def _select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    t_shape = np.shape(kw["target"])
    kw["self"], kw["target"] = kw["self"][keep], kw["target"][keep]
    if isinstance(kw["grad"], np.ndarray) and kw["grad"].shape == t_shape:
        kw["grad"] = kw["grad"][keep]
    return kw


def _unit_of(case: Case, flat_index: int, output: int) -> int:
    s = case.kwargs["self"]  # a sample of a batched input (a 1-D input is one unit: no hint)
    return flat_index // max(1, math.prod(np.shape(s)[1:])) if np.ndim(s) >= 2 else -1


#: the NLL backward: a sample of a batched input.
SHRINKING = Shrinking(_units, _select, _unit_of)

#: (label, N, C, reduction) of the large rungs (every rung agrees across runs and configurations):
#: C in the tens of thousands with enough rows for every core.
LARGE = (
    ("N=67 C=32003, none", 67, 32003, "none"),
    ("N=263 C=20011, mean", 263, 20011, "mean"),
)


def _large(dtype, seed, label, n, c, reduction, target_dtype) -> Case:
    rng = large.rng_for(seed, NLL_GRAD.name, dtype, target_dtype, label)
    t = rng.integers(0, c, n)
    t[rng.random(n) < 0.1] = -100
    self_values = -np.abs(rng.normal(0.0, 3.0, (n, c)))
    kw = _kwargs(self_values, t.astype(np.dtype(target_dtype)), dtype, reduction=reduction,
                 grad=V.cast(rng.uniform(-2.0, 2.0, n), dtype) if reduction == "none" else 0.75,
                 weight=rng.uniform(0.0, 2.0, c) if reduction == "mean" else None)
    return Case(NLL_GRAD.name, None, dtype, kw, f"large: {label}, {target_dtype} targets")


def _large_rung(n, c, reduction):
    def period(dtype, mode, seed, label, caps):
        declared = sorted(caps.variants["target_dtype"]) if caps is not None else ["int64"]
        tdt = "int64" if "int64" in declared else "int32" if "int32" in declared else None
        return None if tdt is None else _large(dtype, seed, label, n, c, reduction, tdt)

    return period


#: (label, (N, C, H, W)) of the N-d rung: a segmentation map, per-position upstream gradient, every core past 65536
LARGE_MAP = ("N=4 C=21 80x81 (a segmentation map), none", (4, 21, 80, 81))


def _large_map(dtype, mode, seed, label, caps):
    if caps is not None and "NCd" not in caps.variants["input"]:
        return None
    declared = sorted(caps.variants["target_dtype"]) if caps is not None else ["int64"]
    tdt = "int64" if "int64" in declared else "int32" if "int32" in declared else "uint8"
    shape = LARGE_MAP[1]
    rng = large.rng_for(seed, NLL_GRAD.name, dtype, tdt, label)
    t_shape = (shape[0], *shape[2:])
    t = rng.integers(0, shape[1], t_shape)
    t[rng.random(t_shape) < 0.1] = 255 if tdt == "uint8" else -100
    kw = _kwargs(-np.abs(rng.normal(0.0, 3.0, shape)), t.astype(np.dtype(tdt)), dtype, reduction="none",
                 grad=V.cast(rng.uniform(-2.0, 2.0, t_shape), dtype), weight=rng.uniform(0.0, 2.0, shape[1]),
                 ignore_index=255 if tdt == "uint8" else -100)
    return Case(NLL_GRAD.name, None, dtype, kw, f"large: {label}, {tdt} targets")


LADDER = large.Ladder(tuple(large.Rung(label, 1, True, _large_rung(n, c, red)) for label, n, c, red in LARGE)
                      + (large.Rung(LARGE_MAP[0], 1, True, _large_map),), "self",
                      per_class=("weight",), mean_as_sum=large.mean_as_sum)


DESCRIPTOR = KernelDescriptor(spec=NLL_GRAD, draw_case=draw_case, edge_cases=edge_cases,
                              error_cases=error_cases, call=call, oracle=oracle, allowed=allowed,
                              output_names=lambda mode: ("grad_input",), shrinking=SHRINKING,
                              ladder=LADDER)
