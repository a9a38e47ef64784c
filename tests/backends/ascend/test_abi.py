"""The emulator's CANN ABI contract, called directly through cffi: tensor creation, the status
codes of phase one, the executor and workspace rules of phase two, the runtime subset, and
element conversions."""

from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from xloss.backends.ascend_aclnn import _cdef as C

NULLPTR, INVALID, RUNTIME = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID, C.ACLNN_ERR_RUNTIME_ERROR
INVALID_PARAM = 100000  # ACL_ERROR_INVALID_PARAM
INNER = 561000  # ACLNN_ERR_INNER: what CANN's phase two returns for an executor it does not know


def _phase_one(abi, op, d):
    return abi.phase_one(op, *d.values())


# ---- aclCreateTensor / aclDestroyTensor -------------------------------------------------------------


@pytest.mark.parametrize("label, kw", [
    ("negative dim", dict(shape=[-1, 2], strides=[2, 1], storage=[8])),
    ("view past storage", dict(shape=[3, 3], strides=[3, 1], offset=0, storage=[8])),
    ("offset past storage", dict(shape=[1], strides=[1], offset=8, storage=[8])),
    ("stride overflow", dict(shape=[3], strides=[2**62], storage=[8])),
    ("unknown dtype", dict(shape=[2], dtype=C.ACL_DOUBLE + 2)),  # ACL_STRING: no element size
    ("unknown format", dict(shape=[2], fmt=99)),
    ("too many dims", dict(shape=[1] * 65)),
])
def test_create_tensor_refuses(session, abi, label, kw):
    buf = session.malloc(64)
    before = abi.live(C.LIVE_TENSORS)
    kw = dict(kw)
    dt = kw.pop("dtype", C.ACL_FLOAT)
    t = abi.create(buf, kw.pop("shape"), dt, **kw)
    assert t == abi.NULL
    assert abi.message().startswith("aclCreateTensor:")
    assert abi.live(C.LIVE_TENSORS) == before


def test_create_tensor_null_data_and_null_arrays(session, abi):
    buf = session.malloc(64)
    assert abi.create(buf, [2], C.ACL_FLOAT, data=abi.NULL) == abi.NULL  # non-empty storage needs data
    ffi, lib = abi.ffi, abi.lib
    dims = ffi.new("int64_t[]", [2])
    assert lib.aclCreateTensor(ffi.NULL, 1, C.ACL_FLOAT, dims, 0, C.ACL_FORMAT_ND, dims, 1, buf.ptr) == ffi.NULL
    # an empty tensor may have no data; a 0-d tensor over 1-element storage is fine
    t = lib.aclCreateTensor(ffi.new("int64_t[]", [0]), 1, C.ACL_FLOAT, ffi.new("int64_t[]", [1]), 0,
                            C.ACL_FORMAT_ND, ffi.new("int64_t[]", [0]), 1, ffi.NULL)
    assert t != ffi.NULL and lib.aclDestroyTensor(t) == 0
    t = lib.aclCreateTensor(ffi.NULL, 0, C.ACL_FLOAT, ffi.NULL, 0, C.ACL_FORMAT_ND, ffi.NULL, 0, buf.ptr)
    assert t != ffi.NULL and lib.aclDestroyTensor(t) == 0


def test_destroy_tensor(session, abi):
    buf = session.malloc(16)
    t = abi.create(buf, [4], C.ACL_FLOAT)
    assert abi.lib.aclDestroyTensor(t) == 0
    assert abi.lib.aclDestroyTensor(t) == INVALID  # twice: reported, not a double free
    assert "not a live aclTensor" in abi.message()
    assert abi.lib.aclDestroyTensor(abi.NULL) == 0  # as CANN (opbase aclDestroyTensor): nothing to destroy


def test_create_tensor_with_null_strides_is_contiguous(session, abi):
    """CANN's aclTensor constructor derives contiguous strides when stride is NULL (ToContiguousStrides)."""
    ffi, lib = abi.ffi, abi.lib
    buf = session.malloc(2 * 3 * 4 * 4)
    dims = ffi.new("int64_t[]", [2, 3, 4])
    t = lib.aclCreateTensor(dims, 3, C.ACL_FLOAT, ffi.NULL, 0, C.ACL_FORMAT_ND, ffi.new("int64_t[]", [24]), 1,
                            buf.ptr)
    assert t != ffi.NULL
    st, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
    assert lib.aclGetViewStrides(t, st, n) == 0
    assert [st[0][i] for i in range(n[0])] == [12, 4, 1]
    ctypes.CDLL(None).free(ctypes.c_void_p(int(ffi.cast("uintptr_t", st[0]))))  # the caller frees it (C: free)
    assert lib.aclDestroyTensor(t) == 0


