"""Helpers shared by the ascend backend tests (``tests/backends/ascend``) and the hardening tests
(``tests/hardening/test_ascend_*.py``): which emulator build to test, raw ABI access, and valid
argument sets for every operator. Loaded by file path (see conftest.py), since pytest's importlib mode gives
tests no package to import from."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import numpy as np

from xloss.backends import ascend_aclnn
from xloss.backends.ascend_aclnn import _cdef as C

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
# This checkout's build script (the installed package may be a non-editable copy without the
# nested headers): C builds in these tests use the checkout's sources and headers.
PKG = ROOT / "backends" / "ascend_aclnn"
INCLUDE = PKG / "include"


def load_module(path, name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


lib_build = load_module(PKG / "build.py", "ascend_repo_build")


def emulator_path() -> str:
    """The emulator build under test. XLOSS_ASCEND_TEST_EMULATOR: another build's operator library
    (e.g. the --sanitize build, with libasan preloaded), its runtime beside it."""
    if os.environ.get("XLOSS_ASCEND_TEST_EMULATOR"):
        return os.environ["XLOSS_ASCEND_TEST_EMULATOR"]
    path = Path(ascend_aclnn.emulator_library_path())
    if not path.exists() or not Path(ascend_aclnn.emulator_runtime_path()).exists():
        lib_build.build()  # a fresh checkout: build in place, as the install would
    return str(path)


def emulator_backend(**options):
    b = ascend_aclnn.make_backend(lib=emulator_path(), **options)
    ok, why = b.availability()
    assert ok, why
    return b


class Abi:
    """Raw calls into the loaded library (statuses returned, not raised)."""

    def __init__(self, backend):
        self.backend = backend
        self.rt = backend.rt
        self.lib = backend.rt.lib
        self.ffi = backend.rt.ffi
        self.NULL = self.ffi.NULL

    def phase_one(self, op: str, *args):
        size = self.ffi.new("uint64_t *")
        exe = self.ffi.new("aclOpExecutor **")
        st = self.lib.symbol(op + "GetWorkspaceSize")(*args, size, exe)
        return int(st), int(size[0]), exe[0]

    def phase_two(self, op: str, workspace, size: int, executor, stream):
        return int(self.lib.symbol(op)(workspace, size, executor, stream))

    def message(self) -> str:
        return self.rt.recent_message()

    def live(self, kind=C.LIVE_ALL) -> int:
        return self.rt.live(kind)

    def create(self, buf, shape, dtype_code, strides=None, offset=0, storage=None, fmt=C.ACL_FORMAT_ND, data=None):
        """aclCreateTensor, returning the raw pointer (NULL allowed); not tracked by a session."""
        shape = list(shape)
        strides = list(strides) if strides is not None else list(_contig(shape))
        storage = list(storage) if storage is not None else shape
        ptr = data if data is not None else buf.ptr
        return self.lib.aclCreateTensor(self.ffi.new("int64_t[]", shape or [0]), len(shape), dtype_code,
                                        self.ffi.new("int64_t[]", strides or [0]), offset, fmt,
                                        self.ffi.new("int64_t[]", storage or [0]), len(storage), ptr)


def _contig(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def storage_size(shape, strides, offset) -> int:
    """Elements a view needs: offset + 1 + sum((d-1)*s), or offset for an empty view."""
    if math.prod(shape) == 0:
        return offset
    return offset + 1 + sum((d - 1) * s for d, s in zip(shape, strides))


# ---- valid argument sets for every operator, by name (tests override one at a time) ----------

OPS = ("aclnnXlossSigmoidFocalLoss", "aclnnXlossSigmoidFocalLossBackward", "aclnnBinaryCrossEntropyBackward",
       "aclnnNLLLossBackward", "aclnnFusedLinearCrossEntropyLossGrad")
#: the vocabulary-parallel forward's operators: in the generic ABI loops of tests/backends/ascend
#: (ABI_OPS); the hardening fuzzers draw from OPS, whose operator-specific expectations they encode
VOCAB_PARALLEL_OPS = ("aclnnFusedLinearOnlineMaxSum", "aclnnFusedCrossEntropyLossWithMaxSum")
ABI_OPS = OPS + VOCAB_PARALLEL_OPS

#: required pointer arguments per operator (NULL -> 161001)
REQUIRED = {
    "aclnnXlossSigmoidFocalLoss": ("self", "target", "out"),
    "aclnnXlossSigmoidFocalLossBackward": ("gradOutput", "self", "target", "out"),
    "aclnnBinaryCrossEntropyBackward": ("gradOutput", "self", "target", "out"),
    "aclnnNLLLossBackward": ("gradOutput", "self", "target", "weight", "totalWeight", "out"),
    "aclnnFusedLinearCrossEntropyLossGrad": ("grad", "input", "weight", "targetMask", "maskedTarget",
                                             "inputGradOut", "weightGradOut"),
    "aclnnFusedLinearOnlineMaxSum": ("input", "weight", "target", "logitsMaxLocalOut", "sumExpLogitsLocalOut",
                                     "predictedLogitsLocalOut", "targetMaskOut", "maskedTargetOut"),
    "aclnnFusedCrossEntropyLossWithMaxSum": ("logitsMax", "sumExpLogits", "predictedLogits", "lossOut"),
}


def op_args(s, op, *, dtype=np.float32, reduction=0, mode="recompute"):
    """A valid, ordered argument dict for ``op`` (before workspaceSize/executor), plus host data."""
    rng = np.random.default_rng(7)
    n = s.ffi.NULL
    if op in ("aclnnXlossSigmoidFocalLoss", "aclnnXlossSigmoidFocalLossBackward", "aclnnBinaryCrossEntropyBackward"):
        shape = (3, 5)
        x = rng.uniform(0.05, 0.95, shape).astype(dtype)
        y = (rng.random(shape) > 0.5).astype(dtype)
        w = rng.uniform(0, 2, (1, 5)).astype(dtype)
        out_shape = shape if reduction == 0 or op != "aclnnXlossSigmoidFocalLoss" else ()
        d = {}
        if op != "aclnnXlossSigmoidFocalLoss":
            d["gradOutput"] = s.put(np.asarray(1.5, np.float32))[0]
        d["self"], d["target"], d["weightOptional"] = s.put(x)[0], s.put(y)[0], s.put(w)[0]
        if op != "aclnnBinaryCrossEntropyBackward":
            d["gamma"], d["alpha"] = 2.0, 0.25
        d["reduction"] = reduction
        d["out"] = s.empty(out_shape, dtype)[0]
        return d
    if op == "aclnnNLLLossBackward":
        N, K = 4, 3
        return {"gradOutput": s.put(np.ones(N if reduction == 0 else 1, dtype))[0],
                "self": s.put(-rng.random((N, K)).astype(dtype))[0],
                "target": s.put(np.array([0, 2, -100, 1], np.int64))[0],
                "weight": s.put(np.array([1.0, 2.0, 0.5], dtype))[0],
                "reduction": reduction, "ignoreIndex": -100,
                "totalWeight": s.put(np.array([3.0], dtype))[0],
                "out": s.empty((N, K), dtype)[0]}
    if op in VOCAB_PARALLEL_OPS:
        return _vocab_parallel_args(s, op, rng, np.float16 if dtype == np.float32 else dtype)
    assert op == "aclnnFusedLinearCrossEntropyLossGrad"
    dt = np.float16 if dtype == np.float32 else dtype
    BT, H = 5, 4
    V = 128 if mode == "softmax" else 6  # CANN's high-performance mode refuses V < 128
    x = rng.uniform(-1, 1, (BT, H)).astype(dt)
    w = rng.uniform(-1, 1, (V, H)).astype(dt)
    d = {"grad": s.put(rng.uniform(-1, 1, BT).astype(np.float32))[0], "input": s.put(x)[0], "weight": s.put(w)[0],
         "targetMask": s.put(np.packbits(np.array([0, 1, 0, 0, 1], bool), bitorder="little"))[0],
         "maskedTarget": s.put(np.array([1, 0, 5, 2, 0], np.int64))[0], "labelSmoothing": 0.0,
         "logitsMaxOptional": n, "sumExpLogitsOptional": n, "softmaxOptional": n}
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    if mode == "recompute":
        d["logitsMaxOptional"] = s.put(logits.max(axis=1).astype(np.float32))[0]
        d["sumExpLogitsOptional"] = s.put(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)
                                          .astype(np.float32))[0]
    else:
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        d["softmaxOptional"] = s.put((p / p.sum(axis=1, keepdims=True)).astype(np.float32))[0]
    d["inputGradOut"] = s.empty((BT, H), dt)[0]
    d["weightGradOut"] = s.empty((V, H), dt)[0]
    return d


def _vocab_parallel_args(s, op, rng, dt):
    """A valid shard (BT 5, H 4, V 6, rows [3, 9) of the global vocabulary, two targets outside it):
    the max-sum operator's arguments with its logits, or the loss operator's with logits and softmax."""
    BT, H, V = 5, 4, 6
    x = rng.uniform(-1, 1, (BT, H)).astype(dt)
    w = rng.uniform(-1, 1, (V, H)).astype(dt)
    if op == "aclnnFusedLinearOnlineMaxSum":
        return {"input": s.put(x)[0], "weight": s.put(w)[0], "target": s.put(np.array([3, 0, 8, 12, 5], np.int64))[0],
                "vocabStartIndex": 3, "vocabEndIndex": 9, "logitsMaxLocalOut": s.empty((BT,), np.float32)[0],
                "sumExpLogitsLocalOut": s.empty((BT,), np.float32)[0],
                "predictedLogitsLocalOut": s.empty((BT,), np.float32)[0],
                "targetMaskOut": s.empty(((BT + 7) // 8,), np.uint8)[0], "maskedTargetOut": s.empty((BT,), np.int64)[0],
                "vocabParallelLogitsOutOptional": s.empty((BT, V), dt)[0]}
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    m = logits.max(axis=1)
    return {"logitsMax": s.put(m.astype(np.float32))[0],
            "sumExpLogits": s.put(np.exp(logits - m[:, None]).sum(axis=1).astype(np.float32))[0],
            "predictedLogits": s.put((logits[:, 1] - m).astype(np.float32))[0], "labelSmoothing": 0.0,
            "inputOptional": s.ffi.NULL, "weightOptional": s.ffi.NULL,
            "vocabParallelLogitsOptional": s.put(logits.astype(dt))[0], "lossOut": s.empty((BT,), np.float32)[0],
            "softMaxOutOptional": s.empty((BT, V), np.float32)[0]}


# ---- issue 30's operators (the hardening fuzzer and leak tests take their arguments from here) ----------

LOSS_OPS = ("aclnnNLLLoss", "aclnnNLLLoss2d", "aclnnBinaryCrossEntropy", "aclnnBinaryCrossEntropyWithLogits",
            "aclnnBinaryCrossEntropyWithLogitsBackward", "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGrad",
            "aclnnSoftmaxCrossEntropyWithLogits", "aclnnNLLLoss2dBackward")
_NLL, _NLL2D, _BCEF, _BCEL, _BCELB, _CE, _CEG, _SCE, _NLL2DB = LOSS_OPS
CE_REDUCTIONS = {0: b"none", 1: b"mean", 2: b"sum"}  # cross entropy's reductionOptional, by int64 code
#: required pointer arguments (NULL -> 161001); the others are optional
LOSS_REQUIRED = {
    _NLL: ("self", "target", "weight", "out", "totalWeightOut"),
    _NLL2D: ("self", "target", "weight", "out", "totalWeightOut"),
    _BCEF: ("self", "target", "out"), _BCEL: ("self", "target", "out"),
    _BCELB: ("gradOutput", "self", "target", "out"),
    _CE: ("input", "target", "lossOut", "logProbOut", "zlossOut", "lseForZlossOut"),
    _CEG: ("gradLoss", "logProb", "target", "out"), _SCE: ("features", "labels", "loss", "backprop"),
    _NLL2DB: ("gradOutput", "self", "target", "weight", "out", "totalWeight"),  # CheckNotNull's order
}


def loss_op_args(s, op, *, reduction=1) -> dict:
    """A valid, ordered argument dict for ``op`` (before workspaceSize and executor)."""
    rng = np.random.default_rng(11)
    n, c = 4, 3
    targets = np.array([0, 2, -100, 1], np.int64)
    if op in (_NLL, _NLL2D):
        shape, tshape = ((n, c), (n,)) if op == _NLL else ((2, c, 2, 2), (2, 2, 2))
        out_shape = (tshape if reduction == 0 else ())
        return {"self": s.put(-rng.random(shape).astype(np.float32))[0],
                "target": s.put(np.resize(targets, tshape))[0], "weight": s.put(rng.uniform(0.5, 2, c)
                                                                                 .astype(np.float32))[0],
                "reduction": reduction, "ignoreIndex": -100, "out": s.empty(out_shape, np.float32)[0],
                "totalWeightOut": s.empty((1,), np.float32)[0]}
    if op in (_BCEF, _BCEL, _BCELB):
        shape = (3, 5)
        x = rng.uniform(0.05, 0.95, shape) if op == _BCEF else rng.normal(0, 3, shape)
        d = {"gradOutput": s.put(np.asarray(1.5, np.float32))[0]} if op == _BCELB else {}
        d["self"], d["target"] = s.put(x.astype(np.float32))[0], s.put(rng.random(shape).astype(np.float32))[0]
        if op == _BCEF:
            d["weight"] = s.put(rng.uniform(0, 2, shape).astype(np.float32))[0]
        else:
            d["weightOptional"] = s.put(rng.uniform(0, 2, (1, 5)).astype(np.float32))[0]
            d["posWeightOptional"] = s.put(rng.uniform(0, 3, (5,)).astype(np.float32))[0]
        d["reduction"] = reduction
        d["out"] = s.empty(shape if reduction == 0 or op == _BCELB else (), np.float32)[0]
        return d
    if op == _CE:
        d = {"input": s.put(rng.normal(0, 2, (n, c)).astype(np.float32))[0], "target": s.put(targets)[0],
             "weightOptional": s.put(rng.uniform(0.5, 2, c).astype(np.float32))[0],
             "reductionOptional": CE_REDUCTIONS[reduction], "ignoreIndex": -100, "labelSmoothing": 0.1,
             "lseSquareScaleForZloss": 0.0, "returnZloss": False}
        loss_shape = (n,) if reduction == 0 else ()
        for name, shape in (("lossOut", loss_shape), ("logProbOut", (n, c)), ("zlossOut", loss_shape),
                            ("lseForZlossOut", (n,))):
            d[name] = s.empty(shape, np.float32)[0]
        return d
    if op == _CEG:
        lp = np.log(rng.dirichlet(np.ones(c), n)).astype(np.float32)
        return {"gradLoss": s.put(rng.uniform(0.5, 1.5, (n,) if reduction == 0 else ()).astype(np.float32))[0],
                "logProb": s.put(lp)[0], "target": s.put(targets)[0],
                "weightOptional": s.put(rng.uniform(0.5, 2, c).astype(np.float32))[0], "gradZlossOptional": s.ffi.NULL,
                "lseForZlossOptional": s.ffi.NULL, "reductionOptional": CE_REDUCTIONS[reduction], "ignoreIndex": -100,
                "labelSmoothing": 0.1, "lseSquareScaleForZloss": 0.0, "out": s.empty((n, c), np.float32)[0]}
    if op == _NLL2DB:  # (N, C, H, W) = (2, 3, 2, 2); totalWeight is the weights' sum over the kept positions
        t, w = np.resize(targets, (2, 2, 2)), rng.uniform(0.5, 2, c).astype(np.float32)
        return {"gradOutput": s.put(rng.uniform(0.5, 1.5, t.shape if reduction == 0 else ()).astype(np.float32))[0],
                "self": s.put(-rng.random((2, c, 2, 2)).astype(np.float32))[0], "target": s.put(t)[0],
                "weight": s.put(w)[0], "reduction": reduction, "ignoreIndex": -100,
                "totalWeight": s.put(np.array([w[t[t != -100]].sum()], np.float32))[0],
                "out": s.empty((2, c, 2, 2), np.float32)[0]}
    assert op == _SCE
    return {"features": s.put(rng.normal(0, 2, (n, c)).astype(np.float32))[0],
            "labels": s.put(rng.dirichlet(np.ones(c), n).astype(np.float32))[0],
            "loss": s.empty((n,), np.float32)[0], "backprop": s.empty((n, c), np.float32)[0]}
