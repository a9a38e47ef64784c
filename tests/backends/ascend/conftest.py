"""Fixtures for the ascend backend tests: the emulator backend, raw ABI access, device views."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import importlib.util

from xloss.backends import ascend_aclnn
from xloss.backends.ascend_aclnn import _cdef as C

# This checkout's build script (the installed package may be a non-editable copy without the
# nested headers): C builds in these tests use the checkout's sources and headers.
REPO_PKG = Path(__file__).resolve().parents[3] / "backends" / "ascend_aclnn"
_spec = importlib.util.spec_from_file_location("ascend_repo_build", REPO_PKG / "build.py")
lib_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib_build)


def _emulator_path() -> str:
    # XLOSS_ASCEND_TEST_EMULATOR: run these tests against another build of the emulator (e.g. the
    # --sanitize build, with libasan preloaded)
    if os.environ.get("XLOSS_ASCEND_TEST_EMULATOR"):
        return os.environ["XLOSS_ASCEND_TEST_EMULATOR"]
    path = Path(ascend_aclnn.emulator_library_path())
    if not path.exists():  # a fresh checkout: build it in place, as the install would
        lib_build.build()
    return str(path)


@pytest.fixture(scope="session")
def emu():
    """The ascend backend on the emulator, whatever XLOSS_ASCEND_LIB says."""
    b = ascend_aclnn.make_backend(lib=_emulator_path())
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


@pytest.fixture(scope="session")
def abi(emu):
    return Abi(emu)


@pytest.fixture
def session(emu, abi):
    """A device session; on exit every object the test made must be gone."""
    before = abi.live()
    with emu.session() as s:
        yield s
    assert abi.live() == before, "emulator objects leaked"


def view(s, storage: np.ndarray, shape, strides, offset=0, *, dtype=None):
    """Upload ``storage`` (1-D) and return (aclTensor view, numpy view of the same elements, buffer)."""
    storage = np.ascontiguousarray(storage).reshape(-1)
    buf = s.upload(storage)
    t = s.tensor(buf, shape, storage.dtype if dtype is None else dtype, strides=strides, offset=offset,
                 storage_shape=(storage.size,))
    item = storage.dtype.itemsize
    host = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(shape),
                                           strides=tuple(st * item for st in strides)) if storage.size else \
        np.zeros(shape, storage.dtype)
    return t, np.array(host), buf


def storage_size(shape, strides, offset) -> int:
    """Elements a view needs: offset + 1 + sum((d-1)*s), or 0 for an empty view."""
    if math.prod(shape) == 0:
        return offset
    return offset + 1 + sum((d - 1) * s for d, s in zip(shape, strides))


def cc() -> str:
    return os.environ.get("CC", "gcc")


def compile_c(args, cwd=None):
    res = subprocess.run([cc(), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="session")
def c_build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ascend_c")


class _Helpers:
    build = lib_build  # the checkout's build.py as a module
    view = staticmethod(view)
    storage_size = staticmethod(storage_size)
    compile_c = staticmethod(compile_c)
    cc = staticmethod(cc)


@pytest.fixture(scope="session")
def helpers():
    """Plain helper functions (tests cannot import conftest under --import-mode=importlib)."""
    return _Helpers


# ---- valid argument sets for every operator, by name (tests override one at a time) ----------

OPS = ("aclnnSigmoidFocalLoss", "aclnnSigmoidFocalLossBackward", "aclnnBinaryCrossEntropyBackward",
       "aclnnNLLLossBackward", "aclnnFusedLinearCrossEntropyLossGrad")

#: required pointer arguments per operator (NULL -> 161001)
REQUIRED = {
    "aclnnSigmoidFocalLoss": ("self", "target", "out"),
    "aclnnSigmoidFocalLossBackward": ("gradOutput", "self", "target", "out"),
    "aclnnBinaryCrossEntropyBackward": ("gradOutput", "self", "target", "out"),
    "aclnnNLLLossBackward": ("gradOutput", "self", "target", "weight", "totalWeight", "out"),
    "aclnnFusedLinearCrossEntropyLossGrad": ("grad", "input", "weight", "targetMask", "maskedTarget",
                                             "inputGradOut", "weightGradOut"),
}


def op_args(s, op, *, dtype=np.float32, reduction=0, mode="recompute"):
    """A valid, ordered argument dict for ``op`` (before workspaceSize/executor), plus host data."""
    rng = np.random.default_rng(7)
    n = s.ffi.NULL
    if op in ("aclnnSigmoidFocalLoss", "aclnnSigmoidFocalLossBackward", "aclnnBinaryCrossEntropyBackward"):
        shape = (3, 5)
        x = rng.uniform(0.05, 0.95, shape).astype(dtype)
        y = (rng.random(shape) > 0.5).astype(dtype)
        w = rng.uniform(0, 2, (1, 5)).astype(dtype)
        out_shape = shape if reduction == 0 or op != "aclnnSigmoidFocalLoss" else ()
        d = {}
        if op != "aclnnSigmoidFocalLoss":
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
    assert op == "aclnnFusedLinearCrossEntropyLossGrad"
    dt = np.float16 if dtype == np.float32 else dtype
    BT, H, V = 5, 4, 6
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


class _Ops:
    names = OPS
    required = REQUIRED
    args = staticmethod(op_args)


@pytest.fixture(scope="session")
def ops():
    return _Ops
