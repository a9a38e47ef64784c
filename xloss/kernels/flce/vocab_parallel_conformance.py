"""Descriptors of the vocabulary-parallel forward (CANN's aclnnFusedLinearOnlineMaxSum and
aclnnFusedCrossEntropyLossWithMaxSum, and our FT78NE/MT7004 equivalents).

``ONLINE_MAX_SUM``: one vocabulary shard's statistics before the caller's all-reduce (no modes;
variants: the logits returned, the mask format, the target dtype). ``LOSS_WITH_MAX_SUM``: the
per-token loss (and a shard's softmax) from the all-reduced statistics (variant: softmax).

Tolerances (see :mod:`.descriptor`): a logit is a dot product of H float32 products accumulated
in float32, so it may be off by ``K eps_c log2(H+1) sum_h |x_h||w_h|`` (its *logit error*). The max
is one of the logits: its allowance is the row's largest logit error (plus its rounding). The sum of
exponentials is relative: each term ``exp(z - max)`` carries its logit's and the max's error, plus
the exponential's and a float32 accumulation over V terms. The predicted logit carries the
target's and the max's logit errors; where the target is masked it is exactly 0. The mask bits
(padding bits included) and the masked targets are integers: they match exactly. A NaN logit
leaves the row's max and predicted logit unspecified (an IEEE max skips NaN, a compare-and-select
may keep it): they are read as NaN, and the sum must be NaN. The loss kernel's inputs are exact float32 values: the
loss gets the compute epsilon times ``|log s| + |predicted|``, the softmax times ``1 + |z - max|``
(the subtraction's rounding, amplified by the exponential), both with the final rounding to the
compute dtype.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from xloss import dtypes as xdt
from xloss import reference
from xloss.conformance import values as V
from xloss.conformance.descriptor import K_SLACK, Case, ErrorCase, KernelDescriptor, allowance
from xloss.conformance.large import Ladder, Rung
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64

from . import LOSS_WITH_MAX_SUM as LOSS_SPEC
from . import ONLINE_MAX_SUM as MAX_SUM_SPEC
from . import api

_TARGET = {"int64": np.int64, "int32": np.int32}
INT32_MAX = int(np.iinfo(np.int32).max)
INT64_MAX = int(np.iinfo(np.int64).max)

#: Outputs of the max/sum kernel, in the API's order (the mask as bits, LSB first, padding included).
MAX_SUM_OUTPUTS = ("logits_max_local", "sum_exp_logits_local", "predicted_logits_local", "target_mask",
                   "masked_target", "vocab_parallel_logits")
LOSS_OUTPUTS = ("loss", "softmax")


def _compute_name(dtype: str) -> str:
    return xdt.float_name(xdt.compute_dtype(dtype))


# ==== aclnnFusedLinearOnlineMaxSum ===================================================================================

def max_sum_case(dtype, *, x, w, target, start, end=None, logits=False, mask="bitpacked", target_dtype="int64",
                 label="") -> Case:
    """One shard's arguments: ``x`` (BT, H), ``w`` (V, H) float64 values rounded to ``dtype``."""
    kw = dict(input=V.cast(np.asarray(x, dtype=np.float64), dtype), weight=V.cast(np.asarray(w, dtype=np.float64),
                                                                                  dtype),
              target=np.asarray(target).astype(_TARGET[target_dtype]), vocab_start=int(start))
    if end is not None:
        kw["vocab_end"] = int(end)
    kw["return_logits"] = bool(logits)
    kw["mask_format"] = mask
    return Case(MAX_SUM_SPEC.name, None, dtype, kw, label)


def _preferred(caps, axis, *order):
    """The first of ``order`` that ``caps`` declares on ``axis`` (the first without caps)."""
    if caps is None:
        return order[0]
    return next((v for v in order if v in caps.variants[axis]), order[0])


#: Value distributions of input and weight (before the logit scale).
VP_DISTS = (
    V.uniform("unit values", -1.0, 1.0, (0.0, 1.0, -1.0, 0.5)),
    V.uniform("wide values", -4.0, 4.0, (0.0,)),
    V.choice("few values (ties)", (-1.0, 0.0, 1.0)),
)
#: Factors on the input: logits from ~1e-3 to a few thousand (float16 logits stay finite).
LOGIT_SCALES = (1.0, 16.0, 0.01, 100.0)


