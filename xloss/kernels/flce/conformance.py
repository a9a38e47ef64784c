"""Descriptor of the fused linear-cross-entropy gradients (modes: softmax given, recompute)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss import dtypes as xdt
from xloss import reference
from xloss.conformance import large
from xloss.conformance import values as V
from xloss.conformance.descriptor import K_SLACK, Case, ErrorCase, KernelDescriptor, allowance
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64

from . import FLCE_GRAD, api


def shard_case(dtype, mode, *, x, w_global, target, start, v, grad, mask_format="bool", target_dtype=np.int64,
               label_smoothing=0.0, label="") -> Case:
    """Build one shard's arguments (rows [start, start+v) of a global vocabulary) from full-problem data."""
    x = V.cast(x, dtype)
    w_global = V.cast(w_global, dtype)
    cdt = xdt.compute_dtype(dtype)
    k = w_global.shape[0]
    logits = as_f64(x) @ as_f64(w_global).T
    if k:
        gmax = logits.max(axis=1) if logits.size else np.zeros(len(x))
        gsum = np.exp(logits - gmax[:, None]).sum(axis=1)
    else:
        gmax = gsum = np.zeros(len(x))
    target = np.asarray(target, dtype=np.int64)
    in_shard = (target >= start) & (target < start + v)
    mask = ~in_shard
    kw = dict(grad=np.asarray(grad, dtype=cdt), input=x, weight=w_global[start:start + v],
              target_mask=reference.pack_mask(mask) if mask_format == "bitpacked" else mask,
              masked_target=np.where(in_shard, target - start, 0).astype(target_dtype))
    if mode == "softmax":
        kw["softmax"] = (np.exp(logits[:, start:start + v] - gmax[:, None]) / gsum[:, None]).astype(cdt)
    else:
        kw["logits_max"], kw["sum_exp_logits"] = gmax.astype(cdt), gsum.astype(cdt)
    if label_smoothing:
        kw["label_smoothing"], kw["vocab_size"] = label_smoothing, k
    return Case(FLCE_GRAD.name, mode, dtype, kw, label)


def draw_case(draw, dtype, mode, caps) -> Case:
    bt = draw(st.one_of(st.integers(0, 12), st.sampled_from((1, 8, 9, 17, 33))), label="BT")
    h = draw(st.integers(1, 16), label="H")
    k = draw(st.integers(1, 40), label="global vocab")
    start = draw(st.integers(0, k - 1), label="shard start")
    v = draw(st.integers(1, k - start), label="V")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    sharpness = draw(st.sampled_from((1.0, 0.25, 4.0, 16.0)), label="logit scale")
    x = rng.uniform(-1, 1, (bt, h)) * sharpness
    w = rng.uniform(-1, 1, (k, h))
    target = rng.integers(0, k, bt)
    if draw(st.booleans(), label="some tokens ignored"):
        target[rng.random(bt) < 0.25] = -100
    grad = np.where(target == -100, 0.0, rng.uniform(-1, 1, bt))
    ls = 0.0
    if draw(st.sampled_from(sorted(caps.variants["label_smoothing"])), label="label smoothing"):
        ls = draw(st.one_of(st.just(0.1), st.floats(0.01, 0.5)), label="label_smoothing")
    return shard_case(dtype, mode, x=x, w_global=w, target=target, start=start, v=v, grad=grad,
                      mask_format=draw(st.sampled_from(sorted(caps.variants["mask"])), label="mask format"),
                      target_dtype=draw(st.sampled_from((np.int64, np.int32)), label="masked_target dtype"),
                      label_smoothing=ls)


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    rng = np.random.default_rng(4)
    cases = []

    def add(label, bt, h, k, start, v, *, target=None, scale=1.0, **kw):
        x = rng.uniform(-1, 1, (bt, h)) * scale
        w = rng.uniform(-1, 1, (k, h))
        t = rng.integers(0, k, bt) if target is None else np.asarray(target)
        grad = np.where(t == -100, 0.0, rng.uniform(-1, 1, bt))
        for fmt in ("bool", "bitpacked"):
            cases.append(shard_case(dtype, mode, x=x, w_global=w, target=t, start=start, v=v, grad=grad,
                                    mask_format=fmt, label=f"{label}, {fmt} mask", **kw))

    add("no tokens", 0, 4, 6, 0, 6)
    add("one token", 1, 3, 5, 1, 3)
    add("every target in another shard", 9, 4, 20, 0, 5, target=np.arange(10, 19))
    add("every target in this shard", 9, 4, 20, 5, 10, target=np.arange(5, 14))
    add("ignored tokens", 12, 5, 8, 0, 8, target=np.array([0, -100, 3, -100, 7, 1, -100, 2, 5, 6, 4, -100]))
    add("one-row shard", 7, 6, 9, 4, 1, target=np.array([4, 4, 0, 8, 4, 2, 4]))
    add("BT=17 (partial mask byte)", 17, 8, 30, 10, 12)
    add("BT=64, H=32, V=100", 64, 32, 160, 40, 100)
    add("peaked logits", 16, 8, 24, 0, 24, scale=30.0)
    add("label smoothing over a larger vocabulary", 10, 6, 50, 20, 15, label_smoothing=0.1)
    # (last: the cases above keep their draws of rng) enough tokens for the statistics (error scale,
    # G rounding bias) to tell how often partial sums of the weight gradient are rounded: 128 chunks of 16 tokens
    add("many tokens: BT=2048, H=8, V=64", 2048, 8, 96, 16, 64)
    return cases


