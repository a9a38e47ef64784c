"""The emulator's aclnnNLLLoss2dBackward against CANN's published ABI (ops-nn loss/nll_loss_grad: the docs'
prototype, parameter and return-code tables, aclnnNLLLoss2dBackward.md; the checks of
op_api/aclnn_nll_loss2d_backward.cpp), and its results against the float64 reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from xloss import reference as ref
from xloss.backends.ascend_aclnn import _cdef as C

OP = "aclnnNLLLoss2dBackward"
NULLPTR, INVALID = C.ACLNN_ERR_PARAM_NULLPTR, C.ACLNN_ERR_PARAM_INVALID
HEADER = Path(__file__).resolve().parents[3] / "backends" / "ascend_aclnn" / "include" / "aclnnop" / \
    "aclnn_nll_loss2d_backward.h"

#: CANN's prototypes as the docs publish them (parameter types and names, in order): totalWeight is not const
VENDOR_PROTOTYPES = {
    OP + "GetWorkspaceSize": (
        "const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weight, "
        "int64_t reduction, int64_t ignoreIndex, aclTensor *totalWeight, aclTensor *out, uint64_t *workspaceSize, "
        "aclOpExecutor **executor"),
    OP: "void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream",
}


def _params(text: str) -> str:
    return ", ".join(" ".join(p.replace("*", " * ").split()).replace("* ", "*") for p in text.split(","))


@pytest.mark.parametrize("fn", sorted(VENDOR_PROTOTYPES))
def test_the_header_declares_the_vendor_prototype(fn):
    text = re.sub(r"/\*.*?\*/", " ", HEADER.read_text(), flags=re.S)
    m = re.search(rf"\baclnnStatus\s+{fn}\s*\(([^;]*)\)\s*;", text)
    assert m, f"{fn} is not declared in {HEADER.name}"
    assert _params(m.group(1)) == _params(VENDOR_PROTOTYPES[fn])
    assert f"{fn}(" in C.CDEF


def _args(s, x, t, *, reduction=1, grad=None, weight=None, total=None, dtype=np.float32, out_shape=None):
    """The ordered arguments (before workspaceSize/executor) and out's buffer."""
    c = x.shape[1]
    if grad is None:
        grad = np.full(t.shape, 0.5, dtype) if reduction == 0 else np.full(1, 0.5, dtype)
    d = {"gradOutput": s.put(np.asarray(grad))[0], "self": s.put(x)[0], "target": s.put(t)[0],
         "weight": s.put(np.ones(c, dtype) if weight is None else weight)[0], "reduction": reduction,
         "ignoreIndex": -100, "totalWeight": s.put(np.asarray([3.0], dtype) if total is None else total)[0]}
    d["out"], buf = s.empty(x.shape if out_shape is None else out_shape, dtype)
    return d, buf


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_matches_the_reference_on_strided_views(session, helpers, reduction):
    """Every operand a non-contiguous view (out included): the gradient is the float64 reference's, rounded once."""
    rng = np.random.default_rng(reduction)
    n, c, h, w = 2, 5, 3, 4
    x = -rng.random((n, c, h, w)).astype(np.float32)
    t = rng.integers(0, c, (n, h, w))
    t[0, 1, 2] = t[1, 2, 0] = -100
    g = rng.uniform(-1, 1, (n, h, w) if reduction == 0 else (1,)).astype(np.float32)
    wt = rng.uniform(0.5, 2, c).astype(np.float32)
    d, _ = _args(session, x, t, reduction=reduction, grad=g, weight=wt, total=np.asarray([2.5], np.float32))
    # self and out transposed in their storage (H and W swapped), target with a stride of 2
    d["self"], _, _ = helpers.view(session, np.ascontiguousarray(x.transpose(0, 1, 3, 2)), x.shape,
                                   (c * h * w, h * w, 1, h))
    tt = np.zeros((n, h, w, 2), np.int64)
    tt[..., 0] = t
    d["target"], host_t, _ = helpers.view(session, tt, t.shape, (2 * h * w, 2 * w, 2))
    assert (host_t == t).all()
    d["out"], _, out_buf = helpers.view(session, np.full(2 * x.size, 9.0, np.float32), x.shape,
                                        (2 * c * h * w, 2 * h * w, 2, 2 * h), 0)
    session.run(OP, *d.values())
    got = session.download(out_buf, (2 * x.size,), np.float32)
    got = np.lib.stride_tricks.as_strided(got, x.shape, tuple(4 * s for s in (2 * c * h * w, 2 * h * w, 2, 2 * h)))
    want = ref.nll_loss_grad(g if reduction == 0 else float(g[0]), x, t, weight=wt,
                             reduction=("none", "mean", "sum")[reduction], total_weight=2.5)
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
    assert (session.download(out_buf, (2 * x.size,), np.float32)[1::2] == 9.0).all()  # nothing outside the view


def test_float16_computes_in_float_and_rounds_once(session):
    """The op_api widens FLOAT16 to FLOAT for the kernel: -w * (g / totalWeight) in float, rounded once."""
    rng = np.random.default_rng(4)
    x = -rng.random((1, 3, 2, 5)).astype(np.float16)
    t = rng.integers(0, 3, (1, 2, 5))
    wt = rng.uniform(0.5, 2, 3).astype(np.float16)
    d, buf = _args(session, x, t, reduction=1, dtype=np.float16, weight=wt, total=np.asarray([3.0], np.float16),
                   grad=np.asarray([0.7], np.float16))
    session.run(OP, *d.values())
    want = ref.nll_loss_grad(float(np.float16(0.7)), x, t, weight=wt, reduction="mean", total_weight=3.0)
    np.testing.assert_array_equal(session.download(buf, x.shape, np.float16), want.astype(np.float16))