def _draw_targets(draw, bt, start, end, v, tdt):
    lo, hi = (-INT32_MAX - 1, INT32_MAX) if tdt == "int32" else (-INT64_MAX - 1, INT64_MAX)
    outside = [t for t in (start - 1, end, start + v - 1, start + v, -100, 0, lo, hi, start - 7)
               if lo <= t <= hi and not start <= t < end]
    inside = st.integers(start, end - 1) if end > start else st.nothing()
    one = st.one_of(inside, st.sampled_from(outside)) if end > start else st.sampled_from(outside)
    if bt <= V.ELEMENTWISE_MAX:
        return np.array(draw(st.lists(one, min_size=bt, max_size=bt), label="targets"), dtype=np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="target seed"))
    p_in = draw(st.sampled_from((0.0, 0.5, 0.9, 1.0)), label="fraction in the shard") if end > start else 0.0
    t = np.array(outside, dtype=np.int64)[rng.integers(0, len(outside), bt)]
    here = rng.random(bt) < p_in
    t[here] = rng.integers(start, max(end, start + 1), int(here.sum()))
    return t


def draw_max_sum_case(draw, dtype, mode, caps) -> Case:
    logits = draw(st.sampled_from(sorted(caps.variants["logits"])), label="return_logits")
    mask = draw(st.sampled_from(sorted(caps.variants["mask"])), label="mask_format")
    tdt = draw(st.sampled_from(sorted(caps.variants["target_dtype"])), label="target dtype")
    bt = draw(st.one_of(st.integers(0, 12), st.sampled_from((1, 7, 8, 9, 15, 17, 33, 64, 65))), label="BT")
    h = draw(st.integers(1, 16), label="H")
    v = draw(st.one_of(st.integers(1, 24), st.sampled_from((1, 31, 33, 64, 129, 257))), label="V")
    short = draw(st.one_of(st.just(0), st.integers(0, v)), label="rows past vocab_end")
    limit = INT32_MAX  # vocabulary indices fit int32 (C int ABIs); int64 targets may lie anywhere
    start = draw(st.one_of(st.integers(0, 40), st.integers(limit - v - 3, limit - v)), label="vocab_start")
    end = start + v - short
    x = V.draw_values(draw, bt * h, VP_DISTS).reshape(bt, h)
    w = V.draw_values(draw, v * h, VP_DISTS).reshape(v, h)
    x = x * draw(st.sampled_from(LOGIT_SCALES), label="logit scale")
    if v > 1 and draw(st.booleans(), label="tied rows"):  # some weight rows equal to the first: tied logits
        w[1::2] = w[0]
    target = _draw_targets(draw, bt, start, end, v, tdt)
    return max_sum_case(dtype, x=x, w=w, target=target, start=start, end=None if short == 0 else end, logits=logits,
                        mask=mask, target_dtype=tdt)


