"""aclnnFusedLinearOnlineMaxSum and aclnnFusedCrossEntropyLossWithMaxSum through cffi: a sharded forward,
the all-reduce in NumPy and the loss operator equal F.cross_entropy on the full logits; every documented
check of phase one (ops-nn's aclnnFusedLinearOnlineMaxSum.md, aclnnFusedCrossEntropyLossWithMaxSum.md);
nothing written on error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xloss.backends.ascend_aclnn import _cdef as C
from xloss.reference import flce

NULLPTR, INVALID = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID
MS, CE = "aclnnFusedLinearOnlineMaxSum", "aclnnFusedCrossEntropyLossWithMaxSum"
BF16 = np.dtype(ml_dtypes.bfloat16)
SENTINEL = 77.25


def _problem(seed, bt, h, v, dt):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(bt, h)) * 1.5).astype(dt)
    w = rng.normal(size=(v, h)).astype(dt)
    return x, w, rng.integers(0, v, bt)


def ms_args(s, x, w, t, start, end, *, logits=True, tdt=np.int64):
    """An ordered argument dict for aclnnFusedLinearOnlineMaxSumGetWorkspaceSize and the output buffers."""
    bt, v = x.shape[0], w.shape[0]
    outs = {"logitsMaxLocalOut": ((bt,), np.float32), "sumExpLogitsLocalOut": ((bt,), np.float32),
            "predictedLogitsLocalOut": ((bt,), np.float32), "targetMaskOut": (((bt + 7) // 8,), np.uint8),
            "maskedTargetOut": ((bt,), tdt)}
    if logits:
        outs["vocabParallelLogitsOutOptional"] = ((bt, v), x.dtype)
    d = {"input": s.put(x)[0], "weight": s.put(w)[0], "target": s.put(np.asarray(t, tdt))[0],
         "vocabStartIndex": start, "vocabEndIndex": end}
    bufs = {}
    for name in ("logitsMaxLocalOut", "sumExpLogitsLocalOut", "predictedLogitsLocalOut", "targetMaskOut",
                 "maskedTargetOut", "vocabParallelLogitsOutOptional"):
        if name in outs:
            d[name], bufs[name] = s.empty(*outs[name])
        else:
            d[name] = s.ffi.NULL
    return d, bufs, outs


def ce_args(s, m, se, p, vpl=None):
    bt = len(m)
    d = {"logitsMax": s.put(np.asarray(m, np.float32))[0], "sumExpLogits": s.put(np.asarray(se, np.float32))[0],
         "predictedLogits": s.put(np.asarray(p, np.float32))[0], "labelSmoothing": 0.0,
         "inputOptional": s.ffi.NULL, "weightOptional": s.ffi.NULL, "vocabParallelLogitsOptional": s.ffi.NULL}
    bufs, outs = {}, {"lossOut": ((bt,), np.float32)}
    if vpl is not None:
        d["vocabParallelLogitsOptional"] = s.put(vpl)[0]
        outs["softMaxOutOptional"] = (vpl.shape, np.float32)
    d["lossOut"], bufs["lossOut"] = s.empty(*outs["lossOut"])
    d["softMaxOutOptional"] = s.ffi.NULL
    if vpl is not None:
        d["softMaxOutOptional"], bufs["softMaxOutOptional"] = s.empty(*outs["softMaxOutOptional"])
    return d, bufs, outs


def fetch(s, bufs, outs):
    return {k: s.download(b, *outs[k]) for k, b in bufs.items()}


def run_shard(s, x, w, t, start, end, **kw):
    d, bufs, outs = ms_args(s, x, w, t, start, end, **kw)
    s.run(MS, *d.values())
    return fetch(s, bufs, outs)


def _as_ref(out):
    return flce.OnlineMaxSumOut(*(out.get(k) for k in (
        "logitsMaxLocalOut", "sumExpLogitsLocalOut", "predictedLogitsLocalOut", "targetMaskOut", "maskedTargetOut",
        "vocabParallelLogitsOutOptional")))


# ---- the math -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dt, tdt", [(np.float16, np.int64), (BF16, np.int32)])
@pytest.mark.parametrize("shards", [1, 2, 3, 4])
def test_sharded_forward_equals_cross_entropy(emu, abi, layout, dt, tdt, shards):
    bt, h, v = 13, 24, 37
    x, w, t = _problem(shards, bt, h, v, dt)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    full = x64 @ w64.T
    with emu.session(layout) as s:
        outs = []
        for a, b in flce.vocab_shards(v, shards):
            got = run_shard(s, x, w[a:b], t, a, b, tdt=tdt)
            want = flce.fused_linear_online_max_sum(x64, w64[a:b], t, a, b)
            np.testing.assert_allclose(got["logitsMaxLocalOut"], want.logits_max_local, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["sumExpLogitsLocalOut"], want.sum_exp_logits_local, rtol=1e-5)
            np.testing.assert_allclose(got["predictedLogitsLocalOut"], want.predicted_logits_local, rtol=1e-5,
                                       atol=1e-5)
            np.testing.assert_array_equal(got["targetMaskOut"], want.target_mask)
            assert got["maskedTargetOut"].dtype == tdt
            np.testing.assert_array_equal(got["maskedTargetOut"], want.masked_target)
            vpl = got["vocabParallelLogitsOutOptional"]
            assert vpl.dtype == dt  # the logits rounded once to the input's dtype
            np.testing.assert_allclose(vpl.astype(np.float64), want.vocab_parallel_logits,
                                       rtol=2.0 ** -(8 if dt == BF16 else 11), atol=1e-4)
            outs.append(got)
        m, se, p = flce.all_reduce_online_max_sum([_as_ref(o) for o in outs])  # the caller's all-reduce
        d, bufs, o = ce_args(s, m, se, p)
        s.run(CE, *d.values())
        loss = fetch(s, bufs, o)["lossOut"]
        want = F.cross_entropy(torch.from_numpy(full), torch.from_numpy(t), reduction="none").numpy()
        np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-5)
        # the softmax of each shard's logits against the global max and sum
        for shard in outs:
            vpl = shard["vocabParallelLogitsOutOptional"]
            d, bufs, o = ce_args(s, m, se, p, vpl=vpl)
            s.run(CE, *d.values())
            got = fetch(s, bufs, o)
            _, want_sm = flce.fused_cross_entropy_loss_with_max_sum(m, se, p, vocab_parallel_logits=vpl)
            np.testing.assert_allclose(got["softMaxOutOptional"], want_sm, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(got["lossOut"], loss, rtol=0, atol=0)


def test_forward_outputs_feed_the_backward_operator(session):
    """The shards' targetMaskOut (bit-packed, padding target 0's mask) and maskedTargetOut, with the all-reduced max and
    sum, are aclnnFusedLinearCrossEntropyLossGrad's recompute-mode inputs: its gradients summed over the
    shards equal autograd's of F.cross_entropy (sum) on the full logits."""
    s = session
    bt, h, v = 11, 16, 30
    x, w, t = _problem(11, bt, h, v, np.float16)
    shards = flce.vocab_shards(v, 3)
    outs = [run_shard(s, x, w[a:b], t, a, b, logits=False) for a, b in shards]
    m, se, _ = flce.all_reduce_online_max_sum([_as_ref(o) for o in outs])
    grad = np.ones(bt, np.float32)
    dx, dw = np.zeros((bt, h)), []
    for (a, b), o in zip(shards, outs):
        ig, igb = s.empty((bt, h), np.float16)
        wg, wgb = s.empty((b - a, h), np.float16)
        s.run("aclnnFusedLinearCrossEntropyLossGrad", s.put(grad)[0], s.put(x)[0], s.put(w[a:b])[0],
              s.put(o["targetMaskOut"])[0], s.put(o["maskedTargetOut"])[0], 0.0, s.put(m.astype(np.float32))[0],
              s.put(se.astype(np.float32))[0], s.ffi.NULL, ig, wg)
        dx += s.download(igb, (bt, h), np.float16)
        dw.append(s.download(wgb, (b - a, h), np.float16).astype(np.float64))
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    wt = torch.tensor(w.astype(np.float64), requires_grad=True)
    F.cross_entropy(xt @ wt.T, torch.from_numpy(t), reduction="sum").backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-2, atol=2e-3 * np.abs(xt.grad.numpy()).max())
    np.testing.assert_allclose(np.concatenate(dw), wt.grad.numpy(), rtol=1e-2,
                               atol=2e-3 * np.abs(wt.grad.numpy()).max())