# ---- phase one ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["aclnnXlossSigmoidFocalLoss", "aclnnXlossSigmoidFocalLossBackward",
                                "aclnnBinaryCrossEntropyBackward", "aclnnNLLLossBackward",
                                "aclnnFusedLinearCrossEntropyLossGrad", "aclnnFusedLinearOnlineMaxSum",
                                "aclnnFusedCrossEntropyLossWithMaxSum"])
def test_null_required_pointer_is_161001(session, abi, ops, op):
    for name in ops.required[op]:
        d = ops.args(session, op)
        d[name] = abi.NULL
        st, ws, ex = _phase_one(abi, op, d)
        assert st == NULLPTR, (op, name)
        assert ex == abi.NULL and ws == 0
        assert name in abi.message()
    # the outputs workspaceSize and executor are required too
    d = ops.args(session, op)
    fn = abi.lib.symbol(op + "GetWorkspaceSize")
    assert fn(*d.values(), abi.NULL, abi.ffi.new("aclOpExecutor **")) == NULLPTR
    assert fn(*d.values(), abi.ffi.new("uint64_t *"), abi.NULL) == NULLPTR


def test_valid_calls_and_optional_nulls(session, abi, ops):
    for op in ops.names:
        for override in ({}, {"weightOptional": abi.NULL}):
            d = ops.args(session, op)
            if any(k not in d for k in override):
                continue
            d.update(override)
            st, ws, ex = _phase_one(abi, op, d)
            assert st == 0, (op, abi.message())
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0  # never run: released explicitly


def test_flce_recompute_needs_both_row_tensors(session, abi, ops):
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    for name in ("logitsMaxOptional", "sumExpLogitsOptional"):
        d = ops.args(session, op, mode="recompute")
        d[name] = abi.NULL
        assert _phase_one(abi, op, d)[0] == NULLPTR
    # with softmax given they are ignored, whatever they are
    d = ops.args(session, op, mode="softmax")
    d["logitsMaxOptional"] = d["input"]
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0 and ws > 0
    abi.lib.aclDestroyAclOpExecutor(ex)


def _bad_dtype_cases(s, abi, ops):
    i32 = s.put(np.zeros((3, 5), np.int32))[0]
    f64 = s.put(np.zeros((3, 5), np.float64))[0]
    yield "aclnnXlossSigmoidFocalLoss", {"self": i32}
    yield "aclnnXlossSigmoidFocalLoss", {"target": f64}
    yield "aclnnXlossSigmoidFocalLossBackward", {"gradOutput": s.put(np.asarray(1, np.int64))[0]}
    yield "aclnnBinaryCrossEntropyBackward", {"weightOptional": s.put(np.ones(5, np.int8))[0]}
    yield "aclnnBinaryCrossEntropyBackward", {"out": s.empty((3, 5), np.float64)[0]}
    yield "aclnnNLLLossBackward", {"target": s.put(np.zeros(4, np.float32))[0]}
    yield "aclnnNLLLossBackward", {"target": s.put(np.zeros(4, np.int16))[0]}
    yield "aclnnNLLLossBackward", {"weight": s.put(np.ones(3, np.float16))[0]}  # must match self
    yield "aclnnNLLLossBackward", {"totalWeight": s.put(np.ones(1, np.float16))[0]}
    yield "aclnnNLLLossBackward", {"out": s.empty((4, 3), np.int32)[0]}  # (another float type is fine)
    flce = "aclnnFusedLinearCrossEntropyLossGrad"
    yield flce, {"input": s.put(np.zeros((5, 4), np.float32))[0]}  # float32 input: no such path
    yield flce, {"weight": s.put(np.zeros((6, 4), ml_dtypes.bfloat16))[0]}
    yield flce, {"grad": s.put(np.zeros(5, np.float16))[0]}
    yield flce, {"targetMask": s.put(np.zeros(5, np.int32))[0]}
    yield flce, {"maskedTarget": s.put(np.zeros(5, np.uint8))[0]}
    yield flce, {"weightGradOut": s.empty((6, 4), np.float32)[0]}