def max_sum_edge_cases(dtype, mode, caps=None) -> list[Case]:
    """The fixed cases, in the declared variants (``caps``; default: int64 targets, the packed mask)."""
    rng = np.random.default_rng(17)
    tdt = _preferred(caps, "target_dtype", "int64", "int32")
    mask = _preferred(caps, "mask", "bitpacked", "bool")
    cases = []

    def add(label, bt, h, v, start, target=None, *, end=None, logits=False, scale=1.0, x=None, w=None, **kw):
        x = rng.uniform(-1, 1, (bt, h)) * scale if x is None else x
        w = rng.uniform(-1, 1, (v, h)) if w is None else w
        stop = start + v if end is None else end
        if target is None:  # half in the shard, the rest on either side of it
            target = rng.integers(start - 3, stop + 3, bt)
        variants = dict(logits=_preferred(caps, "logits", logits, not logits), mask=mask, target_dtype=tdt)
        variants.update(kw)
        cases.append(max_sum_case(dtype, x=x, w=w, target=target, start=start, end=end, label=label, **variants))

    add("no tokens", 0, 4, 6, 0, np.zeros(0, np.int64), logits=True)
    add("V=1", 9, 5, 1, 3, np.array([3, 2, 4, 3, 3, 0, 3, -100, 3]), logits=True)
    add("every target masked", 11, 4, 7, 10, np.array([0, 9, 17, 18, 100, -100, 5, 9, 17, 1, 2]))
    add("no target masked", 16, 4, 7, 10, np.arange(16) % 7 + 10, logits=True)
    add("every target in another shard", 9, 6, 20, 20, np.arange(0, 18, 2))
    add("BT=13 (padding bits of the last mask byte)", 13, 3, 5, 0, np.array([0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 7]))
    add("BT=1 (seven padding bits)", 1, 3, 5, 5, np.array([5]))
    add("vocab_end < vocab_start + V: targets in the shard's padding rows", 12, 4, 10, 30,
        np.array([30, 35, 36, 37, 38, 39, 40, 29, 34, 36, 39, 31]), end=36, logits=True)
    add("empty shard range (vocab_end == vocab_start)", 6, 3, 4, 8, np.array([8, 9, 7, 8, 11, 12]), end=8)
    add("extreme logits: exp overflows without the max shift", 10, 8, 12, 0, scale=120.0, logits=True)
    add("large negative logits: exp underflows without the max shift", 10, 8, 12, 0,
        x=-np.abs(rng.uniform(50, 100, (10, 8))), w=np.abs(rng.uniform(0.5, 1.5, (12, 8))), logits=True)
    add("tiny logits", 8, 4, 9, 0, scale=1e-4)
    ties = rng.uniform(-1, 1, (1, 5)).repeat(6, axis=0)
    add("ties: equal weight rows and zero input rows", 7, 5, 6, 0, np.array([0, 1, 2, 3, 4, 5, 2]),
        x=np.vstack([rng.uniform(-1, 1, (4, 5)), np.zeros((3, 5))]), w=ties)
    x = rng.uniform(-1, 1, (6, 4))
    x[1, 2] = np.inf
    x[3, 0] = -np.inf
    add("inf inputs (inf and -inf logits)", 6, 4, 5, 0, np.array([0, 1, 2, 3, 4, 9]), x=x,
        w=np.abs(rng.uniform(0.5, 1.5, (5, 4))), logits=True)
    x = rng.uniform(-1, 1, (6, 4))
    x[2, 1] = np.nan
    add("NaN inputs", 6, 4, 5, 0, np.array([0, 1, 2, 3, 9, 1]), x=x, logits=True)
    start32 = INT32_MAX - 9  # the shard's last row is INT32_MAX - 1 (vocab_end fits int32)
    if tdt == "int32" or caps is None:
        add("int32 targets near the int32 limits", 8, 4, 9, start32,
            np.array([INT32_MAX, -INT32_MAX - 1, start32 - 1, start32, INT32_MAX - 1, start32 + 4, INT32_MAX, 0]),
            target_dtype="int32")
    if tdt == "int64" or caps is None:
        start = 2**20  # targets 2**32 past the shard's rows: the shard's own rows if narrowed to 32 bits
        add("int64 targets at the int64 limits and 2**32 past the shard", 8, 4, 9, start,
            np.array([INT64_MAX, -INT64_MAX - 1, start, start + 8, start + 9, start - 1, start + 2**32, start - 2**32]),
            target_dtype="int64")
    add("H=0 (empty hidden: every logit 0)", 5, 0, 4, 0, np.array([0, 1, 2, 3, 4]))
    for logits in (False, True):  # every declared variant once
        for fmt in ("bitpacked", "bool"):
            for t in ("int64", "int32"):
                add(f"variant: logits={logits}, {fmt} mask, {t} targets", 10, 4, 6, 2, logits=logits, mask=fmt,
                    target_dtype=t)
    # several tiles of a tiled implementation (vocabulary tiles of 2048, more than one mask word)
    add("several tiles: BT=67, H=24, V=2500", 67, 24, 2500, 1000, scale=2.0)
    return [c for c in cases if caps is None or _declared(caps, c)]


def _declared(caps, case: Case) -> bool:
    kw = case.kwargs
    return (kw["return_logits"] in caps.variants["logits"] and kw["mask_format"] in caps.variants["mask"]
            and kw["target"].dtype.name in caps.variants["target_dtype"])


