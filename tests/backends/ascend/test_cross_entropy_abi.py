"""The emulator's aclnnCrossEntropyLoss / aclnnCrossEntropyLossGrad against CANN's published ABI (ops-nn
loss/cross_entropy_loss and loss/cross_entropy_loss_grad: the op_api headers and the docs' parameter and
return-code tables), and their results against the float64 reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from xloss.backends.ascend_aclnn import _cdef as C
from xloss.reference import cross_entropy_loss as ref

FWD, GRAD = "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGrad"
NULLPTR, INVALID, TILING = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID, 561002
INCLUDE = Path(__file__).resolve().parents[3] / "backends" / "ascend_aclnn" / "include" / "aclnnop"

#: CANN's prototypes as its headers and docs publish them (parameter types and names, in order)
VENDOR_PROTOTYPES = {
    ("aclnn_cross_entropy_loss.h", FWD + "GetWorkspaceSize"): (
        "const aclTensor *input, const aclTensor *target, const aclTensor *weightOptional, char *reductionOptional, "
        "int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss, "
        "const aclTensor *lossOut, const aclTensor *logProbOut, const aclTensor *zlossOut, "
        "const aclTensor *lseForZlossOut, uint64_t *workspaceSize, aclOpExecutor **executor"),
    ("aclnn_cross_entropy_loss.h", FWD): (
        "void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream"),
    ("aclnn_cross_entropy_loss_grad.h", GRAD + "GetWorkspaceSize"): (
        "const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, "
        "const aclTensor *weightOptional, const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, "
        "char *reductionOptional, int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, "
        "const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor"),
    ("aclnn_cross_entropy_loss_grad.h", GRAD): (
        "void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream"),
    # dense labels: ops-nn activation/softmax_cross_entropy_with_logits (docs and op_api; labels is not const)
    ("aclnn_softmax_cross_entropy_with_logits.h", "aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize"): (
        "const aclTensor *features, aclTensor *labels, aclTensor *loss, aclTensor *backprop, "
        "uint64_t *workspaceSize, aclOpExecutor **executor"),
    ("aclnn_softmax_cross_entropy_with_logits.h", "aclnnSoftmaxCrossEntropyWithLogits"): (
        "void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, const aclrtStream stream"),
}


def _params(text: str) -> str:
    return ", ".join(" ".join(p.replace("*", " * ").split()).replace("* ", "*").replace(" *", " *")
                     for p in text.split(","))


@pytest.mark.parametrize("header, fn", sorted(VENDOR_PROTOTYPES))
def test_the_header_declares_the_vendor_prototype(header, fn):
    text = re.sub(r"/\*.*?\*/", " ", (INCLUDE / header).read_text(), flags=re.S)
    m = re.search(rf"\baclnnStatus\s+{fn}\s*\(([^;]*)\)\s*;", text)
    assert m, f"{fn} is not declared in {header}"
    assert _params(m.group(1)) == _params(VENDOR_PROTOTYPES[header, fn])
    assert f"{fn}(" in C.CDEF


def _fwd_args(s, x, t, *, weight=None, reduction=b"mean", ls=0.0, loss_shape=None, dtype=None):
    n, c = x.shape
    dt = dtype or x.dtype
    ls_shape = loss_shape or ((n,) if reduction == b"none" else (1,))
    d = {"input": s.put(x)[0], "target": s.put(t)[0],
         "weightOptional": s.ffi.NULL if weight is None else s.put(weight)[0], "reductionOptional": reduction,
         "ignoreIndex": -100, "labelSmoothing": ls, "lseSquareScaleForZloss": 0.0, "returnZloss": False}
    bufs = {}
    shapes = {"lossOut": ls_shape, "logProbOut": (n, c), "zlossOut": ls_shape, "lseForZlossOut": (n,)}
    for name, shape in shapes.items():
        d[name], bufs[name] = s.empty(shape, dt)
    return d, bufs


def test_forward_matches_the_reference_and_leaves_the_zloss_outputs_alone(session):
    """lossOut and logProbOut as PyTorch's cross_entropy (the docs' golden); the z-loss outputs are not
    written (the docs: lseSquareScaleForZloss and returnZloss take no effect yet)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, (6, 9)).astype(np.float32)
    t = np.array([0, 8, -100, 3, 3, 1])
    w = rng.uniform(0.5, 2, 9).astype(np.float32)
    d, bufs = _fwd_args(session, x, t, weight=w, ls=0.2)
    session.upload(np.full(1, 7.5, np.float32), bufs["zlossOut"])
    d["lseSquareScaleForZloss"], d["returnZloss"] = 0.5, True
    session.run(FWD, *d.values())
    want = ref.cross_entropy_loss(x, t, weight=w, label_smoothing=0.2)
    np.testing.assert_allclose(session.download(bufs["lossOut"], (1,), np.float32), [want.loss], rtol=2e-6)
    np.testing.assert_allclose(session.download(bufs["logProbOut"], x.shape, np.float32), want.log_prob, atol=4e-6)
    assert session.download(bufs["zlossOut"], (1,), np.float32)[0] == 7.5