def _bad_shape_cases(s, abi, ops):
    yield "aclnnXlossSigmoidFocalLoss", {"target": s.put(np.zeros((3, 4), np.float32))[0]}
    yield "aclnnXlossSigmoidFocalLoss", {"weightOptional": s.put(np.zeros((2, 3, 5), np.float32))[0]}
    yield "aclnnXlossSigmoidFocalLoss", {"out": s.empty((5, 3), np.float32)[0]}
    yield "aclnnXlossSigmoidFocalLossBackward", {"gradOutput": s.put(np.zeros((3, 2), np.float32))[0]}
    yield "aclnnBinaryCrossEntropyBackward", {"out": s.empty((15,), np.float32)[0]}
    yield "aclnnNLLLossBackward", {"weight": s.put(np.ones(4, np.float32))[0]}
    yield "aclnnNLLLossBackward", {"target": s.put(np.zeros(3, np.int64))[0]}
    yield "aclnnNLLLossBackward", {"gradOutput": s.put(np.ones(3, np.float32))[0]}
    yield "aclnnNLLLossBackward", {"self": s.put(np.zeros((4, 3, 1), np.float32))[0]}
    yield "aclnnNLLLossBackward", {"totalWeight": s.put(np.ones(2, np.float32))[0]}
    flce = "aclnnFusedLinearCrossEntropyLossGrad"
    yield flce, {"weight": s.put(np.zeros((6, 3), np.float16))[0]}
    yield flce, {"maskedTarget": s.put(np.zeros(4, np.int64))[0]}
    yield flce, {"targetMask": s.put(np.zeros(4, bool))[0]}  # bool: one per token
    yield flce, {"targetMask": s.put(np.zeros((0,), np.uint8))[0]}  # bit-packed: too few bytes
    yield flce, {"logitsMaxOptional": s.put(np.zeros(6, np.float32))[0]}
    yield flce, {"inputGradOut": s.empty((5, 5), np.float16)[0]}
    yield flce, {"grad": s.put(np.zeros((5, 1), np.float32))[0]}


@pytest.mark.parametrize("kind", ["dtype", "shape"])
def test_bad_dtype_or_shape_is_161002(session, abi, ops, kind):
    cases = list((_bad_dtype_cases if kind == "dtype" else _bad_shape_cases)(session, abi, ops))
    for op, override in cases:
        d = ops.args(session, op)
        d.update(override)
        st, ws, ex = _phase_one(abi, op, d)
        assert st == INVALID, (op, override.keys(), st)
        assert ex == abi.NULL
        assert abi.message()


def test_bad_attributes_are_161002(session, abi, ops):
    cases = [(op, {"reduction": r}) for op in ops.names[:4] for r in (-1, 3)]
    cases += [(op, {"gamma": g}) for op in ops.names[:2] for g in (-0.5, float("nan"), float("inf"))]
    cases += [(op, {"alpha": a}) for op in ops.names[:2] for a in (1.5, float("nan"))]
    cases += [("aclnnFusedLinearCrossEntropyLossGrad", {"labelSmoothing": ls}) for ls in (0.1, -0.1, float("nan"))]
    for op, override in cases:
        d = ops.args(session, op)
        d.update(override)
        assert _phase_one(abi, op, d)[0] == INVALID, (op, override)
    assert "labelSmoothing" in abi.message()
    # alpha < 0 (no class weighting) and gamma 0 are valid
    d = ops.args(session, "aclnnXlossSigmoidFocalLoss")
    d.update(alpha=-1.0, gamma=0.0)
    st, _, ex = _phase_one(abi, "aclnnXlossSigmoidFocalLoss", d)
    assert st == 0
    abi.lib.aclDestroyAclOpExecutor(ex)


def test_memory_checks_are_161002(session, abi, ops):
    op = "aclnnBinaryCrossEntropyBackward"
    buf = session.upload(np.zeros(32, np.float32))
    host = np.zeros(15, np.float32)
    misaligned = abi.create(buf, [3, 5], C.ACL_FLOAT, data=abi.ffi.cast("char *", buf.ptr) + 4)
    in_host = abi.create(buf, [3, 5], C.ACL_FLOAT, data=abi.ffi.cast("void *", host.ctypes.data))
    nz = abi.create(buf, [3, 5], C.ACL_FLOAT, fmt=C.ACL_FORMAT_FRACTAL_NZ)
    nine_d = abi.create(buf, [1] * 9, C.ACL_FLOAT)
    # a pointer that is no aclTensor (a destroyed one's address may be reused by a new tensor)
    dead = abi.ffi.cast("aclTensor *", host.ctypes.data)
    # storage larger than the device block it claims to live in
    big = abi.create(buf, [3, 5], C.ACL_FLOAT, storage=[64])
    try:
        for t, words in ((misaligned, "aligned"), (in_host, "device memory"), (nz, "format"),
                         (nine_d, "dimensions"), (dead, "not a live aclTensor"), (big, "device memory")):
            d = ops.args(session, op)
            d["self"] = t
            assert _phase_one(abi, op, d)[0] == INVALID, words
            assert words in abi.message()
    finally:
        for t in (misaligned, in_host, nz, nine_d, big):
            abi.lib.aclDestroyTensor(t)