def _bad_max_sum_cases() -> list[ErrorCase]:
    bt, h, v = 4, 3, 5
    x = np.ones((bt, h), np.float16)
    w = np.ones((v, h), np.float16)
    t = np.array([0, 1, 7, 2])
    base = dict(input=x, weight=w, target=t, vocab_start=0)
    errs = [
        ("input 1-D", dict(base, input=x[0]), XLossValueError, r"input must have shape \(BT, H\); got \(3,\)"),
        ("input integer", dict(base, input=np.ones((bt, h), np.int32)), XLossTypeError,
         r"input must have a floating dtype"),
        ("weight hidden mismatch", dict(base, weight=np.ones((v, 4), np.float16)), XLossValueError,
         r"weight must have shape \(V, 3\)"),
        ("weight dtype mismatch", dict(base, weight=w.astype(np.float32)), XLossTypeError,
         r"weight dtype float32 must match input dtype float16"),
        ("weight with no rows", dict(base, weight=np.ones((0, h), np.float16)), XLossValueError,
         r"weight must hold at least one vocabulary row \(V >= 1\); got V=0"),
        ("target float", dict(base, target=t.astype(np.float32)), XLossTypeError,
         r"target must have dtype int32 or int64; got float32"),
        ("target int16", dict(base, target=t.astype(np.int16)), XLossTypeError, r"target must have dtype int32 or"),
        ("target wrong length", dict(base, target=t[:3]), XLossValueError, r"target must have shape \(4,\)"),
        ("vocab_start negative", dict(base, vocab_start=-1), XLossValueError,
         r"0 <= vocab_start <= vocab_end <= vocab_start \+ V \(V=5\); got vocab_start=-1"),
        ("vocab_end below vocab_start", dict(base, vocab_start=3, vocab_end=2), XLossValueError,
         r"got vocab_start=3, vocab_end=2"),
        ("vocab_end past the shard's rows", dict(base, vocab_start=3, vocab_end=9), XLossValueError,
         r"vocab_end <= vocab_start \+ V \(V=5\); got vocab_start=3, vocab_end=9"),
        ("vocab_start float", dict(base, vocab_start=1.0), XLossTypeError, r"vocab_start must be an integer"),
        ("vocab_end bool", dict(base, vocab_end=True), XLossTypeError, r"vocab_end must be an integer"),
        ("vocab_end beyond int32 targets", dict(base, target=t.astype(np.int32), vocab_start=INT32_MAX - 2),
         XLossValueError, rf"vocab_end={INT32_MAX + 3} does not fit target's dtype int32"),
        ("mask_format unknown", dict(base, mask_format="packed"), XLossValueError,
         r"mask_format must be one of 'bitpacked', 'bool'; got 'packed'"),
        ("return_logits not a bool", dict(base, return_logits="yes"), XLossTypeError,
         r"return_logits must be a bool; got 'yes'"),
    ]
    return [ErrorCase("fused_linear_online_max_sum", kw, exc, match, label) for label, kw, exc, match in errs]


def _mask_bits(mask: np.ndarray) -> np.ndarray:
    """The produced mask as one value per bit (LSB first, padding bits included) or per token (bool)."""
    mask = np.asarray(mask)
    return np.unpackbits(mask, bitorder="little") if mask.dtype == np.uint8 else mask.astype(np.uint8)


def masked_tokens(case: Case) -> np.ndarray:
    """(BT,) bool: the tokens whose target is not in the shard."""
    kw = case.kwargs
    t = np.asarray(kw["target"], np.int64)
    return (t < kw["vocab_start"]) | (t >= kw.get("vocab_end", kw["vocab_start"] + np.shape(kw["weight"])[0]))


def unspecified_rows(case: Case) -> np.ndarray:
    """(BT,) bool: the tokens whose exact logits hold a NaN. Their max and (in-shard) predicted logit
    are unspecified (an IEEE max skips NaN, a compare-and-select may keep it); the oracle's are NaN."""
    x, w = np.asarray(case.kwargs["input"]), np.asarray(case.kwargs["weight"])
    if np.isfinite(x).all() and np.isfinite(w).all():  # finite inputs: no NaN logit (no float64 overflow)
        return np.zeros(x.shape[0], bool)
    with np.errstate(invalid="ignore", over="ignore"):
        z = as_f64(x) @ as_f64(w).T
    return np.isnan(z).any(axis=1) if z.size else np.zeros(x.shape[0], bool)


def call_max_sum(case: Case, backend):
    """The outputs, the mask as bits; the unspecified values (:func:`unspecified_rows`) read as NaN."""
    r = api.fused_linear_online_max_sum(**case.kwargs, backend=backend)
    lmax, pred = np.array(r.logits_max_local), np.array(r.predicted_logits_local)
    nan = unspecified_rows(case)
    if nan.any():
        lmax[nan] = np.nan
        pred[nan & ~masked_tokens(case)] = np.nan  # a masked token's stays: exactly 0
    out = [lmax, np.asarray(r.sum_exp_logits_local), pred, _mask_bits(r.target_mask), np.asarray(r.masked_target)]
    if r.vocab_parallel_logits is not None:
        out.append(np.asarray(r.vocab_parallel_logits))
    return tuple(out)