def error_cases() -> list[ErrorCase]:
    bt, h, v = 4, 3, 5
    x = np.ones((bt, h), np.float16)
    w = np.ones((v, h), np.float16)
    g = np.ones(bt, np.float32)
    mask = np.zeros(bt, bool)
    mt = np.zeros(bt, np.int64)
    lm, se = np.zeros(bt, np.float32), np.ones(bt, np.float32)
    base = dict(grad=g, input=x, weight=w, target_mask=mask, masked_target=mt, logits_max=lm, sum_exp_logits=se)
    errs = [
        ("input 1-D", dict(base, input=x[0]), XLossValueError, r"input must have shape \(BT, H\); got \(3,\)"),
        ("weight hidden mismatch", dict(base, weight=np.ones((v, 4), np.float16)), XLossValueError,
         r"weight must have shape \(V, 3\)"),
        ("weight dtype mismatch", dict(base, weight=w.astype(np.float32)), XLossTypeError,
         r"weight dtype float32 must match input dtype float16"),
        ("grad wrong shape", dict(base, grad=np.ones(3, np.float32)), XLossValueError, r"grad must have shape \(4,\)"),
        ("mask int32", dict(base, target_mask=np.zeros(bt, np.int32)), XLossTypeError,
         r"target_mask must be bool \(one per token\) or uint8 \(bit-packed"),
        ("bool mask wrong length", dict(base, target_mask=np.zeros(3, bool)), XLossValueError,
         r"target_mask \(bool\) must have shape \(4,\)"),
        ("packed mask wrong length", dict(base, target_mask=np.zeros(2, np.uint8)), XLossValueError,
         r"must have shape \(1,\) for BT=4"),
        ("masked_target out of range", dict(base, masked_target=np.array([0, 1, 5, 0])), XLossValueError,
         r"masked_target\[2\] = 5 is out of range"),
        ("masked_target negative", dict(base, masked_target=np.array([0, -1, 0, 0])), XLossValueError,
         r"masked_target\[1\] = -1 is out of range"),
        ("masked_target float", dict(base, masked_target=mt.astype(np.float32)), XLossTypeError,
         r"masked_target must have dtype int32 or int64"),
        ("softmax and logits both", dict(base, softmax=np.ones((bt, v), np.float32)), XLossValueError,
         r"pass either softmax .* not both"),
        ("recompute without sum_exp", dict(base, sum_exp_logits=None), XLossValueError,
         r"sum_exp_logits is required in recompute mode"),
        ("recompute without logits_max", dict(base, logits_max=None), XLossValueError,
         r"logits_max is required in recompute mode"),
        ("softmax wrong shape", dict(base, logits_max=None, sum_exp_logits=None, softmax=np.ones((bt, 4), np.float32)),
         XLossValueError, r"softmax must have shape \(4, 5\)"),
        ("label_smoothing 1", dict(base, label_smoothing=1.0), XLossValueError, r"label_smoothing must be in \[0, 1\)"),
        ("vocab_size below shard", dict(base, label_smoothing=0.1, vocab_size=3), XLossValueError,
         r"vocab_size .* must be >= this shard's V=5"),
    ]
    out = [ErrorCase("fused_linear_cross_entropy_grad", kw, exc, match, label) for label, kw, exc, match in errs]
    wrong = np.full((v, h), 7.0, np.float32)
    out.append(ErrorCase("fused_linear_cross_entropy_grad", dict(base, weight_grad_out=wrong),
                         XLossTypeError, r"weight_grad_out must have dtype float16", "weight_grad_out of wrong dtype",
                         "weight_grad_out"))
    out.append(ErrorCase("fused_linear_cross_entropy_grad", dict(base, masked_target=np.array([0, 9, 0, 0]),
                                                                 input_grad_out=np.full((bt, h), 7.0, np.float16)),
                         XLossValueError, r"masked_target\[1\] = 9 is out of range", "bad target with out",
                         "input_grad_out"))
    return out