def test_plain_formats_are_accepted(session, abi, ops):
    buf = session.upload(np.full(15, 0.5, np.float32))
    for fmt in (C.ACL_FORMAT_NCHW, C.ACL_FORMAT_NHWC, C.ACL_FORMAT_ND):
        d = ops.args(session, "aclnnBinaryCrossEntropyBackward")
        d["self"] = session.tensor(buf, (3, 5), np.float32, fmt=fmt)
        d["target"] = session.tensor(buf, (3, 5), np.float32, fmt=fmt)  # BCE: in self's format (CheckFormat)
        d["weightOptional"] = session.tensor(buf, (1, 5), np.float32, fmt=fmt)
        st, _, ex = _phase_one(abi, "aclnnBinaryCrossEntropyBackward", d)
        assert st == 0
        abi.lib.aclDestroyAclOpExecutor(ex)


# ---- phase two --------------------------------------------------------------------------------------


def _workspace(s, size):
    return s.malloc(size).ptr if size else s.ffi.NULL


def test_single_use_executor_runs_once(session, abi, ops):
    for op in ops.names:
        st, ws, ex = _phase_one(abi, op, ops.args(session, op, reduction=1 if "Focal" in op else 0))
        assert st == 0
        wsp = _workspace(session, ws)
        assert abi.phase_two(op, wsp, ws, ex, session.stream) == 0, abi.message()
        assert abi.phase_two(op, wsp, ws, ex, session.stream) == INNER, op  # an executor CANN does not know
        assert "runs once" in abi.message()
        assert abi.lib.aclDestroyAclOpExecutor(ex) == INNER  # already released by its run (opbase: 561000)


def test_repeatable_executor_runs_many_times_then_is_destroyed(session, abi, ops):
    op = "aclnnNLLLossBackward"
    d = ops.args(session, op)
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0 and abi.lib.aclSetAclOpExecutorRepeatable(ex) == 0
    live = abi.live(C.LIVE_EXECUTORS)
    for _ in range(50):
        assert abi.phase_two(op, abi.NULL, 0, ex, session.stream) == 0
    assert abi.live(C.LIVE_EXECUTORS) == live
    assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
    assert abi.live(C.LIVE_EXECUTORS) == live - 1
    assert abi.phase_two(op, abi.NULL, 0, ex, session.stream) == INNER  # gone
    assert abi.lib.aclDestroyAclOpExecutor(ex) == INNER  # opbase acl_op_api.cpp: no executor magic number
    assert abi.lib.aclSetAclOpExecutorRepeatable(ex) == INNER
    assert abi.lib.aclDestroyAclOpExecutor(abi.NULL) == 561103  # ACLNN_ERR_INNER_NULLPTR
    assert abi.lib.aclSetAclOpExecutorRepeatable(abi.NULL) == 561103


@pytest.mark.parametrize("op, kw", [("aclnnFusedLinearCrossEntropyLossGrad", {}),
                                    ("aclnnXlossSigmoidFocalLoss", {"reduction": 1})])
def test_workspace_rules(session, abi, ops, op, kw):
    st, ws, ex = _phase_one(abi, op, ops.args(session, op, **kw))
    assert st == 0 and ws > 0 and ws % 32 == 0
    abi.lib.aclSetAclOpExecutorRepeatable(ex)
    wsp = session.malloc(ws).ptr
    host = np.zeros(ws, np.uint8)
    try:
        assert abi.phase_two(op, wsp, ws - 1, ex, session.stream) == INVALID
        assert "smaller than" in abi.message()
        assert abi.phase_two(op, abi.NULL, ws, ex, session.stream) == NULLPTR
        assert abi.phase_two(op, abi.ffi.cast("void *", host.ctypes.data), ws, ex, session.stream) == INVALID
        assert abi.phase_two(op, wsp, ws, ex, session.stream) == 0
        assert abi.phase_two(op, wsp, ws + 100, ex, session.stream) == 0  # larger is fine
    finally:
        abi.lib.aclDestroyAclOpExecutor(ex)
    # a failed run spends a single-use executor too
    st, ws, ex = _phase_one(abi, op, ops.args(session, op, **kw))
    assert abi.phase_two(op, wsp, ws - 1, ex, session.stream) == INVALID
    assert abi.phase_two(op, wsp, ws, ex, session.stream) == INNER


def test_executor_of_another_operator(session, abi, ops):
    st, ws, ex = _phase_one(abi, "aclnnNLLLossBackward", ops.args(session, "aclnnNLLLossBackward"))
    assert abi.phase_two("aclnnBinaryCrossEntropyBackward", abi.NULL, 0, ex, session.stream) == INVALID
    assert "created by aclnnNLLLossBackwardGetWorkspaceSize" in abi.message()
    assert abi.phase_two("aclnnNLLLossBackward", abi.NULL, 0, ex, session.stream) == 0  # not spent by that
    assert abi.phase_two("aclnnNLLLossBackward", abi.NULL, 0, abi.NULL, session.stream) == NULLPTR