def test_without_logits_the_statistics_are_the_same(session):
    x, w, t = _problem(9, 10, 8, 12, np.float16)
    with_logits = run_shard(session, x, w, t, 3, 12)
    without = run_shard(session, x, w, t, 3, 12, logits=False)
    assert "vocabParallelLogitsOutOptional" not in without
    for k, v in without.items():
        np.testing.assert_array_equal(v, with_logits[k])


def test_shard_bounds_are_start_inclusive_end_exclusive(session):
    x, w, _ = _problem(2, 8, 4, 5, np.float16)
    t = np.array([9, 10, 11, 12, 13, 14, 15, 0])  # shard [10, 14) of a V=5 weight: end - start < V is allowed
    got = run_shard(session, x, w, t, 10, 14)
    here = np.array([0, 1, 1, 1, 1, 0, 0, 0], bool)
    np.testing.assert_array_equal(flce.unpack_mask(got["targetMaskOut"], 8), ~here)
    np.testing.assert_array_equal(got["maskedTargetOut"], np.where(here, t - 10, 0))
    assert (got["predictedLogitsLocalOut"][~here] == 0).all() and (got["predictedLogitsLocalOut"][here] <= 0).all()


@pytest.mark.parametrize("bt", [1, 7, 8, 9, 17])
def test_mask_padding_bits_are_the_mask_of_target_zero(session, bt):
    x, w, _ = _problem(bt, bt, 3, 4, np.float16)
    got = run_shard(session, x, w, np.zeros(bt, np.int64), 0, 4)  # every target here, padding (target 0) too
    assert not np.unpackbits(got["targetMaskOut"], bitorder="little").any()
    got = run_shard(session, x, w, np.full(bt, 4, np.int64), 4, 8)  # target 0 is outside: padding set
    bits = np.unpackbits(got["targetMaskOut"], bitorder="little")
    assert not bits[:bt].any() and bits[bt:].all()