def call(case: Case, backend):
    gi, gw = api.fused_linear_cross_entropy_grad(**case.kwargs, backend=backend)
    return np.asarray(gi), np.asarray(gw)


#: Rows per block of the oracle and the allowance: (BT, V) float64 temporaries stay near 32 MiB.
BLOCK_ELEMENTS = 1 << 22


def _blocks(bt: int, v: int):
    step = max(1, BLOCK_ELEMENTS // max(v, 1))
    return [slice(r, min(r + step, bt)) for r in range(0, bt, step)] or [slice(0, 0)]


def _rows(kw: dict, rows: slice) -> dict:
    """The keyword arguments of the rows ``rows`` of a case (the mask unpacked to bool)."""
    bt = np.shape(kw["input"])[0]
    out = dict(kw)
    for name in ("grad", "input", "masked_target", "softmax", "logits_max", "sum_exp_logits"):
        if kw.get(name) is not None:
            out[name] = np.asarray(kw[name])[rows]
    out["target_mask"] = reference.mask_as_bool(kw["target_mask"], bt)[rows]
    return out


def oracle(case: Case):
    kw = case.kwargs
    bt, h = np.shape(kw["input"])
    v = np.shape(kw["weight"])[0]
    gi, gw = np.zeros((bt, h)), np.zeros((v, h))
    for rows in _blocks(bt, v):
        part = _rows(kw, rows)
        args = [part.pop(k) for k in ("grad", "input", "weight", "target_mask", "masked_target")]
        a, b = reference.flce_grad(*args, **part)
        gi[rows] = a
        gw += b
    return gi, gw


def _g_error_blocks(case: Case):
    """Per block of tokens: ``(rows, x, err, g_abs)``: the input rows, the allowed error of each
    element of G (the terms a careful implementation combines times the compute epsilon, plus one
    ulp of the storage dtype for G's rounding to it) and ``|G|``."""
    kw = case.kwargs
    bt, h = np.shape(kw["input"])
    w = as_f64(kw["weight"])
    v = w.shape[0]
    ls = kw.get("label_smoothing", 0.0)
    k = kw.get("vocab_size", v)
    eps_c = xdt.eps(xdt.float_name(xdt.compute_dtype(case.dtype)))
    eps_s = xdt.eps(case.dtype)  # G rounded to the storage dtype (a no-op beyond eps_c for float32/64)
    abs_w = np.abs(w)
    for rows in _blocks(bt, v):
        part = _rows(kw, rows)
        x = as_f64(part["input"])
        if "softmax" in kw:
            p = as_f64(part["softmax"])
        else:
            p = reference.flce_probabilities(x, w, part["logits_max"], part["sum_exp_logits"])
            p = np.where(np.isfinite(p), p, 0.0)
        corr = np.zeros_like(p)
        in_rows = np.nonzero(~part["target_mask"])[0]
        corr[in_rows, np.asarray(part["masked_target"])[in_rows].astype(np.int64)] = 1.0 - ls
        g = np.abs(as_f64(part["grad"]))[:, None]
        terms = g * (p + corr + (ls / k if ls else 0.0))  # terms combined into G: cancellation allowed
        if "softmax" not in kw:  # a float32 logit error is a relative error of exp(logit - max)
            terms = terms + g * p * (np.abs(x) @ abs_w.T) * math.log2(h + 1)
        g_abs = g * np.abs(p - corr - (ls / k if ls else 0.0))
        yield rows, x, K_SLACK * eps_c * terms + eps_s * g_abs, g_abs


def allowed(case: Case, expected, caps=None):
    """The vendor contract: logits x.w in float32 (float64 for float64 inputs), G = grad * (p - onehot)
    formed in that precision and possibly rounded once to the storage dtype before the two GEMMs,
    which accumulate in float32. So the logit terms get the compute epsilon only (a port that forms
    logits in bf16 fails), the rounding of G one ulp of the storage dtype (twice the half ulp
    a round-to-nearest makes), and each GEMM a float32 accumulation over its inner dimension."""
    kw = case.kwargs
    bt, h = np.shape(kw["input"])
    w = as_f64(kw["weight"])
    v = w.shape[0]
    eps_c = xdt.eps(xdt.float_name(xdt.compute_dtype(case.dtype)))
    abs_w = np.abs(w)
    g_err_w = np.zeros((bt, h))  # (error terms of G) @ |w|
    g_abs_w = np.zeros((bt, h))  # |G| @ |w|
    g_err_x = np.zeros((v, h))
    g_abs_x = np.zeros((v, h))
    sixteen = case.dtype in ("float16", "bfloat16") and case.ladder is None
    if sixteen:  # the statistics' scale (see _random_scale_sq), in the same pass
        w2, s_in, s_w = w * w, np.zeros((bt, h)), np.zeros((v, h))
    for rows, x, err, g_abs in _g_error_blocks(case):
        g_err_w[rows] = err @ abs_w
        g_abs_w[rows] = g_abs @ abs_w
        g_err_x += err.T @ np.abs(x)
        g_abs_x += g_abs.T @ np.abs(x)
        if sixteen:
            e2 = err * err
            s_in[rows] = e2 @ w2
            s_w += e2.T @ (x * x)
    if sixteen:
        case.__dict__["_scale_sq"] = (s_in, s_w)
    # each GEMM accumulates in float32 over its inner dimension (V for input_grad, BT for weight_grad)
    in_grad = allowance(expected[0], 0.0, case.dtype) + g_err_w + K_SLACK * eps_c * math.log2(v + 1) * g_abs_w
    w_grad = allowance(expected[1], 0.0, case.dtype) + g_err_x + K_SLACK * eps_c * math.log2(bt + 1) * g_abs_x
    # rounding G to a 16-bit dtype also flushes its tiny entries: up to half a subnormal spacing each
    g_floor = K_SLACK * 0.5 * float(xdt.ulp(0.0, case.dtype))
    x_all = as_f64(kw["input"])
    return in_grad + g_floor * abs_w.sum(axis=0)[None, :], w_grad + g_floor * np.abs(x_all).sum(axis=0)[None, :]


# -- statistics over many elements (16-bit dtypes): what a per-element bound cannot see ---------------

#: Outputs with fewer finite elements than this are not judged statistically.
STAT_MIN_ELEMENTS = 256
#: Root-mean-square error over the root-mean-square of the random-rounding scale (below). The
#: roundings the contract allows (G once to the storage dtype, each output once, float32
#: accumulation) give at most about 0.45; a 16-bit accumulator added to once per chunk of tokens
#: gives about 0.14 x sqrt(chunks) (above the limit from about 30 chunks).
RMS_LIMIT = 0.75
#: Mean relative error toward zero, in units of the storage epsilon, fitted over the outputs
#: (least squares of error = beta * output): G rounded to nearest even gives 0, G truncated toward
#: zero shrinks every product by about 0.35 eps. The limit is this plus three times the fit's noise
#: (from the random-rounding scale); an output whose limit would exceed SLOPE_JUDGED is not judged.
SLOPE_LIMIT = 0.12
SLOPE_JUDGED = 0.25


def _random_scale_sq(case: Case, expected):
    """Per output element, the square of the error scale that independent roundings give: each
    G element's allowed error, added in quadrature over the product's inner dimension (the worst
    case adds them linearly), plus half an ulp of the output for its own rounding."""
    kw = case.kwargs
    if "_scale_sq" in case.__dict__:  # computed with the allowance
        s_in, s_w = case.__dict__["_scale_sq"]
    else:
        bt, h = np.shape(kw["input"])
        w2 = as_f64(kw["weight"]) ** 2
        s_in = np.zeros((bt, h))
        s_w = np.zeros((w2.shape[0], h))
        for rows, x, err, _ in _g_error_blocks(case):
            e2 = err * err
            s_in[rows] = e2 @ w2
            s_w += e2.T @ (x * x)
    out = []
    for s2, e in zip((s_in, s_w), expected):
        o = np.abs(np.asarray(e, dtype=np.float64))
        half_ulp = 0.5 * xdt.ulp(np.where(np.isfinite(o), o, 0.0), case.dtype)
        out.append(s2 + half_ulp * half_ulp)
    return out


def statistics(case: Case, outputs, expected, caps=None) -> list:
    """Checks over all elements of each output of a 16-bit case, beside the per-element bound:

    * **error scale**: the root-mean-square error over the root-mean-square of the scale that
      the contract's independent roundings give (see :data:`RMS_LIMIT`), so partial sums kept in
      the 16-bit dtype between chunks of tokens fail (skipped where the backend declares that its
      ABI forces that: ``KernelCaps.partials_in_dtype``);
    * **G rounding bias**: the fitted relative error toward zero (see :data:`SLOPE_LIMIT`), so G
      truncated instead of rounded to nearest even fails."""
    from xloss.conformance.descriptor import Comparison

    if case.dtype not in ("float16", "bfloat16"):
        return []
    eps_s = xdt.eps(case.dtype)
    scales = _random_scale_sq(case, expected)
    out = []
    for name, a, e, s2 in zip(("input_grad", "weight_grad"), outputs, expected, scales):
        a = np.asarray(a).astype(np.float64).reshape(-1)
        o = np.asarray(e, dtype=np.float64).reshape(-1)
        use = np.isfinite(o) & np.isfinite(a) & (o != 0)
        n = int(use.sum())
        if n < STAT_MIN_ELEMENTS:
            continue
        err, o, s2 = (a - o)[use], o[use], s2.reshape(-1)[use]
        oo = float(np.dot(o, o))
        slope = float(np.dot(err, o) / oo) / eps_s
        limit = SLOPE_LIMIT + 3 * float(np.sqrt(np.dot(o * o, s2))) / oo / eps_s
        if limit <= SLOPE_JUDGED:
            ok = abs(slope) <= limit
            detail = "" if ok else (
                f"the errors are {abs(slope):.2f} x eps({case.dtype}) x the result "
                f"{'toward zero' if slope < 0 else 'away from zero'} on average over {n} elements (limit {limit:.2f}): "
                f"G is {'truncated' if slope < 0 else 'rounded up'} rather than rounded to nearest even")
            out.append(Comparison(f"{name} (G rounding bias)", ok, n, 0.0, 0.0, abs(slope), None, detail))
        if caps is not None and getattr(caps, "partials_in_dtype", False):
            continue
        rms = float(np.sqrt(np.dot(err, err) / s2.sum())) if s2.sum() > 0 else 0.0
        ok = rms <= RMS_LIMIT
        detail = "" if ok else (
            f"root-mean-square error {rms:.2f} x the scale of the roundings the contract allows, over {n} elements "
            f"(limit {RMS_LIMIT}): more rounding than the contract's (G once, each output once, float32 sums), e.g. "
            f"partial sums kept in {case.dtype} between chunks of tokens")
        out.append(Comparison(f"{name} (error scale)", ok, n, 0.0, 0.0, rms, None, detail))
    return out


# -- the shrinker's and the large ladder's view of a case: a unit is a token (a row of input)

def _select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    bt = np.shape(kw["input"])[0]
    packed = np.asarray(kw["target_mask"]).dtype == np.uint8
    mask = reference.mask_as_bool(kw["target_mask"], bt)[keep]
    kw["target_mask"] = reference.pack_mask(mask) if packed else mask
    for name in ("grad", "input", "masked_target", "softmax", "logits_max", "sum_exp_logits"):
        if kw.get(name) is not None:
            kw[name] = np.ascontiguousarray(kw[name][keep])
    return kw


#: the FLCE backward: a token (a row of input; the input gradient's rows hint at it).
SHRINKING = Shrinking(lambda case: int(np.shape(case.kwargs["input"])[0]), _select,
                      lambda case, flat_index, output: (flat_index // max(1, np.shape(case.kwargs["input"])[1])
                                                        if output == 0 else -1))

#: Rows of a large rung repeat with this period (tokens); BT is a whole number of periods.
ROW_PERIOD = 97
#: (label, row periods, H, V, agree) of the large rungs: one shard of a vocabulary of V + 7993 rows,
#: V >= 32000 and BT >= 4096, H small so the C emulators finish in seconds.
FLCE = (
    ("BT=291 H=8 V=4099", 3, 8, 4099, True),
    ("BT=4171 H=8 V=32003", 43, 8, 32003, False),
)
#: this module's tables that ``xloss.conformance.large`` still shows under its old names
LARGE_TABLES = ("FLCE",)


def _large_period(dtype, mode, seed, label, h, v, mask_formats) -> Case:
    """ROW_PERIOD tokens of one shard [start, start + v) of a vocabulary of k rows."""
    rng = large.rng_for(seed, FLCE_GRAD.name, dtype, mode, label)
    bt, k, start = ROW_PERIOD, v + 7993, 5000
    scale = (3.0 / np.sqrt(h)) ** 0.5  # logits x.w ~ N(0, 3)
    xs = rng.normal(0.0, scale, (bt, h))
    xs[rng.choice(bt, 3, replace=False)] *= 12.0  # a few rows with logits ~ +-40
    target = rng.integers(0, k, bt)
    target[rng.random(bt) < 0.05] = -100
    ws = rng.normal(0.0, scale, (k, h))
    grad = np.where(target == -100, 0.0, rng.uniform(-1.0, 1.0, bt))
    fmt = "bool" if "bool" in mask_formats and (mode == "softmax" or len(mask_formats) == 1) else "bitpacked"
    return shard_case(dtype, mode, x=xs, w_global=ws, target=target, start=start, v=v, grad=grad,
                      mask_format=fmt, label=f"large: {label}")


def _large_rung(h, v):
    def period(dtype, mode, seed, label, caps):
        formats = tuple(sorted(caps.variants["mask"])) if caps is not None else ("bool", "bitpacked")
        return _large_period(dtype, mode, seed, label, h, v, formats)

    return period


LADDER = large.Ladder(tuple(large.Rung(label, periods, agree, _large_rung(h, v))
                            for label, periods, h, v, agree in FLCE), "input",
                      per_class=("weight",), bit_packed=(("target_mask", reference.mask_as_bool, reference.pack_mask),),
                      summed_outputs=("weight_grad",))


def implied_elements(case) -> int:
    """The BT x V logits a call forms, which no array of the case holds."""
    x, w = case.kwargs.get("input"), case.kwargs.get("weight")
    return int(x.shape[0]) * int(w.shape[0]) if x is not None and w is not None else 0


DESCRIPTOR = KernelDescriptor(spec=FLCE_GRAD, draw_case=draw_case,
                              edge_cases=edge_cases, error_cases=error_cases, call=call, oracle=oracle,
                              allowed=allowed, output_names=lambda mode: ("input_grad", "weight_grad"),
                              shrinking=SHRINKING, ladder=LADDER, statistics=statistics,
                              implied_elements=implied_elements)