def test_grad_matches_the_reference_with_smoothing_and_weights(session):
    rng = np.random.default_rng(1)
    x = rng.normal(0, 2, (5, 7))
    t = np.array([6, 0, -100, 2, 2])
    w = rng.uniform(0.5, 2, 7).astype(np.float32)
    lp = ref.log_softmax_rows(x)[0].astype(np.float32)
    d = {"gradLoss": session.put(np.asarray(0.75, np.float32))[0], "logProb": session.put(lp)[0],
         "target": session.put(t)[0], "weightOptional": session.put(w)[0], "gradZlossOptional": session.ffi.NULL,
         "lseForZlossOptional": session.ffi.NULL, "reductionOptional": b"mean", "ignoreIndex": -100,
         "labelSmoothing": 0.3, "lseSquareScaleForZloss": 0.0}
    d["out"], buf = session.empty(lp.shape, np.float32)
    session.run(GRAD, *d.values())
    want = ref.cross_entropy_loss_grad(0.75, lp, t, weight=w, label_smoothing=0.3)
    np.testing.assert_allclose(session.download(buf, lp.shape, np.float32), want, atol=2e-7)


@pytest.mark.parametrize("label, change, code", [
    ("NULL input", {"input": None}, NULLPTR),
    ("NULL zlossOut (required though unused)", {"zlossOut": None}, NULLPTR),
    ("NULL lseForZlossOut", {"lseForZlossOut": None}, NULLPTR),
    ("DOUBLE input", {"input": ("put", np.zeros((4, 3)))}, INVALID),
    ("INT16 target", {"target": ("put", np.zeros(4, np.int16))}, INVALID),
    ("FLOAT16 weight (FLOAT only)", {"weightOptional": ("put", np.ones(3, np.float16))}, INVALID),
    ("3-D input", {"input": ("put", np.zeros((4, 3, 1), np.float32))}, TILING),
    ("C = 0", {"input": ("put", np.zeros((4, 0), np.float32))}, TILING),
    ("target of another length", {"target": ("put", np.zeros(5, np.int64))}, TILING),
    ("weight of another length", {"weightOptional": ("put", np.ones(4, np.float32))}, TILING),
    ("reduction 'batchmean'", {"reductionOptional": b"batchmean"}, TILING),
    ("labelSmoothing 1.5", {"labelSmoothing": 1.5}, TILING),
])
def test_forward_refuses_what_cann_refuses(session, abi, label, change, code):
    x = np.zeros((4, 3), np.float32)
    d, _ = _fwd_args(session, x, np.array([0, 1, 2, -100]))
    for k, v in change.items():
        d[k] = abi.NULL if v is None else session.put(v[1])[0] if isinstance(v, tuple) else v
    st, _, ex = abi.phase_one(FWD, *d.values())
    assert st == code and ex == abi.NULL, (label, st, abi.message())


def test_null_reduction_is_mean_and_bad_targets_fail_at_run_time(session, abi):
    x = np.random.default_rng(2).normal(0, 1, (3, 4)).astype(np.float32)
    d, bufs = _fwd_args(session, x, np.array([0, 3, 1]))
    d["reductionOptional"] = abi.NULL
    session.run(FWD, *d.values())
    want = ref.cross_entropy_loss(x, np.array([0, 3, 1]))
    np.testing.assert_allclose(session.download(bufs["lossOut"], (1,), np.float32), [want.loss], rtol=2e-6)
    d, _ = _fwd_args(session, x, np.array([0, 4, 1]))
    st, ws, ex = abi.phase_one(FWD, *d.values())
    assert st == 0
    w = session.malloc(ws)
    assert abi.phase_two(FWD, w.ptr, ws, ex, session.stream) == C.ACLNN_ERR_RUNTIME_ERROR
    assert "target[1] = 4" in abi.message()