def test_empty_hidden_and_empty_batch(session):
    """H = 0: the logits are all 0 (max 0, sum V); BT = 0: success, nothing to write."""
    x, w = np.zeros((3, 0), np.float16), np.zeros((5, 0), np.float16)
    got = run_shard(session, x, w, np.array([0, 4, 9]), 0, 5)
    np.testing.assert_array_equal(got["logitsMaxLocalOut"], 0)
    np.testing.assert_array_equal(got["sumExpLogitsLocalOut"], 5)
    np.testing.assert_array_equal(got["predictedLogitsLocalOut"], 0)
    np.testing.assert_array_equal(got["vocabParallelLogitsOutOptional"], 0)
    got = run_shard(session, np.zeros((0, 4), np.float16), np.ones((5, 4), np.float16), np.zeros(0), 0, 5)
    assert all(v.size == 0 for v in got.values())


# ---- phase one's checks -----------------------------------------------------------------------------------


def _ms_valid(s, **kw):
    x, w, t = _problem(0, 5, 4, 6, np.float16)
    return ms_args(s, x, w, t, 0, 6, **kw)[0]


def _ce_valid(s, softmax=True):
    vpl = np.zeros((5, 6), np.float16) if softmax else None
    return ce_args(s, np.zeros(5), np.ones(5), np.zeros(5), vpl=vpl)[0]


def _status(abi, op, d):
    st, ws, ex = abi.phase_one(op, *d.values())
    if st == 0:
        abi.lib.aclDestroyAclOpExecutor(ex)
    else:
        assert ex == abi.NULL and ws == 0
    return st


MS_REQUIRED = ("input", "weight", "target", "logitsMaxLocalOut", "sumExpLogitsLocalOut", "predictedLogitsLocalOut",
               "targetMaskOut", "maskedTargetOut")
CE_REQUIRED = ("logitsMax", "sumExpLogits", "predictedLogits", "lossOut")


@pytest.mark.parametrize("op, make, required", [(MS, _ms_valid, MS_REQUIRED), (CE, _ce_valid, CE_REQUIRED)])
def test_null_required_pointers_are_161001(session, abi, op, make, required):
    assert _status(abi, op, make(session)) == 0
    for name in required:
        d = make(session)
        d[name] = abi.NULL
        assert _status(abi, op, d) == NULLPTR, name
        assert name in abi.message()
    fn = abi.lib.symbol(op + "GetWorkspaceSize")
    assert fn(*make(session).values(), abi.NULL, abi.ffi.new("aclOpExecutor **")) == NULLPTR
    assert fn(*make(session).values(), abi.ffi.new("uint64_t *"), abi.NULL) == NULLPTR


def test_optional_nulls_are_valid(session, abi):
    assert _status(abi, MS, _ms_valid(session, logits=False)) == 0
    assert _status(abi, CE, _ce_valid(session, softmax=False)) == 0


