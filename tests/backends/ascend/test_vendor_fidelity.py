"""Issue 27: the emulator accepts what CANN's libraries accept and answers as they do. Each test
names the public source of the behaviour it holds (the backend README's provenance table)."""

from __future__ import annotations

import numpy as np
import pytest

from xloss.backends.ascend_aclnn import _cdef as C
from xloss.reference import flce

NULLPTR, INVALID = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID
INNER = 561000  # ACLNN_ERR_INNER
ACL_ERROR_INVALID_PARAM = 100000
MS, CE = "aclnnFusedLinearOnlineMaxSum", "aclnnFusedCrossEntropyLossWithMaxSum"
ACL_FORMAT_NC, ACL_FORMAT_NCL = 35, 47  # runtime include/external/acl/acl_base_rt.h


def _strides(abi, t):
    ffi = abi.ffi
    arr, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
    assert abi.lib.aclGetViewStrides(t, arr, n) == 0
    out = [arr[0][i] for i in range(n[0])]
    import ctypes

    ctypes.CDLL(None).free(ctypes.c_void_p(int(ffi.cast("uintptr_t", arr[0]))))
    return out


# ---- aclCreateTensor: opbase src/nnopbase/common/api/acl_op_api.cpp and the aclTensor constructor --------


def test_null_strides_with_a_zero_dim_are_the_plain_product(session, abi):
    """opbase shape_utils.cpp ToContiguousStrides: strides[i] = dim[i+1] * strides[i+1], zeros included."""
    ffi, lib = abi.ffi, abi.lib
    buf = session.malloc(64)
    t = lib.aclCreateTensor(ffi.new("int64_t[]", [2, 0, 3]), 3, C.ACL_FLOAT, ffi.NULL, 0, C.ACL_FORMAT_ND,
                            ffi.new("int64_t[]", [0]), 1, buf.ptr)
    assert t != ffi.NULL
    assert _strides(abi, t) == [0, 3, 1]
    assert lib.aclDestroyTensor(t) == 0


@pytest.mark.parametrize("label, kw", [
    ("negative stride", dict(shape=[2, 2], strides=[-2, 1], offset=2, storage=[8])),
    ("negative offset", dict(shape=[2], strides=[1], offset=-1, storage=[8])),
])
def test_negative_strides_and_offsets_are_created_and_refused_by_operators(session, abi, ops, label, kw):
    """opbase acl_op_api.cpp aclCreateTensor refuses only NULL dims arrays: the tensor is made and reads
    back as given; phase one of an operator refuses the view (the emulator's choice: 161002)."""
    buf = session.malloc(64)
    t = abi.create(buf, kw["shape"], C.ACL_FLOAT, strides=kw["strides"], offset=kw["offset"], storage=kw["storage"])
    assert t != abi.NULL, abi.message()
    assert _strides(abi, t) == kw["strides"]
    off = abi.ffi.new("int64_t *")
    assert abi.lib.aclGetViewOffset(t, off) == 0 and off[0] == kw["offset"]
    d = ops.args(session, "aclnnBinaryCrossEntropyBackward")
    d["self"] = t
    st, _, ex = abi.phase_one("aclnnBinaryCrossEntropyBackward", *d.values())
    assert st == INVALID and ex == abi.NULL
    assert abi.lib.aclDestroyTensor(t) == 0


@pytest.mark.parametrize("fmt", [ACL_FORMAT_NC, ACL_FORMAT_NCL])
def test_nc_and_ncl_formats_are_plain_layouts(session, abi, emu, fmt):
    """runtime acl_base_rt.h: ACL_FORMAT_NC = 35, ACL_FORMAT_NCL = 47; aclCreateTensor takes them and the
    operators read them as ND (their element order is the view's)."""
    x = np.array([[0.25, 0.5, 0.75], [0.1, 0.9, 0.5]], np.float32)
    y = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]], np.float32)
    results = []
    for f in (C.ACL_FORMAT_ND, fmt):
        tx, ty = (session.tensor(session.upload(a), a.shape, a.dtype, fmt=f) for a in (x, y))
        out, obuf = session.empty(x.shape, np.float32)
        session.run("aclnnBinaryCrossEntropyBackward", session.put(np.asarray(1.0, np.float32))[0], tx, ty,
                    abi.NULL, 0, out)
        results.append(session.download(obuf, x.shape, np.float32))
    np.testing.assert_array_equal(results[0], results[1])