def oracle_max_sum(case: Case):
    """The reference's outputs (float64), the mask as bits."""
    kw = case.kwargs
    r = reference.fused_linear_online_max_sum(kw["input"], kw["weight"], kw["target"], kw["vocab_start"],
                                              kw.get("vocab_end"))
    bt = np.shape(kw["input"])[0]
    mask = r.target_mask if kw.get("mask_format", "bitpacked") == "bitpacked" else reference.mask_as_bool(
        r.target_mask, bt)
    out = (r.logits_max_local, r.sum_exp_logits_local, r.predicted_logits_local, _mask_bits(mask), r.masked_target)
    return out + (r.vocab_parallel_logits,) if kw.get("return_logits") else out


def logit_error(case: Case) -> np.ndarray:
    """(BT, V): how far a careful float32 logit may be from the exact one (module docstring)."""
    kw = case.kwargs
    x, w = np.abs(as_f64(kw["input"])), np.abs(as_f64(kw["weight"]))
    eps_c = xdt.eps(_compute_name(case.dtype))
    with np.errstate(invalid="ignore", over="ignore"):
        s = x @ w.T
    return np.nan_to_num(K_SLACK * eps_c * math.log2(x.shape[1] + 1) * s, nan=np.inf)


def allowed_max_sum(case: Case, expected, caps=None):
    kw = case.kwargs
    cname = _compute_name(case.dtype)
    eps_c = xdt.eps(cname)
    bt, v = np.shape(kw["input"])[0], np.shape(kw["weight"])[0]
    err = logit_error(case)
    err_max = err.max(axis=1) if bt else np.zeros(0)
    with np.errstate(invalid="ignore", over="ignore"):
        logits = as_f64(kw["input"]) @ as_f64(kw["weight"]).T
    lmax = allowance(expected[0], 0.0, cname) + err_max
    m = expected[0][:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.exp(logits - m)
        terms = np.where(np.isfinite(terms), terms, 0.0)
        se = (allowance(expected[1], 0.0, cname) + np.nan_to_num((terms * (err + err_max[:, None])).sum(axis=1),
                                                                 nan=np.inf)
              + K_SLACK * eps_c * (1.0 + math.log2(v + 1)) * terms.sum(axis=1))
        mt = np.asarray(expected[4], dtype=np.int64)
        masked = masked_tokens(case)
        pred_err = err[np.arange(bt), mt] + err_max if bt else np.zeros(0)
        pred = np.where(masked, 0.0, allowance(expected[2], 0.0, cname) + pred_err)
        out = (lmax, se, pred, np.zeros(np.shape(expected[3])), np.zeros(bt))
        if len(expected) > 5:
            out += (allowance(expected[5], err / (K_SLACK * eps_c), case.dtype),)
    return out


# -- the shrinker's and the large ladder's view of a case: a unit is a token (a row of input)

def max_sum_units(case: Case) -> int:
    return int(np.shape(case.kwargs["input"])[0])


def max_sum_select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    kw["input"] = np.ascontiguousarray(kw["input"][keep])
    kw["target"] = np.ascontiguousarray(kw["target"][keep])
    return kw


def max_sum_unit_of(case: Case, flat_index: int, output: int) -> int:
    """Outputs are per token, except the logits (a row per token); a padding bit is the last token's."""
    bt = max_sum_units(case)
    if output == 5:
        return flat_index // max(1, np.shape(case.kwargs["weight"])[0])
    return min(flat_index, bt - 1)


#: Tokens per period of a large rung: a multiple of 8, so the packed mask repeats with the rows.
ROW_PERIOD = 96


def _large_max_sum(dtype, mode, seed, label, caps, *, h, v, logits):
    """ROW_PERIOD tokens of one shard [start, start + v) of a vocabulary of v + 7993 rows."""
    from xloss.conformance.large import rng_for

    rng = rng_for(seed, MAX_SUM_SPEC.name, dtype, label)
    start = 5000
    scale = (3.0 / np.sqrt(h)) ** 0.5  # logits x.w ~ N(0, 3)
    x = rng.normal(0.0, scale, (ROW_PERIOD, h))
    x[rng.choice(ROW_PERIOD, 3, replace=False)] *= 12.0  # a few rows with logits ~ +-40
    target = rng.integers(0, v + 7993, ROW_PERIOD)
    target[rng.random(ROW_PERIOD) < 0.05] = -100
    tdt = _preferred(caps, "target_dtype", "int64", "int32")
    fmt = _preferred(caps, "mask", "bitpacked", "bool")
    return max_sum_case(dtype, x=x, w=rng.normal(0.0, scale, (v, h)), target=target, start=start,
                        logits=_preferred(caps, "logits", logits, not logits), mask=fmt, target_dtype=tdt,
                        label=f"large: {label}")


MAX_SUM_LADDER = (
    Rung("BT=288 H=8 V=4099, logits", 3, True,
         lambda dtype, mode, seed, label, caps: _large_max_sum(dtype, mode, seed, label, caps, h=8, v=4099,
                                                               logits=True)),
    Rung("BT=4128 H=8 V=32003", 43, False,
         lambda dtype, mode, seed, label, caps: _large_max_sum(dtype, mode, seed, label, caps, h=8, v=32003,
                                                               logits=False)),
)


# ==== aclnnFusedCrossEntropyLossWithMaxSum ===========================================================================

def loss_case(dtype, *, logits_max, sum_exp, predicted, logits=None, label="") -> Case:
    """The all-reduced statistics (rounded to the compute dtype of ``dtype``) and, with softmax, a
    shard's logits in ``dtype`` (the case's dtype is the logits', else the statistics')."""
    cname = _compute_name(dtype)
    kw = dict(logits_max=V.cast(logits_max, cname), sum_exp_logits=V.cast(sum_exp, cname),
              predicted_logits=V.cast(predicted, cname))
    if logits is not None:
        kw["vocab_parallel_logits"] = V.cast(logits, dtype)
    return Case(LOSS_SPEC.name, None, dtype if logits is not None else cname, kw, label)


def _realistic_stats(rng, z, extra_shards: float = 0.0):
    """(max, sum, predicted) of logits ``z`` (BT, V) as the all-reduce gives them: the global max at
    or above the shard's, the sum including other shards' terms, the predicted logit one of z's."""
    bt, v = z.shape
    m = (z.max(axis=1) if v else np.zeros(bt)) + extra_shards * rng.random(bt)
    s = np.exp(z - m[:, None]).sum(axis=1) + extra_shards * rng.random(bt) * 10 + (v == 0)
    pred = z[np.arange(bt), rng.integers(0, max(v, 1), bt)] - m if v else -rng.random(bt)
    return m, s, pred


def draw_loss_case(draw, dtype, mode, caps) -> Case:
    softmax_ok = sorted(caps.variants["softmax"])
    if dtype in ("float16", "bfloat16"):  # only the logits can be 16-bit
        assume(True in softmax_ok)
        softmax = True
    else:
        softmax = draw(st.sampled_from(softmax_ok), label="softmax")
    bt = draw(st.one_of(st.integers(0, 12), st.sampled_from((1, 7, 17, 33, 64, 65))), label="BT")
    v = draw(st.one_of(st.integers(1, 24), st.sampled_from((1, 31, 64, 129, 1000))), label="V")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    spread = draw(st.sampled_from((1.0, 8.0, 60.0, 500.0, 1e-3)), label="logit spread")
    center = draw(st.sampled_from((0.0, 30.0, -200.0, 1000.0)), label="logit offset")
    z = V.cast(center + spread * rng.normal(0.0, 1.0, (bt, v)), dtype).astype(np.float64)
    m, s, pred = _realistic_stats(rng, z, draw(st.sampled_from((0.0, 0.0, 3.0)), label="other shards"))
    if bt and draw(st.booleans(), label="odd statistics"):  # what a port must pass through: any float32 value
        i = rng.integers(0, bt)
        # (with the softmax, a sum of 0 is ill-posed: exp(z - max) / 0 is inf in float64 where a float32 exp
        # may underflow to 0 and give NaN)
        s[i] = draw(st.sampled_from((1.0, np.inf, 3e38) + (() if softmax else (0.0, 1e-30))), label="odd sum")
        pred[i] = draw(st.sampled_from((0.0, -0.0, np.nan, 5.0, -1e4)), label="odd predicted")
    return loss_case(dtype, logits_max=m, sum_exp=s, predicted=pred, logits=z if softmax else None)


def loss_edge_cases(dtype, mode, caps=None) -> list[Case]:
    rng = np.random.default_rng(29)
    sixteen = dtype in ("float16", "bfloat16")
    softmax_values = (True,) if sixteen else (False, True)
    cases = []

    def add(label, z, *, stats=None, softmax=None):
        z = V.cast(np.asarray(z, dtype=np.float64), dtype).astype(np.float64)
        m, s, pred = stats if stats is not None else _realistic_stats(rng, z)
        for sm in softmax_values if softmax is None else (softmax,):
            if sm in softmax_values:
                cases.append(loss_case(dtype, logits_max=m, sum_exp=s, predicted=pred, logits=z if sm else None,
                                       label=f"{label}{', softmax' if sm else ''}"))

    add("no tokens", np.zeros((0, 5)))
    add("V=1 (softmax 1)", rng.normal(0, 2, (7, 1)))
    add("typical", rng.normal(0, 3, (16, 40)))
    add("peaked logits", rng.normal(0, 60, (9, 33)))
    z = rng.normal(0, 1, (8, 12)) + 500.0
    add("large logits (exp overflows without the max)", z)
    add("global max above the shard's (other shards)", rng.normal(0, 2, (10, 20)),
        stats=(np.full(10, 9.0), np.full(10, 5000.0), -rng.random(10) * 10))
    z = rng.normal(0, 1, (6, 9))
    add("odd statistics: sum 0, inf, tiny; NaN and -0 predicted", z,
        stats=(z.max(axis=1), np.array([0.0, np.inf, 1e-3 if sixteen else 1e-30, 1.0, 2.5, 3e38]),
               np.array([-1.0, -2.0, -0.5, np.nan, -0.0, -7.0])))
    z = rng.normal(0, 1, (5, 6))
    z[1, 2], z[3, 0] = np.nan, -np.inf
    add("NaN and -inf logits", z, stats=(np.nan_to_num(z, nan=0.0, neginf=0.0).max(axis=1), np.full(5, 3.0),
                                         np.full(5, -1.0)), softmax=True)
    add("BT=65, V=2500 (several tiles)", rng.normal(0, 4, (65, 2500)))
    return cases


def _bad_loss_cases() -> list[ErrorCase]:
    bt, v = 4, 5
    m, s, p = np.zeros(bt, np.float32), np.ones(bt, np.float32), np.zeros(bt, np.float32)
    z = np.zeros((bt, v), np.float16)
    base = dict(logits_max=m, sum_exp_logits=s, predicted_logits=p)
    errs = [
        ("label_smoothing not 0", dict(base, label_smoothing=0.1), XLossValueError,
         r"label_smoothing must be 0 .*got 0.1"),
        ("label_smoothing nan", dict(base, label_smoothing=float("nan")), XLossValueError,
         r"label_smoothing must be finite"),
        ("logits 1-D", dict(base, vocab_parallel_logits=z[0]), XLossValueError,
         r"vocab_parallel_logits must have shape \(BT, V\); got \(5,\)"),
        ("logits of another BT", dict(base, vocab_parallel_logits=z[:3]), XLossValueError,
         r"vocab_parallel_logits must have shape \(4, V\) to match logits_max \(4,\); got \(3, 5\)"),
        ("logits integer", dict(base, vocab_parallel_logits=np.zeros((bt, v), np.int32)), XLossTypeError,
         r"vocab_parallel_logits must have a floating dtype"),
        ("logits_max 2-D", dict(base, logits_max=m.reshape(2, 2)), XLossValueError,
         r"logits_max must have shape \(BT,\); got \(2, 2\)"),
        ("logits_max integer", dict(base, logits_max=np.zeros(bt, np.int64)), XLossTypeError,
         r"logits_max must have a floating dtype"),
        ("sum_exp_logits wrong length", dict(base, sum_exp_logits=s[:3]), XLossValueError,
         r"sum_exp_logits must have shape \(4,\); got \(3,\)"),
        ("sum_exp_logits integer", dict(base, sum_exp_logits=np.ones(bt, np.int32)), XLossTypeError,
         r"sum_exp_logits must have a floating dtype"),
        ("predicted_logits wrong length", dict(base, predicted_logits=np.zeros(5, np.float32)), XLossValueError,
         r"predicted_logits must have shape \(4,\); got \(5,\)"),
    ]
    return [ErrorCase("fused_cross_entropy_loss_with_max_sum", kw, exc, match, label) for label, kw, exc, match in errs]


def call_loss(case: Case, backend):
    r = api.fused_cross_entropy_loss_with_max_sum(**case.kwargs, backend=backend)
    return (np.asarray(r.loss),) + (() if r.softmax is None else (np.asarray(r.softmax),))


def oracle_loss(case: Case):
    kw = case.kwargs
    loss, softmax = reference.fused_cross_entropy_loss_with_max_sum(
        kw["logits_max"], kw["sum_exp_logits"], kw["predicted_logits"], 0.0, kw.get("vocab_parallel_logits"))
    return (loss,) if softmax is None else (loss, softmax)


def allowed_loss(case: Case, expected, caps=None):
    kw = case.kwargs
    cname = _compute_name(case.dtype)
    s, p = as_f64(kw["sum_exp_logits"]), as_f64(kw["predicted_logits"])
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.abs(np.log(s)) + np.abs(p)
    out = (allowance(expected[0], np.where(np.isfinite(scale), scale, 0.0), cname),)
    if len(expected) > 1:
        z, m = as_f64(kw["vocab_parallel_logits"]), as_f64(kw["logits_max"])[:, None]
        sm = np.asarray(expected[1])
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(z - m)
            scale = np.where(np.isfinite(sm) & np.isfinite(d), np.abs(sm) * (1.0 + d), 0.0)
            out += (allowance(sm, scale, cname),)
    return out


def loss_units(case: Case) -> int:
    return int(np.shape(case.kwargs["logits_max"])[0])


def loss_select(case: Case, keep) -> dict:
    kw = dict(case.kwargs)
    for name in ("logits_max", "sum_exp_logits", "predicted_logits", "vocab_parallel_logits"):
        if kw.get(name) is not None:
            kw[name] = np.ascontiguousarray(kw[name][keep])
    return kw


def loss_unit_of(case: Case, flat_index: int, output: int) -> int:
    z = case.kwargs.get("vocab_parallel_logits")
    return flat_index // max(1, np.shape(z)[1]) if output == 1 else flat_index


def _large_loss(dtype, mode, seed, label, caps, *, v):
    from xloss.conformance.large import rng_for

    rng = rng_for(seed, LOSS_SPEC.name, dtype, label)
    z = rng.normal(0.0, 3.0, (ROW_PERIOD, v))
    z[rng.choice(ROW_PERIOD, 3, replace=False)] *= 12.0
    softmax = dtype in ("float16", "bfloat16") or _preferred(caps, "softmax", True, False)
    z = V.cast(z, dtype).astype(np.float64)
    m, s, pred = _realistic_stats(rng, z, 2.0)
    return loss_case(dtype, logits_max=m, sum_exp=s, predicted=pred, logits=z if softmax else None,
                     label=f"large: {label}")


LOSS_LADDER = (
    Rung("BT=288 V=32003", 3, True, lambda dtype, mode, seed, label, caps: _large_loss(dtype, mode, seed, label,
                                                                                        caps, v=32003)),
)


ONLINE_MAX_SUM = KernelDescriptor(
    spec=MAX_SUM_SPEC, draw_case=draw_max_sum_case,
    edge_cases=max_sum_edge_cases, error_cases=_bad_max_sum_cases, call=call_max_sum, oracle=oracle_max_sum,
    allowed=allowed_max_sum, output_names=lambda mode: MAX_SUM_OUTPUTS,
    shrinking=Shrinking(max_sum_units, max_sum_select, max_sum_unit_of),
    ladder=Ladder(MAX_SUM_LADDER, "input", per_class=("weight",)))  # the weight's rows: the vocabulary's
LOSS_WITH_MAX_SUM = KernelDescriptor(
    spec=LOSS_SPEC, draw_case=draw_loss_case,
    edge_cases=loss_edge_cases, error_cases=_bad_loss_cases, call=call_loss, oracle=oracle_loss,
    allowed=allowed_loss, output_names=lambda mode: LOSS_OUTPUTS,
    shrinking=Shrinking(loss_units, loss_select, loss_unit_of), ladder=Ladder(LOSS_LADDER, "logits_max"))