def test_grad_takes_int64_targets_and_a_0d_gradient_for_mean(session, abi):
    lp = np.log(np.full((2, 3), 1 / 3, np.float32))
    base = {"gradLoss": session.put(np.asarray(1.0, np.float32))[0], "logProb": session.put(lp)[0],
            "target": session.put(np.array([0, 2]))[0], "weightOptional": abi.NULL, "gradZlossOptional": abi.NULL,
            "lseForZlossOptional": abi.NULL, "reductionOptional": b"mean", "ignoreIndex": -100,
            "labelSmoothing": 0.0, "lseSquareScaleForZloss": 0.0, "out": session.empty((2, 3), np.float32)[0]}
    st, _, ex = abi.phase_one(GRAD, *base.values())
    assert st == 0 and abi.lib.aclDestroyAclOpExecutor(ex) == 0
    bad = dict(base, target=session.put(np.array([0, 2], np.int32))[0])
    assert abi.phase_one(GRAD, *bad.values())[0] == INVALID
    bad = dict(base, gradLoss=session.put(np.ones(1, np.float32))[0])
    assert abi.phase_one(GRAD, *bad.values())[0] == INVALID
    bad = dict(base, gradLoss=session.put(np.asarray(1.0, np.float16))[0])
    assert abi.phase_one(GRAD, *bad.values())[0] == INVALID
    bad = dict(base, out=abi.NULL)
    assert abi.phase_one(GRAD, *bad.values())[0] == NULLPTR


# ---- aclnnSoftmaxCrossEntropyWithLogits: ops-nn activation/softmax_cross_entropy_with_logits (op_api, docs) --------
SCE = "aclnnSoftmaxCrossEntropyWithLogits"


def _sce_args(s, x, y, dt=np.float32, loss_shape=None, backprop_shape=None):
    bufs = {}
    d = {"features": s.put(x)[0], "labels": s.put(y)[0]}
    for name, shape in (("loss", loss_shape or x.shape[:1]), ("backprop", backprop_shape or x.shape)):
        d[name], bufs[name] = s.empty(shape, dt)
    return d, bufs


def test_dense_matches_the_reference_in_float32_arithmetic(session):
    """Per row, the arch35 kernel's steps in float32: max, exp(x - max), the sum; backprop e / s - y, loss
    sum y (log s - (x - max)); each result rounded once (float16 here)."""
    rng = np.random.default_rng(5)
    x = rng.normal(0, 4, (6, 33)).astype(np.float16)
    y = rng.dirichlet(np.ones(33), 6).astype(np.float16)
    d, bufs = _sce_args(session, x, y, np.float16)
    session.run(SCE, *d.values())
    loss, backprop = ref.softmax_cross_entropy_with_logits(x, y)
    np.testing.assert_allclose(session.download(bufs["loss"], (6,), np.float16), loss, rtol=1e-3)
    np.testing.assert_allclose(session.download(bufs["backprop"], x.shape, np.float16), backprop, atol=5e-4)


@pytest.mark.parametrize("label, change, code", [
    ("NULL features", {"features": None}, NULLPTR),
    ("NULL backprop", {"backprop": None}, NULLPTR),
    ("DOUBLE features", {"features": np.zeros((4, 3))}, INVALID),
    ("INT32 labels", {"labels": np.zeros((4, 3), np.int32)}, INVALID),
    ("FLOAT16 loss with FLOAT features", {"loss": np.zeros(4, np.float16)}, INVALID),
    ("3-D features", {"features": np.zeros((4, 3, 1), np.float32)}, INVALID),
    ("1-D labels", {"labels": np.zeros(12, np.float32)}, INVALID),
    # the page's rules (the op_api leaves them to its kernel): labels of features' dtype and shape, loss (N)
    ("FLOAT16 labels with FLOAT features", {"labels": np.zeros((4, 3), np.float16)}, INVALID),
    ("labels of another shape", {"labels": np.zeros((1, 3), np.float32)}, INVALID),
    ("loss of another length", {"loss": np.zeros(3, np.float32)}, INVALID),
])
def test_dense_refuses_what_cann_refuses(session, abi, label, change, code):
    d, _ = _sce_args(session, np.zeros((4, 3), np.float32), np.full((4, 3), 1 / 3, np.float32))
    for k, v in change.items():
        d[k] = abi.NULL if v is None else session.put(v)[0]
    st, _, ex = abi.phase_one(SCE, *d.values())
    assert st == code and ex == abi.NULL, (label, st, abi.message())


def test_dense_empty_features_succeed_and_write_nothing(session, abi):
    """The op_api returns before its kernel for an empty features (here C = 0): success, no workspace, the loss
    untouched."""
    d, bufs = _sce_args(session, np.zeros((4, 0), np.float32), np.zeros((4, 0), np.float32))
    session.upload(np.full(4, 7.5, np.float32), bufs["loss"])
    st, ws, ex = abi.phase_one(SCE, *d.values())
    assert st == 0 and ws == 0
    assert abi.phase_two(SCE, abi.NULL, 0, ex, session.stream) == 0
    np.testing.assert_array_equal(session.download(bufs["loss"], (4,), np.float32), np.full(4, 7.5))