def _ms_bad(s):
    """(what, overrides): each breaks one documented rule of aclnnFusedLinearOnlineMaxSum."""
    put, empty = (lambda a: s.put(a)[0]), (lambda *a: s.empty(*a)[0])
    yield "input FLOAT", {"input": put(np.zeros((5, 4), np.float32)), "weight": put(np.zeros((6, 4), np.float32))}
    yield "weight dtype differs", {"weight": put(np.zeros((6, 4), BF16))}
    yield "target FLOAT", {"target": put(np.zeros(5, np.float32))}
    yield "maskedTarget dtype differs from target", {"maskedTargetOut": empty((5,), np.int32)}
    yield "logitsMax FLOAT16", {"logitsMaxLocalOut": empty((5,), np.float16)}
    yield "sumExp INT32", {"sumExpLogitsLocalOut": empty((5,), np.int32)}
    yield "predicted FLOAT16", {"predictedLogitsLocalOut": empty((5,), np.float16)}
    yield "mask BOOL", {"targetMaskOut": empty((1,), np.bool_)}
    yield "logits dtype differs from input", {"vocabParallelLogitsOutOptional": empty((5, 6), np.float32)}
    yield "input 1-D", {"input": put(np.zeros(20, np.float16))}
    yield "weight 3-D", {"weight": put(np.zeros((6, 4, 1), np.float16))}
    yield "weight H differs", {"weight": put(np.zeros((6, 3), np.float16))}
    yield "weight.size(0) = 0", {"weight": put(np.zeros((0, 4), np.float16)), "vocabEndIndex": 0,
                                 "vocabParallelLogitsOutOptional": empty((5, 0), np.float16)}
    yield "H > 65534", {"input": put(np.zeros((5, 65535), np.float16)),
                        "weight": put(np.zeros((6, 65535), np.float16))}
    yield "target length", {"target": put(np.zeros(4, np.int64))}
    yield "target 2-D", {"target": put(np.zeros((5, 1), np.int64))}
    yield "logitsMax length", {"logitsMaxLocalOut": empty((6,), np.float32)}
    yield "sumExp length", {"sumExpLogitsLocalOut": empty((4,), np.float32)}
    yield "predicted length", {"predictedLogitsLocalOut": empty((5, 1), np.float32)}
    yield "maskedTarget length", {"maskedTargetOut": empty((6,), np.int64)}
    yield "mask bytes", {"targetMaskOut": empty((2,), np.uint8)}
    yield "logits shape", {"vocabParallelLogitsOutOptional": empty((5, 5), np.float16)}
    yield "vocabStartIndex < 0", {"vocabStartIndex": -1}
    yield "vocabEndIndex < vocabStartIndex", {"vocabStartIndex": 3, "vocabEndIndex": 2}


@pytest.mark.parametrize("case", range(24))
def test_max_sum_refuses_each_documented_violation(session, abi, case):
    what, override = list(_ms_bad(session))[case]
    d = _ms_valid(session)
    d.update(override)
    assert _status(abi, MS, d) == INVALID, what
    assert abi.message().startswith("aclnnFusedLinearOnlineMaxSumGetWorkspaceSize:"), abi.message()


def test_max_sum_refuses_private_formats_and_aliased_target(session, abi):
    d = _ms_valid(session)
    buf = session.upload(np.zeros((5, 4), np.float16))
    d["input"] = session.tensor(buf, (5, 4), np.float16, fmt=C.ACL_FORMAT_FRACTAL_NZ)
    assert _status(abi, MS, d) == INVALID and "format" in abi.message()
    # an output over the target's memory would change the indices under the kernel
    d = _ms_valid(session)
    tbuf = session.upload(np.zeros(5, np.int64))
    d["target"] = session.tensor(tbuf, (5,), np.int64)
    d["maskedTargetOut"] = session.tensor(tbuf, (5,), np.int64)
    assert _status(abi, MS, d) == INVALID and "overlaps" in abi.message()