def test_runtime_errors_in_phase_two(session, abi, ops):
    op = "aclnnBinaryCrossEntropyBackward"
    # an unknown stream
    st, ws, ex = _phase_one(abi, op, ops.args(session, op))
    bogus = abi.ffi.cast("void *", 0x1234560)
    assert abi.phase_two(op, abi.NULL, 0, ex, bogus) == RUNTIME
    # a thread without a device context
    st, ws, ex = _phase_one(abi, op, ops.args(session, op))
    got = []
    t = threading.Thread(target=lambda: got.append(abi.phase_two(op, abi.NULL, 0, ex, abi.NULL)))
    t.start()
    t.join()
    assert got == [RUNTIME]
    # device memory freed between the phases
    d = ops.args(session, op)
    buf = session.upload(np.full(15, 0.5, np.float32))
    d["self"] = session.tensor(buf, (3, 5), np.float32)
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0
    assert abi.lib.aclrtFree(buf.ptr) == 0
    session._buffers.remove(buf)
    assert abi.phase_two(op, abi.NULL, 0, ex, session.stream) == RUNTIME
    assert "freed" in abi.message()


def test_destroyed_tensors_do_not_matter_after_phase_one(session, abi):
    """The executor keeps its own copy of each operand's description."""
    s = session
    x = np.array([0.25, 0.5], np.float32)
    bufs = [s.upload(x), s.upload(np.array([0.0, 1.0], np.float32)), s.upload(np.asarray(1.0, np.float32)),
            s.malloc(8)]
    ts = [abi.create(bufs[0], [2], C.ACL_FLOAT), abi.create(bufs[1], [2], C.ACL_FLOAT),
          abi.create(bufs[2], [], C.ACL_FLOAT), abi.create(bufs[3], [2], C.ACL_FLOAT)]
    st, ws, ex = abi.phase_one("aclnnBinaryCrossEntropyBackward", ts[2], ts[0], ts[1], abi.NULL, 0, ts[3])
    for t in ts:
        abi.lib.aclDestroyTensor(t)
    assert st == 0 and abi.phase_two("aclnnBinaryCrossEntropyBackward", abi.NULL, 0, ex, s.stream) == 0
    out = s.download(bufs[3], (2,), np.float32)
    np.testing.assert_allclose(out, (x - [0, 1]) / (x * (1 - x)), rtol=1e-6)


def test_nll_target_out_of_range_at_run_time(session, abi, ops):
    """Device data cannot be checked in phase one; phase two refuses before writing anything."""
    op = "aclnnNLLLossBackward"
    d = ops.args(session, op)
    out_buf = session.upload(np.full((4, 3), 7.0, np.float32))
    d["out"] = session.tensor(out_buf, (4, 3), np.float32)
    for bad in (3, -1):
        d["target"] = session.put(np.array([0, bad, 1, 1], np.int64))[0]
        st, ws, ex = _phase_one(abi, op, d)
        assert st == 0
        assert abi.phase_two(op, abi.NULL, 0, ex, session.stream) == RUNTIME
        assert f"target[1] = {bad}" in abi.message()
        np.testing.assert_array_equal(session.download(out_buf, (4, 3), np.float32), 7.0)


def test_flce_masked_target_out_of_range_is_not_checked_and_never_indexes(session, abi, ops):
    """CANN's operator does not check maskedTarget's range (the adapter does); the emulator runs, and an
    out-of-range target subtracts nothing (it is never used as an index)."""
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    results = []
    for mt in ([6, 0, 5, 2, 0], [-3, 0, 5, 2, 0], [2**40, 0, 5, 2, 0]):
        d = ops.args(session, op)
        d["maskedTarget"] = session.put(np.array(mt, np.int64))[0]
        d["inputGradOut"], big = session.empty((5, 4), np.float16)
        st, ws, ex = _phase_one(abi, op, d)
        assert st == 0
        assert abi.phase_two(op, session.malloc(ws).ptr, ws, ex, session.stream) == 0
        results.append(session.download(big, (5, 4), np.float16))
    assert all(np.isfinite(r).all() for r in results)
    np.testing.assert_array_equal(results[0], results[1])  # both out of range: the same (nothing subtracted)
    np.testing.assert_array_equal(results[0], results[2])