# ---- runtime: src/acl/aclrt_impl/memory.cpp (aclMallocMemInner, MemcpyKindTranslate) ---------------------


@pytest.mark.parametrize("policy", [6, 7, 0x100000, 0x1006, 0x7FFFFFFF])
def test_malloc_takes_any_policy(session, abi, policy):
    """aclMallocMemInner maps every policy it does not name to the default flags: no value is refused."""
    p = abi.ffi.new("void **")
    assert abi.lib.aclrtMalloc(p, 64, policy) == 0
    assert abi.lib.aclrtFree(p[0]) == 0


def test_memcpy_kinds(session, abi):
    """MemcpyKindTranslate takes HOST_TO_HOST ... DEVICE_TO_DEVICE, DEFAULT (4, the direction from the
    addresses) and HOST_TO_BUF_TO_DEVICE (5, a host-to-device copy); 6, 7 and unknown kinds: 100000."""
    ffi, lib = abi.ffi, abi.lib
    buf = session.malloc(16)
    for kind, ok in ((4, True), (5, True), (6, False), (7, False), (8, False)):
        host = ffi.new("float[]", [1.0 + kind, 2.0, 3.0, 4.0])
        back = ffi.new("float[]", 4)
        st = lib.aclrtMemcpy(buf.ptr, 16, host, 16, kind)
        assert (st == 0) == ok, (kind, abi.message())
        if ok:
            assert lib.aclrtMemcpy(back, 16, buf.ptr, 16, 4 if kind == 4 else C.ACL_MEMCPY_DEVICE_TO_HOST) == 0
            assert list(back) == [1.0 + kind, 2.0, 3.0, 4.0]
        else:
            assert st == ACL_ERROR_INVALID_PARAM