@pytest.mark.parametrize("label, change, code", [
    ("NULL gradOutput", {"gradOutput": None}, NULLPTR),
    ("NULL weight (required)", {"weight": None}, NULLPTR),
    ("NULL totalWeight (required)", {"totalWeight": None}, NULLPTR),
    ("NULL out", {"out": None}, NULLPTR),
    ("DOUBLE self", {"self": np.zeros((2, 3, 2, 2))}, INVALID),
    ("FLOAT16 weight with FLOAT self", {"weight": np.ones(3, np.float16)}, INVALID),
    ("FLOAT16 totalWeight with FLOAT self", {"totalWeight": np.ones(1, np.float16)}, INVALID),
    ("FLOAT16 gradOutput with FLOAT self", {"gradOutput": np.ones(1, np.float16)}, INVALID),
    ("FLOAT16 out with FLOAT self", {"out": ("empty", (2, 3, 2, 2), np.float16)}, INVALID),
    ("INT16 target", {"target": np.zeros((2, 2, 2), np.int16)}, INVALID),
    ("3-D self", {"self": np.zeros((2, 3, 4), np.float32), "out": ("empty", (2, 3, 4), np.float32)}, INVALID),
    ("2-D target", {"target": np.zeros((2, 4), np.int64)}, INVALID),
    ("target planes transposed", {"target": np.zeros((2, 2, 2), np.int64), "self": np.zeros((2, 3, 2, 3), np.float32),
                                  "out": ("empty", (2, 3, 2, 3), np.float32)}, INVALID),
    ("weight of 4 elements for C = 3", {"weight": np.ones(4, np.float32)}, INVALID),
    ("totalWeight of 2 elements", {"totalWeight": np.ones(2, np.float32)}, INVALID),
    ("out of another shape", {"out": ("empty", (2, 3, 4), np.float32)}, INVALID),
    ("gradOutput (1, 1) for mean (more than one dim)", {"gradOutput": np.ones((1, 1), np.float32)}, INVALID),
    ("gradOutput of two elements for mean", {"gradOutput": np.ones(2, np.float32)}, INVALID),
    ("reduction 3", {"reduction": 3}, INVALID),
    ("reduction -1", {"reduction": -1}, INVALID),
])
def test_phase_one_refuses_what_cann_refuses(session, abi, label, change, code):
    x = np.zeros((2, 3, 2, 2), np.float32)
    d, _ = _args(session, x, np.zeros((2, 2, 2), np.int64))
    for k, v in change.items():
        if v is None:
            d[k] = abi.NULL
        elif isinstance(v, tuple):
            d[k] = session.empty(v[1], v[2])[0]
        elif isinstance(v, np.ndarray):
            d[k] = session.put(v)[0]
        else:
            d[k] = v
    st, _, ex = abi.phase_one(OP, *d.values())
    assert st == code and ex == abi.NULL, (label, st, abi.message())
    assert abi.message(), label


def test_gradoutput_for_none_must_have_targets_shape(session, abi):
    x = np.zeros((2, 3, 2, 2), np.float32)
    t = np.zeros((2, 2, 2), np.int64)
    for grad, code in ((np.ones((2, 2, 2), np.float32), 0), (np.ones(8, np.float32), INVALID),
                       (np.ones(1, np.float32), INVALID), (np.ones((2, 2, 1), np.float32), INVALID)):
        d, _ = _args(session, x, t, reduction=0, grad=grad)
        st, _, ex = abi.phase_one(OP, *d.values())
        assert st == code, (grad.shape, abi.message())
        if st == 0:
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0


def test_weight_is_checked_by_its_element_count_and_read_flat(session):
    """CheckShape compares weight's element count with C: a (1, C) weight is taken, read in its element order."""
    rng = np.random.default_rng(5)
    x = -rng.random((1, 4, 2, 3)).astype(np.float32)
    t = rng.integers(0, 4, (1, 2, 3))
    wt = rng.uniform(0.5, 2, 4).astype(np.float32)
    d, buf = _args(session, x, t, reduction=2, weight=wt.reshape(1, 4), grad=np.asarray([1.5], np.float32))
    session.run(OP, *d.values())
    np.testing.assert_allclose(session.download(buf, x.shape, np.float32),
                               ref.nll_loss_grad(1.5, x, t, weight=wt, reduction="sum"), rtol=1e-7)


def test_empty_self_runs_no_kernel_and_a_bad_target_fails_at_run_time(session, abi):
    d, _ = _args(session, np.zeros((0, 3, 2, 2), np.float32), np.zeros((0, 2, 2), np.int64))
    st, ws, ex = abi.phase_one(OP, *d.values())
    assert st == 0 and ws == 0
    assert abi.phase_two(OP, abi.NULL, 0, ex, session.stream) == 0
    x = np.zeros((1, 3, 2, 2), np.float32)
    d, buf = _args(session, x, np.array([[[0, 1], [3, -100]]]))  # 3 is no class of C = 3
    session.upload(np.full(x.size, 7.0, np.float32), buf)
    st, ws, ex = abi.phase_one(OP, *d.values())
    assert st == 0
    assert abi.phase_two(OP, abi.NULL, ws, ex, session.stream) == C.ACLNN_ERR_RUNTIME_ERROR
    assert "target[0, 1, 0] = 3" in abi.message()
    assert (session.download(buf, (x.size,), np.float32) == 7.0).all()  # nothing written