def test_flce_bt_zero_writes_nothing_and_small_v_only_refused_with_softmax(session, abi, ops):
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    d = ops.args(session, op)
    z16 = np.zeros((0, 4), np.float16)
    d.update(grad=session.put(np.zeros(0, np.float32))[0], input=session.put(z16)[0],
             targetMask=session.put(np.zeros(0, bool))[0], maskedTarget=session.put(np.zeros(0, np.int64))[0],
             logitsMaxOptional=session.put(np.zeros(0, np.float32))[0],
             sumExpLogitsOptional=session.put(np.zeros(0, np.float32))[0],
             inputGradOut=session.empty((0, 4), np.float16)[0])
    d["weightGradOut"], bw = session.empty((6, 4), np.float16)
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0 and abi.phase_two(op, _workspace(session, ws), ws, ex, session.stream) == 0
    assert np.isnan(session.download(bw, (6, 4), np.float16)).all()  # untouched: still the fresh-memory NaN
    # V = 6: fine in recompute mode (above), refused with softmaxOptional
    d = ops.args(session, op, mode="softmax")
    w6 = np.ones((6, 4), np.float16)
    d.update(weight=session.put(w6)[0], softmaxOptional=session.put(np.full((5, 6), 1 / 6, np.float32))[0],
             weightGradOut=session.empty((6, 4), np.float16)[0])
    assert _phase_one(abi, op, d)[0] == INVALID and "at least 128" in abi.message()


