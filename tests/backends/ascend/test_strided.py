"""Strided, offset, transposed and broadcast (stride-0) views over device memory, created directly
with aclCreateTensor, through every operator; results against xloss.reference (float64), with
the conformance suite's tolerance model. Output views sit inside larger storage filled with a
sentinel: every element outside the view must come back untouched."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xloss.conformance import DESCRIPTORS, Case, compare

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SENTINEL = 7.0


@st.composite
def layouts(draw, shape, *, broadcast=False):
    """(strides, offset) of a view of ``shape``: any axis order, gaps between rows, an offset,
    and (``broadcast``) stride 0 on some axes."""
    nd = len(shape)
    perm = draw(st.permutations(range(nd)), label="axis order")
    strides, acc = [0] * nd, 1
    for ax in reversed(perm):
        strides[ax] = acc
        acc = acc * max(shape[ax], 1) + draw(st.integers(0, 3), label="gap")
    if broadcast:
        strides = [0 if draw(st.integers(0, 4), label="stride 0?") == 0 else s for s in strides]
    return strides, draw(st.integers(0, 5), label="offset")


def _needed(shape, strides, offset):
    if math.prod(shape) == 0:
        return offset + 1
    return offset + 1 + sum((d - 1) * s for d, s in zip(shape, strides))


def put_view(s, values: np.ndarray, strides, offset, fill=0.0):
    """Device storage holding ``values`` at the view (strides, offset); returns (tensor, buffer, storage)."""
    values = np.asarray(values)
    storage = np.full(_needed(values.shape, strides, offset) + 2, fill, dtype=values.dtype)
    if values.size:
        idx = offset + sum(np.indices(values.shape)[k] * strides[k] for k in range(values.ndim)) \
            if values.ndim else np.array(offset)
        storage[idx] = values  # stride-0 views: the repeated positions hold equal values
    buf = s.upload(storage)
    return s.tensor(buf, values.shape, values.dtype, strides=strides, offset=offset,
                    storage_shape=(storage.size,)), buf, storage


def read_view(s, buf, storage, shape, strides, offset):
    """(view values, the rest of the storage) after a run."""
    after = s.download(buf, storage.shape, storage.dtype)
    mask = np.ones(storage.size, bool)
    if math.prod(shape):
        idx = offset + sum(np.indices(shape)[k] * strides[k] for k in range(len(shape))) if shape else \
            np.array(offset)
        mask[idx] = False
        return after[idx], after[mask]
    return np.zeros(shape, storage.dtype), after[mask]


def _assert_ok(results, what):
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail}" for r in bad) + f"\n{what}"


def _broadcast_values(draw, rng, shape, dist):
    """Values whose repeated positions under a stride-0 axis agree (so the view is well defined)."""
    return dist(rng, shape)


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@pytest.mark.parametrize("op", ["focal forward", "focal backward", "bce backward"])
@given(data=st.data())
def test_elementwise_operators_on_strided_views(emu, op, data):
    draw = data.draw
    dtype = draw(st.sampled_from(sorted(DTYPES)), label="dtype")
    dt = DTYPES[dtype]
    shape = draw(shapes, label="shape")
    reduction = draw(st.sampled_from(["none", "mean", "sum"]) if op != "focal forward" or True else "none",
                     label="reduction")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    if op == "bce backward":
        x = rng.uniform(0, 1, shape).astype(dt)
    else:
        x = (rng.uniform(-12, 12, shape) * draw(st.sampled_from([1.0, 10.0]), label="scale")).astype(dt)
    y = rng.choice(np.array([0.0, 1.0, 0.3]), shape).astype(dt)
    weighted = draw(st.booleans(), label="weighted")
    # a weight broadcast through stride-0 axes: generate it on the broadcast shape, expand it
    wshape = tuple(d if draw(st.booleans(), label="weight keeps dim") else 1 for d in shape)
    w_small = rng.uniform(0, 2, wshape).astype(dt)
    w = np.broadcast_to(w_small, shape)
    alpha = draw(st.sampled_from([0.25, -1.0, 0.6]), label="alpha")
    gamma = draw(st.sampled_from([0.0, 0.5, 2.0, 3.5]), label="gamma")

    xs, x_off = draw(layouts(shape), label="x layout")
    ys, y_off = draw(layouts(shape), label="y layout")
    ws_, w_off = draw(layouts(shape), label="weight layout")
    ws_ = [0 if wshape[k] == 1 else ws_[k] for k in range(len(shape))]  # expand size-1 axes with stride 0
    os_, o_off = draw(layouts(shape), label="out layout")

    with emu.session() as s:
        tx, _, _ = put_view(s, x, xs, x_off)
        ty, _, _ = put_view(s, y, ys, y_off)
        tw = put_view(s, w, ws_, w_off)[0] if weighted else s.ffi.NULL
        kw = dict(alpha=alpha, gamma=gamma, reduction=reduction)
        if op == "focal forward":
            out_shape = shape if reduction == "none" else ()
            out_strides = os_ if reduction == "none" else []
            to, bo, so = put_view(s, np.full(out_shape, SENTINEL, dt), out_strides, o_off, fill=SENTINEL)
            code = {"none": 0, "mean": 1, "sum": 2}[reduction]
            s.run("aclnnXlossSigmoidFocalLoss", tx, ty, tw, gamma, alpha, code, to)
            got, rest = read_view(s, bo, so, out_shape, out_strides, o_off)
            case = Case("focal_loss", "forward", dtype, dict(x=x, y=y, **kw, **({"weight": w} if weighted else {})))
        else:
            if reduction == "none" and draw(st.booleans(), label="array grad"):
                g = rng.uniform(-2, 2, shape).astype(dt)
                gs, g_off = draw(layouts(shape, broadcast=True), label="grad layout")
                g = np.broadcast_to(g, shape).copy()
                for k, stv in enumerate(gs):  # a stride-0 axis repeats one slice
                    if stv == 0 and shape[k]:
                        g = np.take(g, [0] * shape[k], axis=k)
                tg = put_view(s, g, gs, g_off)[0]
            else:
                g = float(draw(st.sampled_from([1.0, -0.5, 3.0]), label="grad"))
                tg = s.put(np.asarray(g, np.float32))[0]
            to, bo, so = put_view(s, np.full(shape, SENTINEL, dt), os_, o_off, fill=SENTINEL)
            red = {"none": 0, "mean": 1, "sum": 2}[reduction]
            if op == "focal backward":
                s.run("aclnnXlossSigmoidFocalLossBackward", tg, tx, ty, tw, gamma, alpha, red, to)
                case = Case("focal_loss", "grad", dtype,
                            dict(x=x, y=y, grad=g, **kw, **({"weight": w} if weighted else {})))
            else:
                s.run("aclnnBinaryCrossEntropyBackward", tg, tx, ty, tw, red, to)
                case = Case("bce_grad", "clamp", dtype, dict(x=x, y=y, grad=g, reduction=reduction, eps=1e-12,
                                                             eps_mode="clamp",
                                                             **({"weight": w} if weighted else {})))
            got, rest = read_view(s, bo, so, shape, os_, o_off)
        s.synchronize()
    assert (rest.astype(np.float64) == SENTINEL).all(), "an element outside the output view was written"
    d = DESCRIPTORS[case.kernel]
    expected = d.oracle(case)
    _assert_ok([compare("out", got.reshape(np.shape(expected[0])), expected[0], d.allowed(case, expected)[0],
                        dtype)], case.describe())


@given(data=st.data())
def test_nll_on_strided_views(emu, data):
    draw = data.draw
    dtype = draw(st.sampled_from(sorted(DTYPES)), label="dtype")
    dt = DTYPES[dtype]
    two_d = draw(st.booleans(), label="2-D")
    n, c = draw(st.integers(0, 6), label="N"), draw(st.integers(1, 6), label="C")
    shape = (n, c) if two_d else (c,)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]), label="reduction")
    tdt = draw(st.sampled_from([np.int64, np.int32, np.uint8]), label="target dtype")
    ignore = -100 if tdt != np.uint8 else c - 1
    t = rng.integers(0, c, n if two_d else ()).astype(np.int64)
    if tdt != np.uint8 and two_d:
        t[rng.random(n) < 0.3] = ignore
    t = t.astype(tdt)
    w = rng.uniform(0, 2, c).astype(dt)
    g = rng.uniform(-2, 2, n).astype(dt) if reduction == "none" and two_d else np.asarray(rng.uniform(-2, 2), dt)
    total = np.asarray([rng.uniform(0.5, 4.0)], dt)
    with emu.session() as s:
        lay = lambda sh, label: draw(layouts(sh), label=label)  # noqa: E731
        ss, s_off = lay(shape, "self layout")
        ts_, t_off = lay(t.shape, "target layout")
        wst, w_off = lay(w.shape, "weight layout")
        gst, g_off = lay(g.shape, "grad layout")
        os_, o_off = lay(shape, "out layout")
        ts = put_view(s, -rng.random(shape).astype(dt), ss, s_off)[0]
        tt = put_view(s, t, ts_, t_off)[0]
        tw = put_view(s, w, wst, w_off)[0]
        tg = put_view(s, g, gst, g_off)[0]
        ttw = s.put(total)[0]
        to, bo, so = put_view(s, np.full(shape, SENTINEL, dt), os_, o_off, fill=SENTINEL)
        s.run("aclnnNLLLossBackward", tg, ts, tt, tw, {"none": 0, "mean": 1, "sum": 2}[reduction], ignore, ttw, to)
        s.synchronize()
        got, rest = read_view(s, bo, so, shape, os_, o_off)
    assert (rest.astype(np.float64) == SENTINEL).all()
    case = Case("nll_loss_grad", None, dtype, dict(grad=g, self=np.zeros(shape, dt), target=t, weight=w,
                                                   reduction=reduction, ignore_index=ignore,
                                                   total_weight=float(total[0])))
    d = DESCRIPTORS["nll_loss_grad"]
    expected = d.oracle(case)
    _assert_ok([compare("out", got, expected[0], d.allowed(case, expected)[0], dtype)], case.describe())


@given(data=st.data())
def test_flce_on_strided_views(emu, data):
    draw = data.draw
    dtype = draw(st.sampled_from(["float16", "bfloat16"]), label="dtype")
    dt = DTYPES[dtype]
    recompute = draw(st.booleans(), label="recompute")
    # CANN's high-performance (softmax) mode needs V >= 128
    bt, h = draw(st.integers(0, 9), label="BT"), draw(st.integers(0, 7), label="H")
    v = draw(st.integers(1, 8) if recompute else st.integers(128, 130), label="V")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    x = rng.uniform(-2, 2, (bt, h)).astype(dt)
    w = rng.uniform(-2, 2, (v, h)).astype(dt)
    grad = rng.uniform(-1, 1, bt).astype(np.float32)
    mask = rng.random(bt) < 0.3
    mt = np.where(mask, rng.integers(0, 1000, bt), rng.integers(0, v, bt)).astype(
        draw(st.sampled_from([np.int64, np.int32]), label="maskedTarget dtype"))
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    lmax = (logits.max(axis=1) if v else np.zeros(bt)).astype(np.float32)
    sexp = np.exp(logits - lmax[:, None]).sum(axis=1).astype(np.float32)
    softmax = (np.exp(logits - lmax[:, None]) / sexp[:, None]).astype(np.float32)
    packed = draw(st.booleans(), label="bit-packed mask")
    mask_arr = np.packbits(mask, bitorder="little") if packed else mask
    with emu.session() as s:
        lay = lambda arr, label: draw(layouts(arr.shape), label=label)  # noqa: E731
        tens = {}
        for name, arr in (("grad", grad), ("input", x), ("weight", w), ("mask", mask_arr), ("mt", mt),
                          ("lmax", lmax), ("sexp", sexp), ("softmax", softmax)):
            strides, off = lay(arr, f"{name} layout")
            tens[name] = put_view(s, arr, strides, off)[0]
        igs, ig_off = lay(x, "input grad layout")
        wgs, wg_off = lay(w, "weight grad layout")
        tig, big, sig = put_view(s, np.full((bt, h), SENTINEL, dt), igs, ig_off, fill=SENTINEL)
        twg, bwg, swg = put_view(s, np.full((v, h), SENTINEL, dt), wgs, wg_off, fill=SENTINEL)
        null = s.ffi.NULL
        s.run("aclnnFusedLinearCrossEntropyLossGrad", tens["grad"], tens["input"], tens["weight"], tens["mask"],
              tens["mt"], 0.0, tens["lmax"] if recompute else null, tens["sexp"] if recompute else null,
              null if recompute else tens["softmax"], tig, twg)
        s.synchronize()
        ig, rest_i = read_view(s, big, sig, (bt, h), igs, ig_off)
        wg, rest_w = read_view(s, bwg, swg, (v, h), wgs, wg_off)
    assert (rest_i.astype(np.float64) == SENTINEL).all() and (rest_w.astype(np.float64) == SENTINEL).all()
    if bt == 0:  # CANN writes nothing for BT = 0 (the adapter supplies the zero weight gradient)
        assert (wg.astype(np.float64) == SENTINEL).all()
        return
    kw = dict(logits_max=lmax, sum_exp_logits=sexp) if recompute else dict(softmax=softmax)
    case = Case("fused_linear_cross_entropy_grad", "recompute" if recompute else "softmax", dtype,
                dict(grad=grad, input=x, weight=w, target_mask=mask, masked_target=mt, **kw))
    d = DESCRIPTORS["fused_linear_cross_entropy_grad"]
    expected = d.oracle(case)
    a_in, a_w = d.allowed(case, expected)
    _assert_ok([compare("input_grad", ig, expected[0], a_in, dtype),
                compare("weight_grad", wg, expected[1], a_w, dtype)],
               f"dtype={dtype} BT={bt} H={h} V={v} recompute={recompute} packed={packed}")
