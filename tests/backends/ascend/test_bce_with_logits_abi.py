"""aclnnBinaryCrossEntropyWithLogits and its Backward on the emulator: the headers hold CANN's prototypes
(ops-nn loss/sigmoid_cross_entropy_with_logits_v2 and ..._grad_v2, op_api), phase one answers as those
op_api sources check, and the results are the float64 reference's (the conformance suite covers the
numbers at large; here the vendor's special cases)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xloss.backends.ascend_aclnn import _cdef as C
from xloss.reference import bce_logits

NULLPTR, INVALID = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID
FWD, BWD = "aclnnBinaryCrossEntropyWithLogits", "aclnnBinaryCrossEntropyWithLogitsBackward"

#: CANN's prototypes (ops-nn op_api/aclnn_binary_cross_entropy_with_logits[_backward].h), one line each
VENDOR_PROTOTYPES = (
    "aclnnStatus aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize(const aclTensor *self, const aclTensor *target, "
    "const aclTensor *weightOptional, const aclTensor *posWeightOptional, int64_t reduction, aclTensor *out, "
    "uint64_t *workspaceSize, aclOpExecutor **executor);",
    "aclnnStatus aclnnBinaryCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize, "
    "aclOpExecutor *executor, const aclrtStream stream);",
    "aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize(const aclTensor *gradOutput, "
    "const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, "
    "const aclTensor *posWeightOptional, int64_t reduction, aclTensor *out, uint64_t *workspaceSize, "
    "aclOpExecutor **executor);",
    "aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackward(void *workspace, uint64_t workspaceSize, "
    "aclOpExecutor *executor, const aclrtStream stream);",
)


def test_the_headers_hold_the_vendor_prototypes():
    text = "".join((C.INCLUDE / "aclnnop" / f"aclnn_binary_cross_entropy_with_logits{s}.h").read_text()
                   for s in ("", "_backward"))
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    found = {re.sub(r"\s+", " ", m).replace("( ", "(").strip()
             for m in re.findall(r"ACL_FUNC_VISIBILITY\s+([^;]*;)", text)}
    assert found == set(VENDOR_PROTOTYPES)


def _forward_args(s, *, shape=(3, 5), dtype=np.float32, reduction=0, weight=(1, 5), pos_weight=(5,), out=None):
    rng = np.random.default_rng(3)
    d = {"self": s.put(rng.normal(0, 4, shape).astype(dtype))[0],
         "target": s.put(rng.random(shape).astype(dtype))[0],
         "weightOptional": s.put(rng.random(weight).astype(dtype))[0] if weight is not None else s.ffi.NULL,
         "posWeightOptional": s.put(rng.random(pos_weight).astype(dtype) * 3)[0] if pos_weight is not None
         else s.ffi.NULL,
         "reduction": reduction}
    d["out"], buf = s.empty(out if out is not None else (shape if reduction == 0 else ()), dtype)
    return d, buf


def _backward_args(s, **kw):
    d, buf = _forward_args(s, **kw)
    return {"gradOutput": s.put(np.asarray(1.5, np.float32))[0], **d}, buf


@pytest.mark.parametrize("op, null", [(FWD, "self"), (FWD, "target"), (FWD, "out"), (BWD, "gradOutput"),
                                      (BWD, "target")])
def test_a_null_required_tensor_is_161001(session, abi, op, null):
    d, _ = (_forward_args if op == FWD else _backward_args)(session)
    d[null] = abi.NULL
    st, _, ex = abi.phase_one(op, *d.values())
    assert st == NULLPTR and ex == abi.NULL and null in abi.message()


@pytest.mark.parametrize("op", [FWD, BWD])
@pytest.mark.parametrize("label, change, needle", [
    ("out not in target's dtype", lambda s, d: d.update(out=s.empty((3, 5), np.float16)[0]), "dtype"),
    ("integer target", lambda s, d: d.update(target=s.put(np.ones((3, 5), np.int32))[0]), "dtype"),
    ("target of another shape", lambda s, d: d.update(target=s.put(np.ones((3, 4), np.float32))[0]), "shape"),
    ("weight not broadcastable", lambda s, d: d.update(weightOptional=s.put(np.ones(4, np.float32))[0]),
     "broadcast"),
    ("posWeight not broadcastable", lambda s, d: d.update(posWeightOptional=s.put(np.ones((2, 5), np.float32))[0]),
     "broadcast"),
    ("reduction 3", lambda s, d: d.update(reduction=3), "reduction"),
])
def test_phase_one_refuses_as_the_op_api_checks(session, abi, op, label, change, needle):
    d, _ = (_forward_args if op == FWD else _backward_args)(session)
    change(session, d)
    st, _, ex = abi.phase_one(op, *d.values())
    assert st == INVALID and ex == abi.NULL and needle in abi.message(), (label, abi.message())


def test_backward_refuses_target_in_another_format(session, abi):
    """CheckFormat (backward only): target's and out's storage format must be self's."""
    d, _ = _backward_args(session)
    buf = session.upload(np.full((3, 5), 0.5, np.float32))
    d["target"] = session.tensor(buf, (3, 5), np.float32, fmt=C.ACL_FORMAT_NCHW)
    st, _, ex = abi.phase_one(BWD, *d.values())
    assert st == INVALID and ex == abi.NULL and "format" in abi.message()


@pytest.mark.parametrize("reduction, want", [(1, np.nan), (2, 0.0)])
def test_forward_of_an_empty_self_fills_out(session, reduction, want):
    """HandleEmptyTensor: NaN for a mean, 0 for a sum, in every element of out; no broadcast check."""
    d, buf = _forward_args(session, shape=(0, 5), reduction=reduction, weight=(7,), out=(2,))
    session.upload(np.full(2, 3.25, np.float32), buf)
    session.run(FWD, *d.values())
    np.testing.assert_array_equal(session.download(buf, (2,), np.float32), [want, want])


def test_backward_of_an_empty_self_succeeds_without_work(session):
    d, buf = _backward_args(session, shape=(0, 5), weight=(7,), out=(4,))
    session.upload(np.full(4, 3.25, np.float32), buf)
    session.run(BWD, *d.values())
    np.testing.assert_array_equal(session.download(buf, (4,), np.float32), 3.25)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_both_operators_match_the_reference(session, reduction):
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 4, (3, 5)), rng.random((3, 5))
    w, pw = rng.random((1, 5)), rng.random(5) * 3
    x, y, w, pw = (a.astype(np.float32).astype(np.float64) for a in (x, y, w, pw))
    red = ("none", "mean", "sum")[reduction]
    d, buf = _forward_args(session, reduction=reduction)
    session.run(FWD, *d.values())
    got = session.download(buf, (3, 5) if reduction == 0 else (), np.float32)
    np.testing.assert_allclose(got, bce_logits.bce_with_logits_loss(x, y, weight=w, pos_weight=pw, reduction=red),
                               rtol=2e-6)
    d, buf = _backward_args(session, reduction=reduction, out=(3, 5))
    session.run(BWD, *d.values())
    np.testing.assert_allclose(session.download(buf, (3, 5), np.float32),
                               bce_logits.bce_with_logits_grad(x, y, 1.5, weight=w, pos_weight=pw, reduction=red),
                               rtol=2e-6, atol=1e-7)