@pytest.mark.parametrize("v", [128, 300])
def test_flce_high_performance_mode_leaves_softmax_as_the_kernel_does(session, abi, ops, v):
    """ops-nn op_kernel/fused_linear_cross_entropy_loss_grad_high_perf.h: ProcessUpdate writes float32
    softmax - 1 at each unmasked token's target; the vector pass then writes G = softmax * grad, cast to the
    16-bit input dtype, over the same buffer, row i at byte i * S (S: 2V bytes rounded up to 512, the tiling's
    VOut512BAlignedSize); every other byte keeps the float data."""
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    d = ops.args(session, op, mode="softmax")
    rng = np.random.default_rng(3)
    w = rng.uniform(-1, 1, (v, 4)).astype(np.float16)
    sm = rng.random((5, v)).astype(np.float32)
    grad = rng.uniform(-1, 1, 5).astype(np.float32)
    d["softmaxOptional"], bsm = session.put(sm)
    d["grad"], d["weight"] = session.put(grad)[0], session.put(w)[0]
    d["weightGradOut"] = session.empty((v, 4), np.float16)[0]
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0 and abi.phase_two(op, _workspace(session, ws), ws, ex, session.stream) == 0
    updated = sm.copy()
    for i, (masked, t) in enumerate(zip([0, 1, 0, 0, 1], [1, 0, 5, 2, 0])):
        if not masked:
            updated[i, t] -= np.float32(1)
    want = updated.reshape(-1).view(np.uint8).copy()
    g = (updated * grad[:, None]).astype(np.float16)  # float32 products, one rounding to the input dtype
    stride = -(-2 * v // 512) * 512
    for i in range(5):
        want[i * stride:i * stride + 2 * v] = g[i].view(np.uint8)
    got = session.download(bsm, (5, v), np.float32).reshape(-1).view(np.uint8)
    np.testing.assert_array_equal(got, want)


def test_flce_high_performance_mode_leaves_a_strided_softmax_alone(session, abi, ops):
    """op_api makes a non-contiguous softmaxOptional contiguous (l0op::Contiguous) before the kernel: the kernel
    writes that copy, and the caller's tensor keeps its values."""
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    d = ops.args(session, op, mode="softmax")
    rng = np.random.default_rng(4)
    storage = rng.random(5 * 128 * 2).astype(np.float32)
    buf = session.upload(storage)
    d["softmaxOptional"] = session.tensor(buf, (5, 128), np.float32, strides=(256, 2), storage_shape=(storage.size,))
    st, ws, ex = _phase_one(abi, op, d)
    assert st == 0 and abi.phase_two(op, _workspace(session, ws), ws, ex, session.stream) == 0
    np.testing.assert_array_equal(session.download(buf, storage.shape, np.float32), storage)


# ---- the runtime subset ------------------------------------------------------------------------------


def test_malloc(session, abi):
    p = abi.ffi.new("void **")
    assert abi.lib.aclrtMalloc(p, 0, 0) == INVALID_PARAM
    assert abi.lib.aclrtMalloc(abi.NULL, 8, 0) == INVALID_PARAM
    assert abi.lib.aclrtMalloc(p, 8, 77) == 0 and abi.lib.aclrtFree(p[0]) == 0  # any policy (test_vendor_fidelity)
    for size in (1, 3, 33, 1000):
        buf = session.malloc(size)
        assert int(abi.ffi.cast("uintptr_t", buf.ptr)) % 32 == 0
    # fresh device memory is garbage, visibly: NaN in every float type
    buf = session.malloc(16)
    assert np.isnan(session.download(buf, (4,), np.float32)).all()


def test_memcpy_checks_sizes_and_kinds(session, abi):
    lib, ffi = abi.lib, abi.ffi
    dev = session.malloc(16)
    host = np.arange(8, dtype=np.float32)
    hp = ffi.cast("void *", host.ctypes.data)
    assert lib.aclrtMemcpy(dev.ptr, 16, hp, 32, C.ACL_MEMCPY_HOST_TO_DEVICE) == INVALID_PARAM  # count > destMax
    assert lib.aclrtMemcpy(dev.ptr, 32, hp, 32, C.ACL_MEMCPY_HOST_TO_DEVICE) == INVALID_PARAM  # past the block
    assert lib.aclrtMemcpy(hp, 32, dev.ptr, 16, C.ACL_MEMCPY_HOST_TO_DEVICE) == INVALID_PARAM  # wrong direction
    assert lib.aclrtMemcpy(dev.ptr, 16, hp, 16, C.ACL_MEMCPY_DEVICE_TO_DEVICE) == INVALID_PARAM  # src is host
    assert lib.aclrtMemcpy(dev.ptr, 16, hp, 16, 7) == INVALID_PARAM
    assert lib.aclrtMemcpy(abi.NULL, 16, hp, 16, C.ACL_MEMCPY_HOST_TO_DEVICE) == INVALID_PARAM
    assert lib.aclrtMemcpy(dev.ptr, 16, hp, 16, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    dev2 = session.malloc(16)
    assert lib.aclrtMemcpy(dev2.ptr, 16, dev.ptr, 16, C.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    np.testing.assert_array_equal(session.download(dev2, (4,), np.float32), host[:4])
    other = np.zeros(4, np.float32)
    assert lib.aclrtMemcpy(ffi.cast("void *", other.ctypes.data), 16, hp, 16, C.ACL_MEMCPY_HOST_TO_HOST) == 0
    np.testing.assert_array_equal(other, host[:4])


def test_free(session, abi):
    p = abi.ffi.new("void **")
    assert abi.lib.aclrtMalloc(p, 64, 0) == 0
    assert abi.lib.aclrtFree(abi.ffi.cast("char *", p[0]) + 32) == INVALID_PARAM  # not the start
    assert abi.lib.aclrtFree(p[0]) == 0
    assert abi.lib.aclrtFree(p[0]) == INVALID_PARAM  # twice
    assert abi.lib.aclrtFree(abi.NULL) == INVALID_PARAM


def test_runtime_state(session, abi):
    lib = abi.lib
    assert lib.aclInit(abi.NULL) == C.ACL_ERROR_REPEAT_INITIALIZE  # the adapter initialised it
    assert lib.aclrtSetDevice(1) == 107001  # ACL_ERROR_RT_INVALID_DEVICEID: the emulator has one device
    got = []

    def no_context():
        s = abi.ffi.new("aclrtStream *")
        got.append(lib.aclrtCreateStream(s))
        p = abi.ffi.new("void **")
        got.append(lib.aclrtMalloc(p, 8, 0))

    t = threading.Thread(target=no_context)
    t.start()
    t.join()
    assert got == [107002, 107002]  # ACL_ERROR_RT_CONTEXT_NULL
    assert lib.aclrtSynchronizeStream(abi.ffi.cast("void *", 0x10)) == INVALID_PARAM
    assert lib.aclrtDestroyStream(abi.ffi.cast("void *", 0x10)) == INVALID_PARAM


def test_recent_error_message_is_consumed(session, abi):
    assert abi.lib.aclrtFree(abi.NULL) == INVALID_PARAM
    assert "aclrtFree" in abi.message()
    assert abi.message() == ""


# ---- conversions ------------------------------------------------------------------------------------


def _cast(abi, src: np.ndarray, src_code, dst_dtype, dst_code):
    dst = np.empty(src.shape, dst_dtype)
    st = abi.lib.xlossEmuCast(abi.ffi.cast("void *", src.ctypes.data), src_code,
                              abi.ffi.cast("void *", dst.ctypes.data), dst_code, src.size)
    assert st == 0
    return dst


@pytest.mark.parametrize("name, dtype, code", [("float16", np.float16, C.ACL_FLOAT16),
                                               ("bfloat16", ml_dtypes.bfloat16, C.ACL_BF16)])
def test_conversions_are_exact_round_to_nearest_even(abi, name, dtype, code):
    every = np.arange(2**16, dtype=np.uint16).view(dtype)
    widened = _cast(abi, every, code, np.float32, C.ACL_FLOAT)
    expected = every.astype(np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(widened), nan)
    np.testing.assert_array_equal(widened[~nan].view(np.uint32), expected[~nan].view(np.uint32))
    # narrowing: every value, every midpoint between neighbours (the ties), their float32
    # neighbours, overflow and underflow boundaries, and random bit patterns
    finite = expected[~nan & np.isfinite(expected)].astype(np.float64)
    finite = np.unique(finite)
    mids = (finite[:-1] + finite[1:]) / 2
    probes = np.concatenate([finite, mids]).astype(np.float32)
    rng = np.random.default_rng(0)
    probes = np.concatenate([probes, np.nextafter(probes, np.float32(np.inf)),
                             np.nextafter(probes, np.float32(-np.inf)),
                             rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                             np.array([np.inf, -np.inf, 65504, 65519.99, 65520, 3.4e38, 1e-45, -0.0], np.float32)])
    narrowed = _cast(abi, probes, C.ACL_FLOAT, dtype, code)
    with np.errstate(over="ignore", invalid="ignore"):
        want = probes.astype(dtype)
    nan = np.isnan(probes)
    np.testing.assert_array_equal(np.isnan(narrowed.astype(np.float32)), nan)
    np.testing.assert_array_equal(narrowed[~nan].view(np.uint16), want[~nan].view(np.uint16))
    # the public aclFloat16 helpers agree
    if name == "float16":
        assert abi.lib.aclFloatToFloat16(65520.0) == 0x7C00
        assert abi.lib.aclFloat16ToFloat(0x3C00) == 1.0
    assert abi.lib.aclDataTypeSize(code) == 2 and abi.lib.aclDataTypeSize(C.ACL_INT64) == 8


# ---- the Python tables against the headers --------------------------------------------------------------
SOURCE = Path(__file__).resolve().parents[3] / "backends" / "ascend_aclnn"


def _c_int(expr: str) -> int:
    expr = expr.strip()
    if not re.fullmatch(r"[-+()\s\dxXa-fA-F<]+", expr):
        raise ValueError(expr)
    return int(eval(expr.replace("u", ""), {"__builtins__": {}}))  # digits, parentheses and << only


def _header_constants(paths) -> dict:
    """NAME -> value of every ``#define NAME <integer>``, ``static const int NAME = <integer>;`` and
    enumerator (implicit values counted) in the files."""
    out = {}
    for path in paths:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.DOTALL)
        for name, value in re.findall(r"^[ \t]*#define[ \t]+(\w+)[ \t]+(.+?)[ \t]*$", text, re.MULTILINE):
            try:
                out[name] = _c_int(value)
            except ValueError:
                pass
        for name, value in re.findall(r"static\s+const\s+int\s+(\w+)\s*=\s*([^;]+);", text):
            out[name] = _c_int(value)
        for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", text, re.DOTALL):
            nxt = 0
            for item in filter(None, (i.strip() for i in body.split(","))):
                name, _, value = item.partition("=")
                nxt = _c_int(value) if value.strip() else nxt
                out[name.strip()] = nxt
                nxt += 1
    return out


def test_python_tables_match_the_headers():
    """Every integer constant of _cdef, every status name, and the reduction codes have the
    headers' values; every status code the headers define is named; every aclnn operator a header
    of include/aclnnop declares is declared to cffi. A drift between include/ and _cdef fails here."""
    from xloss.kernels import REDUCTION_CODES

    headers = sorted((SOURCE / "include").rglob("*.h"))
    h = _header_constants(headers)
    assert h["ACL_FLOAT"] == 0 and h["ACL_MEMCPY_DEVICE_TO_HOST"] == 2 and h["XLOSS_EMU_MAX_PLAN"] == 1 << 20
    for name in dir(C):
        value = getattr(C, name)
        if not name.isupper() or not isinstance(value, int):
            continue
        header_name = next((n for n in (name, "XLOSS_" + name, "XLOSS_EMU_" + name) if n in h), None)
        assert header_name is not None, f"_cdef.{name} is in no header"
        assert value == h[header_name], (name, value, h[header_name])
    named = {k: v for k, v in h.items() if re.match(r"ACLNN_ERR_|ACL_ERROR_(?!NONE)", k)}
    assert {v: k for k, v in named.items()} == {c: n for c, n in C.STATUS_NAMES.items() if c}
    assert h[C.STATUS_NAMES[0]] == 0
    assert set(C.ACL_DTYPES.values()) <= {v for k, v in h.items() if k.startswith("ACL_") and k in dir(C)}
    ops = _header_constants([SOURCE / "csrc" / "ops_common.h"])
    assert dict(REDUCTION_CODES) == {r: ops[f"EMU_REDUCTION_{r.upper()}"] for r in REDUCTION_CODES}
    declared = set(re.findall(r"\b(aclnn\w+)\(", C.CDEF))
    for header in sorted((SOURCE / "include" / "aclnnop").glob("*.h")):
        for fn in re.findall(r"\b(aclnn\w+)\s*\(", header.read_text()):
            assert fn in declared, f"{header.name} declares {fn}, which _cdef does not"