def _ce_bad(s):
    put, empty = (lambda a: s.put(a)[0]), (lambda *a: s.empty(*a)[0])
    yield "labelSmoothing 0.1", {"labelSmoothing": 0.1}
    yield "labelSmoothing nan", {"labelSmoothing": float("nan")}
    yield "logitsMax FLOAT16", {"logitsMax": put(np.zeros(5, np.float16))}
    yield "sumExp FLOAT16", {"sumExpLogits": put(np.ones(5, np.float16))}
    yield "predicted INT32", {"predictedLogits": put(np.zeros(5, np.int32))}
    yield "loss FLOAT16", {"lossOut": empty((5,), np.float16)}
    yield "softmax FLOAT16", {"softMaxOutOptional": empty((5, 6), np.float16)}
    yield "logits INT32", {"vocabParallelLogitsOptional": put(np.zeros((5, 6), np.int32))}
    yield "logitsMax 2-D", {"logitsMax": put(np.zeros((5, 1), np.float32))}
    yield "sumExp length", {"sumExpLogits": put(np.ones(4, np.float32))}
    yield "predicted length", {"predictedLogits": put(np.zeros(6, np.float32))}
    yield "loss length", {"lossOut": empty((4,), np.float32)}
    yield "logits rows", {"vocabParallelLogitsOptional": put(np.zeros((4, 6), np.float16))}
    yield "logits 1-D", {"vocabParallelLogitsOptional": put(np.zeros(6, np.float16))}
    yield "softmax shape", {"softMaxOutOptional": empty((5, 5), np.float32)}


@pytest.mark.parametrize("case", range(15))
def test_loss_refuses_each_documented_violation(session, abi, case):
    what, override = list(_ce_bad(session))[case]
    d = _ce_valid(session)
    d.update(override)
    assert _status(abi, CE, d) == INVALID, what
    assert abi.message().startswith("aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize:"), abi.message()


# ---- nothing written on error -----------------------------------------------------------------------------


def test_outputs_untouched_on_error(session, abi):
    """A refused phase one, and a phase two refused for its workspace, leave every output as it was."""
    s = session
    x, w, t = _problem(4, 9, 4, 6, np.float16)
    d, bufs, outs = ms_args(s, x, w, t, 0, 6)
    for name, b in bufs.items():
        s.upload(np.full(outs[name][0], SENTINEL).astype(outs[name][1]), b)
    before = fetch(s, bufs, outs)
    bad = dict(d, vocabStartIndex=-1)
    assert _status(abi, MS, bad) == INVALID
    bad = dict(d, target=s.put(np.zeros(9, np.float32))[0])
    assert _status(abi, MS, bad) == INVALID
    st, ws, ex = abi.phase_one(MS, *d.values())
    assert st == 0 and ws > 0
    assert abi.phase_two(MS, s.malloc(ws).ptr, ws - 1, ex, s.stream) == INVALID
    after = fetch(s, bufs, outs)
    for name in bufs:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)

    d, bufs, outs = ce_args(s, np.zeros(5), np.ones(5), np.zeros(5), vpl=np.zeros((5, 6), np.float32))
    for name, b in bufs.items():
        s.upload(np.full(outs[name][0], SENTINEL, np.float32), b)
    assert _status(abi, CE, dict(d, labelSmoothing=0.5)) == INVALID
    st, ws, ex = abi.phase_one(CE, *d.values())
    assert st == 0 and ws > 0
    assert abi.phase_two(CE, s.malloc(ws).ptr, ws - 1, ex, s.stream) == INVALID
    for name, got in fetch(s, bufs, outs).items():
        assert (got == SENTINEL).all(), name


def test_header_declares_what_cffi_declares():
    from pathlib import Path

    inc = Path(__file__).resolve().parents[3] / "backends" / "ascend_aclnn" / "include" / "aclnnop"
    for header, op in (("aclnn_fused_linear_online_max_sum.h", MS), ("aclnn_fused_cross_entropy_loss_with_max_sum.h",
                                                                     CE)):
        text = (inc / header).read_text()
        assert f"{op}GetWorkspaceSize(" in text and f"{op}(void *workspace" in text
        assert f"{op}GetWorkspaceSize(" in C.CDEF
    assert C.phase_one_parameters()[MS] == (
        "input", "weight", "target", "vocabStartIndex", "vocabEndIndex", "logitsMaxLocalOut", "sumExpLogitsLocalOut",
        "predictedLogitsLocalOut", "targetMaskOut", "maskedTargetOut", "vocabParallelLogitsOutOptional")
    assert C.phase_one_parameters()[CE] == (
        "logitsMax", "sumExpLogits", "predictedLogits", "labelSmoothing", "inputOptional", "weightOptional",
        "vocabParallelLogitsOptional", "lossOut", "softMaxOutOptional")