def test_copy_to_host_may_read_past_the_block(session, abi):
    """rtMemcpy checks count <= destMax, not the device range (ops-nn's FLCE sample copies float results out
    of 16-bit buffers): the bytes past the block read as never-written device memory (0xFF); a copy to the
    device past its block is still refused."""
    ffi, lib = abi.ffi, abi.lib
    buf = session.malloc(8)
    assert lib.aclrtMemcpy(buf.ptr, 8, ffi.new("uint8_t[]", list(range(8))), 8, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    back = ffi.new("uint8_t[]", 24)
    assert lib.aclrtMemcpy(back, 24, buf.ptr, 24, C.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert list(back) == list(range(8)) + [0xFF] * 16
    assert lib.aclrtMemcpy(buf.ptr, 24, back, 24, C.ACL_MEMCPY_HOST_TO_DEVICE) == ACL_ERROR_INVALID_PARAM


# ---- aclnnFusedCrossEntropyLossWithMaxSum: ops-nn loss/fused_cross_entropy_loss_with_max_sum/op_api -------


def _ce(s, bt=3, v=4, logits=True):
    rng = np.random.default_rng(3)
    vpl = rng.normal(size=(bt, v)).astype(np.float32)
    m = vpl.max(axis=1)
    se = np.exp(vpl - m[:, None]).sum(axis=1)
    d = {"logitsMax": s.put(m.astype(np.float32))[0], "sumExpLogits": s.put(se.astype(np.float32))[0],
         "predictedLogits": s.put((vpl[:, 0] - m).astype(np.float32))[0], "labelSmoothing": 0.0,
         "inputOptional": s.ffi.NULL, "weightOptional": s.ffi.NULL,
         "vocabParallelLogitsOptional": s.put(vpl)[0] if logits else s.ffi.NULL}
    d["lossOut"], loss = s.empty((bt,), np.float32)
    d["softMaxOutOptional"], sm = s.empty((bt, v), np.float32)
    return d, loss, sm, (m, se, vpl)


def test_ce_ignores_input_and_weight_optional(session, abi):
    """op_api CheckParams: inputOptional/weightOptional are [[maybe_unused]]: any tensor (even a stale
    pointer's worth of nonsense shape/dtype) gives the same result as NULL."""
    d, loss, sm, _ = _ce(session)
    session.run(CE, *d.values())
    want = session.download(loss, (3,), np.float32), session.download(sm, (3, 4), np.float32)
    d, loss, sm, _ = _ce(session)
    d["inputOptional"] = session.put(np.arange(7, dtype=np.int32))[0]
    d["weightOptional"] = session.put(np.ones((2, 2, 2), np.float64))[0]
    session.run(CE, *d.values())
    np.testing.assert_array_equal(session.download(loss, (3,), np.float32), want[0])
    np.testing.assert_array_equal(session.download(sm, (3, 4), np.float32), want[1])


def test_ce_logits_without_softmax_is_161001(session, abi):
    """op_api CheckNotNull: vocabParallelLogitsOptional given, softMaxOutOptional NULL -> ACLNN_ERR_PARAM_NULLPTR."""
    d, *_ = _ce(session)
    d["softMaxOutOptional"] = abi.NULL
    st, ws, ex = abi.phase_one(CE, *d.values())
    assert st == NULLPTR and ex == abi.NULL and ws == 0
    assert "softMaxOutOptional" in abi.message()


def test_ce_softmax_without_logits_is_accepted_and_untouched(session, abi):
    """op_api: softMaxOutOptional is checked and written only with the logits; without them the loss alone."""
    d, loss, sm, (m, se, vpl) = _ce(session, logits=False)
    before = session.download(sm, (3, 4), np.float32).view(np.uint32)
    session.run(CE, *d.values())
    np.testing.assert_allclose(session.download(loss, (3,), np.float32), np.log(se) - (vpl[:, 0] - m), rtol=1e-6)
    np.testing.assert_array_equal(session.download(sm, (3, 4), np.float32).view(np.uint32), before)


# ---- aclnnFusedLinearOnlineMaxSum: ops-nn matmul/fused_linear_online_max_sum op_api and op_kernel ---------


def _ms(s, x, w, t, start, end):
    bt, v = x.shape[0], w.shape[0]
    d = {"input": s.put(x)[0], "weight": s.put(w)[0], "target": s.put(np.asarray(t, np.int64))[0],
         "vocabStartIndex": start, "vocabEndIndex": end}
    bufs = {}
    for name, shape, dt in (("logitsMaxLocalOut", (bt,), np.float32), ("sumExpLogitsLocalOut", (bt,), np.float32),
                            ("predictedLogitsLocalOut", (bt,), np.float32),
                            ("targetMaskOut", ((bt + 7) // 8,), np.uint8), ("maskedTargetOut", (bt,), np.int64),
                            ("vocabParallelLogitsOutOptional", (bt, v), x.dtype)):
        d[name], buf = s.empty(shape, dt)
        bufs[name] = (buf, shape, dt)
    s.run(MS, *d.values())
    return {k: s.download(*b) for k, b in bufs.items()}


def test_ms_shard_range_wider_than_the_weight_is_accepted(session):
    """op_api CheckAttrValid checks only start >= 0 and end >= start. A target in [start + V, end) is in the
    shard (mask 0, maskedTarget = target - start) but no tile of the kernel gathers it
    (OnlineGetPredictedLogits selects 0 outside [0, curSingleN)): its predicted logit is 0 - max."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 3)).astype(np.float16)
    w = rng.normal(size=(3, 3)).astype(np.float16)
    t = np.array([2, 5, 6, 7])  # shard [2, 7) over a V=3 weight: 5 and 6 lie past its rows
    got = _ms(session, x, w, t, 2, 7)
    assert flce.unpack_mask(got["targetMaskOut"], 4).tolist() == [False, False, False, True]
    assert got["maskedTargetOut"].tolist() == [0, 3, 4, 0]
    m = got["logitsMaxLocalOut"]
    logits = got["vocabParallelLogitsOutOptional"].astype(np.float32)
    assert got["predictedLogitsLocalOut"][0] == pytest.approx(logits[0, 0] - m[0], abs=2e-3)  # (logits: 16-bit)
    np.testing.assert_array_equal(got["predictedLogitsLocalOut"][1:3], -m[1:3])
    assert got["predictedLogitsLocalOut"][3] == 0


@pytest.mark.parametrize("bt", [1, 5, 13])  # (a multiple of 8 has no padding bits)
def test_ms_padding_bits_are_the_mask_of_target_zero(session, bt):
    """op_kernel TargetInnerProcess pads the target tile with targetT(0) before CompareScalar, and the ST golden
    (executor_aclnnFusedLinearOnlineMaxSum.py) pads the targets with 0 before packing: the padding bits are
    mask(0) = (0 < start or 0 >= end)."""
    rng = np.random.default_rng(bt)
    x = rng.normal(size=(bt, 2)).astype(np.float16)
    w = rng.normal(size=(4, 2)).astype(np.float16)
    t = rng.integers(0, 9, bt)
    for start, end, pad in ((0, 4, 0), (4, 8, 1), (0, 0, 1), (1, 5, 1)):
        bits = np.unpackbits(_ms(session, x, w, t, start, end)["targetMaskOut"], bitorder="little")
        assert bits[:bt].tolist() == ((t < start) | (t >= end)).tolist()
        assert len(bits) - bt == -bt % 8
        assert (bits[bt:] == pad).all(), (start, end)


# ---- executors: opbase src/nnopbase/common/api/acl_op_api.cpp ---------------------------------------------


def test_unknown_executor_is_inner_error_for_repeatable_and_destroy(session, abi, ops):
    """aclSetAclOpExecutorRepeatable / aclDestroyAclOpExecutor: NULL -> ACLNN_ERR_INNER_NULLPTR (561103); a
    pointer without an executor's magic number -> ACLNN_ERR_INNER (561000): spent, destroyed or never one."""
    op = "aclnnNLLLossBackward"
    st, ws, ex = abi.phase_one(op, *ops.args(session, op).values())
    assert st == 0 and abi.phase_two(op, abi.NULL, 0, ex, session.stream) == 0  # single use: released by its run
    buf = session.malloc(64)
    for bogus in (ex, abi.ffi.cast("aclOpExecutor *", buf.ptr)):
        assert abi.lib.aclSetAclOpExecutorRepeatable(bogus) == INNER
        assert abi.lib.aclDestroyAclOpExecutor(bogus) == INNER
    assert abi.lib.aclSetAclOpExecutorRepeatable(abi.NULL) == 561103
    assert abi.lib.aclDestroyAclOpExecutor(abi.NULL) == 561103


# ---- aclnnNLLLossBackward: ops-nn loss/nll_loss_grad/op_api/aclnn_nll_loss_backward.cpp -------------------


def _nll(s, x, t, *, out_dtype=None, total_shape=(1,), reduction=1, grad=None):
    dt = x.dtype
    c = x.shape[-1]
    w = np.linspace(0.5, 2.0, c).astype(dt)
    g = np.asarray(grad if grad is not None else [1.5], dt)
    d = {"gradOutput": s.put(g)[0], "self": s.put(x)[0], "target": s.put(np.asarray(t, np.int64))[0],
         "weight": s.put(w)[0], "reduction": reduction, "ignoreIndex": -100,
         "totalWeight": s.put(np.full(total_shape, 2.5, dt))[0]}
    d["out"], buf = s.empty(x.shape, out_dtype or dt)
    s.run("aclnnNLLLossBackward", *d.values())
    return s.download(buf, x.shape, out_dtype or dt), w


def test_nll_out_in_another_float_type(session):
    """CheckDtypeValid: weight, gradOutput, totalWeight in self's dtype; out any type self casts to (the result,
    computed in float32, rounded once to out's dtype)."""
    x = -np.random.default_rng(1).random((3, 4)).astype(np.float32)
    got32, w = _nll(session, x, [1, 3, 0])
    got16, _ = _nll(session, x, [1, 3, 0], out_dtype=np.float16)
    assert got16.dtype == np.float16
    np.testing.assert_array_equal(got16, got32.astype(np.float16))
    assert got32[0, 1] == np.float32(w[1] * -(np.float32(1.5) / np.float32(2.5)))


@pytest.mark.parametrize("shape", [(1, 1), (1, 1, 1)])
def test_nll_total_weight_is_any_one_element_shape(session, shape):
    """CheckShape: totalWeight's GetShapeSize() == 1, whatever its rank."""
    x = -np.random.default_rng(2).random((2, 3)).astype(np.float32)
    got, _ = _nll(session, x, [2, 0], total_shape=shape)
    want, _ = _nll(session, x, [2, 0])
    np.testing.assert_array_equal(got, want)


def test_nll_one_dim_self_with_a_one_dim_target_of_length_c(session):
    """CheckShape compares self.dim(0) with target.dim(0) unless (self 1-D, target 0-D): self (C) with target (C)
    passes; self is one row (unsqueezed to (1, C)), the kernel's one row reads the target's first element."""
    x = -np.random.default_rng(3).random(4).astype(np.float32)
    got, w = _nll(session, x, [2, 0, 1, 3], reduction=2)
    want = np.zeros(4, np.float32)
    want[2] = w[2] * -np.float32(1.5)
    np.testing.assert_array_equal(got, want)


def test_nll_empty_self_succeeds_without_work(session, abi):
    """The op returns success for an empty self before any kernel (self->IsEmpty())."""
    got, _ = _nll(session, np.zeros((3, 0), np.float32), [0, 5, -100], reduction=0, grad=[1.0, 1.0, 1.0])
    assert got.shape == (3, 0)


# ---- aclnnBinaryCrossEntropyBackward: ops-nn loss/binary_cross_entropy_grad/op_api --------------------------


@pytest.mark.parametrize("which", ["target", "weightOptional"])
def test_bce_operands_in_another_format_than_self_are_161002(session, abi, ops, which):
    """CheckFormat: target's and weightOptional's storage format must be self's."""
    d = ops.args(session, "aclnnBinaryCrossEntropyBackward")
    shape = (3, 5) if which == "target" else (1, 5)
    buf = session.upload(np.full(shape, 0.5, np.float32))
    d[which] = session.tensor(buf, shape, np.float32, fmt=C.ACL_FORMAT_NCHW)
    st, _, ex = abi.phase_one("aclnnBinaryCrossEntropyBackward", *d.values())
    assert st == INVALID and ex == abi.NULL and "format" in abi.message()


def test_bce_empty_self_passes_whatever_the_other_shapes(session, abi):
    """CheckShape returns true for an empty self before comparing out's shape or broadcasting: success, and
    out (not written) keeps its bytes."""
    d = {"gradOutput": session.put(np.ones(5, np.float32))[0], "self": session.put(np.zeros((0, 5), np.float32))[0],
         "target": session.put(np.zeros(7, np.float32))[0], "weightOptional": abi.NULL, "reduction": 1}
    d["out"], buf = session.empty((5,), np.float32)
    session.upload(np.full(5, 3.25, np.float32), buf)
    session.run("aclnnBinaryCrossEntropyBackward", *d.values())
    np.testing.assert_array_equal(session.download(buf, (5,), np.float32), 3.25)


# ---- aclnnFusedLinearCrossEntropyLossGrad: ops-nn op_host/op_api CheckFormatValid ---------------------------


@pytest.mark.parametrize("name", ["grad", "input", "weight", "targetMask", "maskedTarget", "logitsMaxOptional",
                                  "inputGradOut", "weightGradOut"])
def test_flce_takes_nd_only(session, abi, ops, name):
    """OP_CHECK_FORMAT_NOT_ND on every operand given: NCHW (a plain layout elsewhere) is 161002 here."""
    op = "aclnnFusedLinearCrossEntropyLossGrad"
    d = ops.args(session, op)
    ffi = abi.ffi
    dims, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
    assert abi.lib.aclGetViewShape(d[name], dims, n) == 0
    shape = [dims[0][i] for i in range(n[0])]
    dt = ffi.new("aclDataType *")
    assert abi.lib.aclGetDataType(d[name], dt) == 0
    addr = ffi.new("void **")
    assert abi.lib.aclGetRawTensorAddr(d[name], addr) == 0
    import ctypes

    ctypes.CDLL(None).free(ctypes.c_void_p(int(ffi.cast("uintptr_t", dims[0]))))
    d[name] = abi.create(None, shape, int(dt[0]), fmt=C.ACL_FORMAT_NCHW, data=addr[0])
    st, _, ex = abi.phase_one(op, *d.values())
    assert st == INVALID and ex == abi.NULL and "only ND" in abi.message(), abi.message()
    assert abi.lib.aclDestroyTensor(d[name]) == 0


# ---- issue #30: aclnnNLLLoss, aclnnNLLLoss2d (ops-nn loss/nll_loss/op_api), aclnnBinaryCrossEntropy ------------

#: the vendor's prototypes (ops-nn docs aclnnNLLLoss.md, aclnnNLLLoss2d.md, aclnnBinaryCrossEntropy.md): argument
#: types and names in order, before workspaceSize and executor
VENDOR_FORWARD_PROTOTYPES = {
    "aclnnNLLLossGetWorkspaceSize": "const aclTensor *self, const aclTensor *target, const aclTensor *weight, "
                                    "int64_t reduction, int64_t ignoreIndex, aclTensor *out, "
                                    "aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor",
    "aclnnNLLLoss2dGetWorkspaceSize": "const aclTensor *self, const aclTensor *target, const aclTensor *weight, "
                                      "int64_t reduction, int64_t ignoreIndex, aclTensor *out, "
                                      "aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor",
    "aclnnBinaryCrossEntropyGetWorkspaceSize": "const aclTensor *self, const aclTensor *target, "
                                               "const aclTensor *weight, int64_t reduction, aclTensor *out, "
                                               "uint64_t *workspaceSize, aclOpExecutor **executor",
    **{op: "void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream"
       for op in ("aclnnNLLLoss", "aclnnNLLLoss2d", "aclnnBinaryCrossEntropy")},
}


def test_forward_prototypes_are_the_vendors():
    """The headers' prototypes, whitespace aside, are the ones ops-nn documents."""
    import re
    from pathlib import Path

    text = " ".join(p.read_text() for p in (Path(C.INCLUDE) / "aclnnop").glob("*.h"))
    text = re.sub(r"\s+", " ", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
    for name, params in VENDOR_FORWARD_PROTOTYPES.items():
        m = re.search(rf"aclnnStatus {name}\((.*?)\);", text)
        assert m, name
        assert re.sub(r"\s*\*\s*", " *", m.group(1)).strip() == re.sub(r"\s*\*\s*", " *", params), name


def _nll_fwd(s, op, x, t, *, reduction, weight=True, out_shape=None):
    dt = x.dtype
    classes = x.shape[1] if x.ndim >= 2 else x.shape[0]
    w = np.linspace(0.5, 2.0, classes).astype(dt)
    out_shape = out_shape or (np.shape(t) if reduction == 0 and x.ndim >= 2 else (1,))
    to, bo = s.empty(out_shape, dt)
    ttw, btw = s.empty((1,), dt)
    args = (s.put(x)[0], s.put(np.asarray(t, np.int64))[0], s.put(w)[0] if weight else s.ffi.NULL, reduction, -100,
            to, ttw)
    return args, (bo, out_shape), (btw, (1,)), w


def test_nll_forward_weight_is_required(session, abi):
    """CheckNotNull: weight NULL is 161001 (the op has no optional weight: callers pass ones)."""
    args, *_ = _nll_fwd(session, "aclnnNLLLoss", -np.ones((2, 3), np.float32), [0, 1], reduction=1, weight=False)
    st, _, ex = abi.phase_one("aclnnNLLLoss", *args)
    assert st == NULLPTR and ex == abi.NULL


def test_nll_forward_total_weight_for_reductions_only(session):
    """totalWeightOut is copied out for reductions 1 and 2 only: for 0 it keeps what it held."""
    x = -np.random.default_rng(4).random((4, 3)).astype(np.float32)
    t = [0, 2, -100, 1]
    results = {}
    for reduction in (0, 1, 2):
        args, (bo, oshape), (btw, _), w = _nll_fwd(session, "aclnnNLLLoss", x, t, reduction=reduction)
        session.upload(np.full(1, 7.0, np.float32), btw)
        session.run("aclnnNLLLoss", *args)
        results[reduction] = (session.download(bo, oshape, np.float32), session.download(btw, (1,), np.float32))
    want_w = np.float32(w[0] + w[2] + w[1])
    assert results[0][1][0] == 7.0  # untouched
    assert results[1][1][0] == results[2][1][0] == want_w
    per_row = -np.array([w[0] * x[0, 0], w[2] * x[1, 2], 0.0, w[1] * x[3, 1]], np.float32)
    np.testing.assert_array_equal(results[0][0], per_row)
    np.testing.assert_allclose(results[2][0][0], per_row.sum(), rtol=1e-6)
    np.testing.assert_allclose(results[1][0][0], per_row.sum() / want_w, rtol=1e-6)


def test_nll_forward_empty_self_fills_nan_or_zero(session):
    """NLLLossEmptyTensorCompute: mean NaN, sum 0, totalWeight 0; no kernel."""
    for reduction, want in ((1, np.nan), (2, 0.0)):
        args, (bo, oshape), (btw, _), _ = _nll_fwd(session, "aclnnNLLLoss", np.zeros((0, 3), np.float32),
                                                   np.zeros(0, np.int64), reduction=reduction)
        session.run("aclnnNLLLoss", *args)
        np.testing.assert_array_equal(session.download(bo, oshape, np.float32), [want])
        assert session.download(btw, (1,), np.float32)[0] == 0.0


@pytest.mark.parametrize("op, shape, tshape", [("aclnnNLLLoss", (2, 3, 4), (2, 4)),
                                               ("aclnnNLLLoss2d", (2, 3, 4), (2, 4)),
                                               ("aclnnNLLLoss2d", (2, 3, 4, 1), (2, 4))])
def test_nll_forward_shape_rules_are_161002(session, abi, op, shape, tshape):
    """CheckShape: NLLLoss takes 1-D or 2-D self; NLLLoss2d 4-D self with a 3-D target (N, H, W)."""
    args, *_ = _nll_fwd(session, op, -np.ones(shape, np.float32), np.zeros(tshape, np.int64), reduction=1)
    st, _, ex = abi.phase_one(op, *args)
    assert st == INVALID and ex == abi.NULL


def test_bce_forward_weight_must_have_selfs_shape(session, abi):
    """The vendor page: target and weight of self's shape (no broadcast; the adapter materialises one)."""
    x = np.full((2, 3), 0.5, np.float32)
    to, _ = session.empty((1,), np.float32)
    st, _, ex = abi.phase_one("aclnnBinaryCrossEntropy", session.put(x)[0], session.put(x)[0],
                              session.put(np.ones(3, np.float32))[0], 1, to)
    assert st == INVALID and ex == abi.NULL
