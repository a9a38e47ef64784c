"""Hostile arguments at the raw C entry points of the ascend emulator (issue 9, ABI fuzzing).

Every test drives the C ABI through cffi with arguments hypothesis draws, and compares the
status with an independent Python model of the documented rules (backends/ascend_aclnn/README.md):
null pointers in every position, negative and huge dims, dims whose product overflows int64,
views reaching outside their storage or their device block, misaligned device pointers, dtype
codes of every kind, mismatched shapes, destroyed and reused executors and tensors, zero and
too-small workspaces, device data phase two must refuse, and hostile descriptors given to the
executor interface operator libraries use. Besides the status: no write outside an operation's
outputs (every device buffer of the session is compared byte for byte), outputs untouched on
error, results right on success, and no leaked runtime object.

tests/hardening/test_ascend_sanitizers.py runs this module against the ASan/UBSan build, where any
out-of-bounds access aborts. The number of cases per category is printed at the end of the module
(and written as JSON to $XLOSS_ASCEND_FUZZ_COUNTS if set); $XLOSS_ASCEND_FUZZ_SCALE scales the
example budgets.
"""

from __future__ import annotations

import collections
import json
import math
import os
from pathlib import Path

import ascend_support as support  # tests/backends/ascend, on pytest's pythonpath
import cffi
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from xloss import reference as ref
from xloss.backends.ascend_aclnn import _cdef as C

OPS, REQUIRED, op_args = support.OPS, support.REQUIRED, support.op_args
BCE, NLL, FLCE, FOCAL = ("aclnnBinaryCrossEntropyBackward", "aclnnNLLLossBackward",
                         "aclnnFusedLinearCrossEntropyLossGrad", "aclnnXlossSigmoidFocalLoss")

NULLPTR, INVALID, RUNTIME, INNER_NULLPTR = 161001, 161002, 361001, 561103
INNER = 561000  # ACLNN_ERR_INNER: phase two of an executor the runtime does not know (spent, destroyed)
ACL_INVALID_PARAM, ACL_REPEAT_INITIALIZE = 100000, 100002
INT64_MAX = 2**63 - 1
SCALE = float(os.environ.get("XLOSS_ASCEND_FUZZ_SCALE", "1"))
COUNTS: collections.Counter = collections.Counter()

#: every aclDataType code with a byte size (README: Tensors #8), and that size
SIZED = {0: 4, 1: 2, 2: 1, 3: 4, 4: 1, 6: 2, 7: 2, 8: 4, 9: 8, 10: 8, 11: 8, 12: 1, 16: 8, 17: 16, 27: 2, 33: 4}
FORMATS = {0, 1, 2, 3, 4, 12, 16, 27, 29, 30, 32, 33, 35, 47}
FLOATS = {0, 1, 27}

_libc_ffi = cffi.FFI()
_libc_ffi.cdef("void free(void *);")
_libc = _libc_ffi.dlopen(None)


def budget(n: int) -> settings:
    return settings(max_examples=max(5, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def emu():
    return support.emulator_backend()


@pytest.fixture(scope="module")
def abi(emu):
    return support.Abi(emu)


@pytest.fixture(autouse=True)
def no_leaks(abi):
    before = abi.live()
    yield
    assert abi.live() == before, "the runtime leaked objects"


def report(request, counts, what: str, env_var: str) -> None:
    """Print the cases run per category (even when the run passes), and write them to ``$env_var`` if set."""
    text = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(f"\n{what} cases per category ({sum(counts.values())} in all): {text}")
    if os.environ.get(env_var):
        Path(os.environ[env_var]).write_text(json.dumps(dict(counts), indent=1))


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    yield
    report(request, COUNTS, "ascend ABI fuzz", "XLOSS_ASCEND_FUZZ_COUNTS")


# ---- helpers -------------------------------------------------------------------------------------

def snapshot(s) -> dict:
    """The bytes of every device buffer of session ``s``."""
    return {id(b): (b, s._read(b, (b.nbytes,), np.uint8)) for b in s._buffers if b.nbytes}


def assert_only_written(s, before: dict, allowed: dict | None = None):
    """Every buffer equals its snapshot except the bytes ``allowed[id(buf)]`` (a boolean mask)."""
    for key, (buf, old) in before.items():
        changed = s._read(buf, (buf.nbytes,), np.uint8) != old
        if allowed and key in allowed:
            changed &= ~allowed[key]
        assert not changed.any(), (f"a {buf.nbytes}-byte device buffer was written at bytes "
                                   f"{np.flatnonzero(changed)[:8]}")


def element_indices(shape, strides, offset) -> np.ndarray:
    shape = tuple(shape)
    if math.prod(shape) == 0:
        return np.zeros(0, np.int64)
    flat = np.full(shape, offset, np.int64)
    for ax, stv in enumerate(strides):
        flat += np.arange(shape[ax], dtype=np.int64).reshape([-1 if i == ax else 1 for i in range(len(shape))]) * stv
    return flat.reshape(-1)


def byte_mask(nbytes, shape, strides, offset, itemsize, base_byte=0) -> np.ndarray:
    mask = np.zeros(nbytes, bool)
    idx = element_indices(shape, strides, offset) * itemsize + base_byte
    for b in range(itemsize):
        mask[idx + b] = True
    return mask


def i64(ffi, values):
    return ffi.new("int64_t[]", [int(v) for v in values] or [0])


def create(abi, dims, dtype, strides, offset, fmt, storage, data):
    ffi = abi.ffi
    return abi.lib.aclCreateTensor(i64(ffi, dims), len(dims), dtype, i64(ffi, strides), offset, fmt,
                                   i64(ffi, storage), len(storage), data)


def view_numel(dims) -> int:
    return 0 if any(d == 0 for d in dims) else math.prod(dims)


def reach(dims, strides, offset) -> int:
    return offset + sum((d - 1) * s_ for d, s_ in zip(dims, strides))


def model_create(dims, dtype, strides, offset, fmt, storage, data_is_null) -> bool:
    """Does aclCreateTensor accept this? (README, Tensors #8: the model, not the code)."""
    if len(dims) > 64 or len(storage) > 64 or dtype not in SIZED or fmt not in FORMATS:
        return False
    if any(d < 0 for d in storage) or any(d < 0 for d in dims):
        return False
    snumel = math.prod(storage)
    if snumel * SIZED[dtype] > INT64_MAX:
        return False
    n = view_numel(dims)
    if n > INT64_MAX:
        return False
    signed = offset < 0 or any(s_ < 0 for s_ in strides)  # accepted unchecked, as CANN; phase one refuses it
    if n and not signed and reach(dims, strides, offset) >= snumel:
        return False
    return not (snumel and data_is_null)


def ptr_add(abi, p, nbytes: int):
    return abi.ffi.cast("char *", p) + nbytes


def c_free(abi, p):
    _libc.free(_libc_ffi.cast("void *", int(abi.ffi.cast("uintptr_t", p))))


def destroy_ok(abi, ex):
    assert abi.lib.aclDestroyAclOpExecutor(ex) == 0


# ---- 1. null pointers in every position ----------------------------------------------------------

@budget(150)
@given(data=st.data())
def test_null_pointers_in_phase_one(emu, abi, data):
    op = data.draw(st.sampled_from(OPS), label="op")
    mode = data.draw(st.sampled_from(["recompute", "softmax"]), label="flce mode")
    with emu.session() as s:
        d = op_args(s, op, reduction=data.draw(st.sampled_from([0, 1, 2]), label="reduction"), mode=mode)
        params = [k for k, v in d.items() if not isinstance(v, (int, float))] + ["workspaceSize", "executor"]
        nulls = data.draw(st.sets(st.sampled_from(params), min_size=1), label="NULL positions")
        args = {k: (abi.NULL if k in nulls else v) for k, v in d.items()}
        required = set(REQUIRED[op]) | {"workspaceSize", "executor"}
        if op == FLCE and args["softmaxOptional"] == abi.NULL:
            required |= {"logitsMaxOptional", "sumExpLogitsOptional"}  # recompute mode needs both
        ws = abi.NULL if "workspaceSize" in nulls else abi.ffi.new("uint64_t *", 777)
        exe = abi.NULL if "executor" in nulls else abi.ffi.new("aclOpExecutor **", abi.ffi.cast("void *", 0x70))
        before = snapshot(s)
        got = abi.lib.symbol(op + "GetWorkspaceSize")(*args.values(), ws, exe)
        # a required pointer that is NULL, by this draw or already (softmax mode passes no row statistics)
        expect_null = bool(nulls & {"workspaceSize", "executor"}) or any(args[k] == abi.NULL for k in required
                                                                          if k in args)
        assert got == (NULLPTR if expect_null else 0), (op, sorted(nulls), got, abi.message())
        if expect_null:  # a failed phase one clears the outputs it was given
            assert ws == abi.NULL or ws[0] == 0
            assert exe == abi.NULL or exe[0] == abi.NULL
        else:
            destroy_ok(abi, exe[0])
        assert_only_written(s, before)
    COUNTS["null pointers"] += 1


def test_null_pointers_in_every_runtime_position(emu, abi):
    """A NULL in each pointer position of the runtime, tensor, accessor, executor and
    emulator-interface calls: the documented status, or NULL from aclCreateTensor."""
    lib, ffi, N = abi.lib, abi.ffi, abi.NULL
    with emu.session() as s:
        dev = s.malloc(64)
        host = np.zeros(16, np.float32)
        hp = ffi.cast("void *", host.ctypes.data)
        t = s.tensor(dev, (4,), np.float32)
        arr, cnt = ffi.new("int64_t **"), ffi.new("uint64_t *")
        four = i64(ffi, [4])
        desc = ffi.new("xlossEmuTensorDesc *")
        kernel = ffi.callback("xlossEmuKernel", lambda plan, w, n: 0)

        def make_exe(op=b"op", k=kernel, operands=N, n=0, plan=N, plan_size=0, ws_out=None, exe=None):
            w = ffi.new("uint64_t *") if ws_out is None else ws_out
            e = ffi.new("aclOpExecutor **") if exe is None else exe
            got = lib.xlossEmuCreateExecutor(op, operands, n, plan, plan_size, k, 0, w, e)
            if got == 0:
                destroy_ok(abi, e[0])
            return got

        def created(p):
            made = p != N
            if made:
                lib.aclDestroyTensor(p)
            return made

        cases = [
            ("aclrtMalloc devPtr", lambda: lib.aclrtMalloc(N, 8, 0), ACL_INVALID_PARAM),
            ("aclrtFree", lambda: lib.aclrtFree(N), ACL_INVALID_PARAM),
            ("aclrtMemcpy dst", lambda: lib.aclrtMemcpy(N, 16, hp, 16, C.ACL_MEMCPY_HOST_TO_DEVICE), ACL_INVALID_PARAM),
            ("aclrtMemcpy src", lambda: lib.aclrtMemcpy(dev.ptr, 16, N, 16, C.ACL_MEMCPY_HOST_TO_DEVICE),
             ACL_INVALID_PARAM),
            ("aclrtMemcpy both, count 0", lambda: lib.aclrtMemcpy(N, 0, N, 0, C.ACL_MEMCPY_DEVICE_TO_DEVICE),
             ACL_INVALID_PARAM),
            ("aclrtMemset", lambda: lib.aclrtMemset(N, 16, 0, 16), ACL_INVALID_PARAM),
            ("aclrtCreateStream", lambda: lib.aclrtCreateStream(N), ACL_INVALID_PARAM),
            ("aclrtDestroyStream", lambda: lib.aclrtDestroyStream(N), ACL_INVALID_PARAM),
            ("aclrtSynchronizeStream (the default stream)", lambda: lib.aclrtSynchronizeStream(N), 0),
            ("aclrtGetDevice", lambda: lib.aclrtGetDevice(N), ACL_INVALID_PARAM),
            ("aclrtGetDeviceCount", lambda: lib.aclrtGetDeviceCount(N), ACL_INVALID_PARAM),
            ("aclInit (NULL config is valid)", lambda: lib.aclInit(N), ACL_REPEAT_INITIALIZE),
            ("aclDestroyTensor (NULL: nothing to destroy, as CANN)", lambda: lib.aclDestroyTensor(N), 0),
            ("aclCreateTensor viewDims", lambda: created(lib.aclCreateTensor(N, 1, 0, four, 0, 2, four, 1, dev.ptr)),
             False),
            ("aclCreateTensor stride (NULL: contiguous, as CANN)",
             lambda: created(lib.aclCreateTensor(four, 1, 0, N, 0, 2, four, 1, dev.ptr)), True),
            ("aclCreateTensor storageDims",
             lambda: created(lib.aclCreateTensor(four, 1, 0, four, 0, 2, N, 1, dev.ptr)), False),
            ("aclCreateTensor tensorData", lambda: created(lib.aclCreateTensor(four, 1, 0, four, 0, 2, four, 1, N)),
             False),
            ("aclSetAclOpExecutorRepeatable", lambda: lib.aclSetAclOpExecutorRepeatable(N), INNER_NULLPTR),
            ("aclDestroyAclOpExecutor", lambda: lib.aclDestroyAclOpExecutor(N), INNER_NULLPTR),
            ("xlossEmuDescribeTensor tensor", lambda: lib.xlossEmuDescribeTensor(N, b"x", desc), NULLPTR),
            ("xlossEmuDescribeTensor desc", lambda: lib.xlossEmuDescribeTensor(t, b"x", N), NULLPTR),
            ("xlossEmuDescribeTensor name (optional)", lambda: lib.xlossEmuDescribeTensor(t, N, desc), 0),
            ("xlossEmuCreateExecutor opName", lambda: make_exe(op=N), NULLPTR),
            ("xlossEmuCreateExecutor kernel", lambda: make_exe(k=N), NULLPTR),
            ("xlossEmuCreateExecutor operands", lambda: make_exe(n=1), NULLPTR),
            ("xlossEmuCreateExecutor plan", lambda: make_exe(plan_size=8), NULLPTR),
            ("xlossEmuCreateExecutor workspaceSizeOut", lambda: make_exe(ws_out=N), NULLPTR),
            ("xlossEmuCreateExecutor executor", lambda: make_exe(exe=N), NULLPTR),
            ("xlossEmuCreateExecutor nothing to pin, no plan (valid)", lambda: make_exe(), 0),
            ("xlossEmuRunExecutor opName", lambda: lib.xlossEmuRunExecutor(N, N, 0, ffi.cast("void *", 64), s.stream),
             NULLPTR),
            ("xlossEmuRunExecutor executor", lambda: lib.xlossEmuRunExecutor(b"op", N, 0, N, s.stream), NULLPTR),
            ("xlossEmuCast src", lambda: lib.xlossEmuCast(N, 0, hp, 0, 4), ACL_INVALID_PARAM),
            ("xlossEmuCast dst", lambda: lib.xlossEmuCast(hp, 0, N, 0, 4), ACL_INVALID_PARAM),
            ("xlossEmuCast both, n 0 (valid)", lambda: lib.xlossEmuCast(N, 0, N, 0, 0), 0),
            ("xlossEmuSetErrMsg fmt (ignored)", lambda: lib.xlossEmuSetErrMsg(N) or 0, 0),
            ("aclGetRecentErrMsg after it", lambda: abi.message() and 0, 0),
        ]
        for name in ("aclGetViewShape", "aclGetViewStrides", "aclGetStorageShape"):
            fn = lib.symbol(name)
            cases += [(f"{name} tensor", lambda fn=fn: fn(N, arr, cnt), NULLPTR),
                      (f"{name} array", lambda fn=fn: fn(t, N, cnt), NULLPTR),
                      (f"{name} count", lambda fn=fn: fn(t, arr, N), NULLPTR)]
        for name in ("aclGetViewOffset", "aclGetDataType", "aclGetFormat", "aclGetRawTensorAddr"):
            fn = lib.symbol(name)
            cases += [(f"{name} tensor", lambda fn=fn: fn(N, N), NULLPTR),
                      (f"{name} out", lambda fn=fn: fn(t, N), NULLPTR)]
        for op in OPS:
            cases.append((f"{op} executor", lambda op=op: abi.phase_two(op, N, 0, N, s.stream), NULLPTR))
        for label, call, expected in cases:
            got = call()
            assert got == expected, (label, got, abi.message())
            COUNTS["null pointers"] += 1


# ---- 2. negative and huge dims, dims overflowing int64 ----------------------------------------------

def _dim():
    return st.one_of(st.integers(0, 4), st.integers(-(2**63), -1), st.integers(2**31, 2**63 - 1),
                     st.sampled_from([2**62, 2**63 - 1, 3037000500, 2**32 + 1]))


def _stride():
    return st.one_of(st.integers(0, 6), st.integers(-(2**63), -1), st.integers(2**31, 2**63 - 1))


@budget(150)  # half of it went to test_ascend_loss_fuzz.py, which drives these descriptors into 8 more operators
@given(data=st.data())
def test_create_tensor_with_hostile_descriptors(emu, abi, data):
    """aclCreateTensor against the model; whatever it accepts reads back exactly through CANN's
    accessors and the emulator's description, and a phase one given it never crashes."""
    overflow = data.draw(st.booleans(), label="aim for an int64 overflow")
    if overflow:  # large dims with stride 0 keep the view inside a one-element storage
        dims = data.draw(st.lists(st.integers(2**16, 2**40), min_size=2, max_size=6), label="dims")
        if data.draw(st.booleans(), label="one zero dim (an empty view, whatever the others)"):
            dims[data.draw(st.integers(0, len(dims) - 1), label="zero at")] = 0
        strides = [0] * len(dims)
    else:
        nd = data.draw(st.one_of(st.integers(0, 4), st.integers(5, 10), st.sampled_from([64, 65])), label="ndim")
        dims = data.draw(st.lists(_dim(), min_size=nd, max_size=nd), label="dims")
        strides = data.draw(st.lists(_stride(), min_size=nd, max_size=nd), label="strides")
    dtype = data.draw(st.one_of(st.sampled_from(sorted(SIZED)), st.integers(-(2**31), 2**31 - 1)), label="dtype")
    fmt = data.draw(st.one_of(st.sampled_from(sorted(FORMATS)), st.integers(-5, 100)), label="format")
    offset = data.draw(st.one_of(st.integers(0, 8), st.integers(-(2**63), -1), st.integers(2**32, 2**63 - 1)),
                       label="offset")
    storage = data.draw(st.one_of(st.lists(st.integers(0, 8), max_size=3), st.lists(_dim(), max_size=3)),
                        label="storage dims")
    null_data = data.draw(st.booleans(), label="NULL data")
    with emu.session() as s:
        buf = s.malloc(64)
        data_ptr = abi.NULL if null_data else buf.ptr
        t = create(abi, dims, dtype, strides, offset, fmt, storage, data_ptr)
        expected = model_create(dims, dtype, strides, offset, fmt, storage, null_data)
        assert (t != abi.NULL) == expected, (dims, dtype, strides, offset, fmt, storage, null_data, abi.message())
        if t == abi.NULL:
            assert abi.message().startswith("aclCreateTensor:")
        else:
            try:
                _roundtrip(abi, t, dims, dtype, strides, offset, fmt, storage, data_ptr)
                d = op_args(s, BCE)
                d["self"] = t
                got, _, ex = abi.phase_one(BCE, *d.values())  # refused, or accepted if it happens to fit
                assert got in (0, INVALID), got
                if got == 0:
                    destroy_ok(abi, ex)
            finally:
                assert abi.lib.aclDestroyTensor(t) == 0
    if any(v < 0 for v in dims):
        COUNTS["negative dims"] += 1
    elif math.prod(dims) > INT64_MAX:
        COUNTS["dims overflowing int64"] += 1
    else:
        COUNTS["huge dims, strides or offsets"] += 1


def _roundtrip(abi, t, dims, dtype, strides, offset, fmt, storage, data_ptr):
    ffi, lib = abi.ffi, abi.lib
    for fn, want in ((lib.aclGetViewShape, dims), (lib.aclGetViewStrides, strides), (lib.aclGetStorageShape, storage)):
        arr, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
        assert fn(t, arr, n) == 0
        got = [arr[0][i] for i in range(n[0])]
        c_free(abi, arr[0])  # the caller releases the array (C: free)
        assert got == [int(v) for v in want]
    for fn, ctype, want in ((lib.aclGetViewOffset, "int64_t *", offset), (lib.aclGetDataType, "aclDataType *", dtype),
                            (lib.aclGetFormat, "aclFormat *", fmt)):
        out = ffi.new(ctype)
        assert fn(t, out) == 0 and out[0] == want
    addr = ffi.new("void **")
    assert lib.aclGetRawTensorAddr(t, addr) == 0 and addr[0] == data_ptr
    desc = ffi.new("xlossEmuTensorDesc *")
    got = lib.xlossEmuDescribeTensor(t, b"t", desc)
    if len(dims) > C.EMU_MAX_DIMS:
        assert got == INVALID and "dimensions" in abi.message()
    else:
        assert got == 0 and desc.numel == view_numel(dims) and desc.storageNumel == math.prod(storage)
        assert [desc.viewDims[i] for i in range(len(dims))] == list(dims) and desc.offset == offset
        assert desc.data == data_ptr and abi.ffi.string(desc.name) == b"t"


# ---- 3. views reaching outside their storage or their device block ----------------------------------

@budget(150)
@given(data=st.data())
def test_views_reaching_outside_storage_or_block(emu, abi, data):
    """Random strides, offsets and storage sizes over a real device block, as BCE's self or out:
    created or refused as modelled; refused in phase one (161002) when the storage leaves the
    block; on success only the output view's bytes change, to the right values."""
    dt = data.draw(st.sampled_from([np.float32, np.float16]), label="dtype")
    item = np.dtype(dt).itemsize
    code = C.ACL_DTYPES[np.dtype(dt)]
    block = data.draw(st.integers(4, 400), label="device block bytes")
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=2), label="shape"))
    strides = data.draw(st.lists(st.integers(0, 12), min_size=len(shape), max_size=len(shape)), label="strides")
    offset = data.draw(st.integers(0, 40), label="offset")
    storage = data.draw(st.one_of(st.just(block // item), st.integers(0, 200)), label="storage elements")
    role = data.draw(st.sampled_from(["self", "out"]), label="role")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    x = rng.uniform(0.05, 0.95, shape).astype(dt)
    y = (rng.random(shape) > 0.5).astype(dt)
    n = view_numel(shape)
    with emu.session() as s:
        fill = np.full(block, 0x5A, np.uint8)
        idx = element_indices(shape, strides, offset)
        if role == "self" and n and reach(shape, strides, offset) < block // item:
            fill.view(np.uint8)[: (block // item) * item].view(dt)[idx] = x.reshape(-1)
        buf = s.upload(fill)
        t = create(abi, shape, code, strides, offset, C.ACL_FORMAT_ND, [storage], buf.ptr)
        made = model_create(shape, code, strides, offset, C.ACL_FORMAT_ND, [storage], False)
        assert (t != abi.NULL) == made, (shape, strides, offset, storage, abi.message())
        COUNTS["views reaching outside storage or block"] += 1
        if t == abi.NULL:
            return
        try:
            d = op_args(s, BCE)
            d["self"] = t if role == "self" else s.put(x)[0]
            d["target"] = s.put(y)[0]
            d["weightOptional"] = abi.NULL
            out_t, out_buf = (t, buf) if role == "out" else s.empty(shape, dt)
            d["out"] = out_t
            before = snapshot(s)
            got, ws, ex = abi.phase_one(BCE, *d.values())
            in_block = n == 0 or storage * item <= block
            assert got == (0 if in_block else INVALID), (got, abi.message())
            if got:
                assert "device memory" in abi.message()
                assert_only_written(s, before)
                return
            assert abi.phase_two(BCE, abi.NULL, 0, ex, s.stream) == 0, abi.message()
            if role == "out":
                allowed = byte_mask(block, shape, strides, offset, item)
                got_vals = s._read(buf, (block,), np.uint8)[: (block // item) * item].view(dt)[idx] if n else None
            else:
                allowed = np.ones(out_buf.nbytes, bool)
                got_vals = s._read(out_buf, (n,), dt) if n else None
            assert_only_written(s, before, {id(out_buf): allowed})
            if n and len(set(idx.tolist())) == n:  # no two elements share a place: every value is checkable
                x32, y32 = x.astype(np.float32).reshape(-1), y.astype(np.float32).reshape(-1)
                g = np.float32(1.5)  # op_args' upstream gradient
                want = (g * ((x32 - y32) / np.maximum(x32 * (np.float32(1) - x32), np.float32(1e-12)))).astype(dt)
                np.testing.assert_allclose(got_vals.astype(np.float64), want.astype(np.float64), rtol=2e-3)
        finally:
            abi.lib.aclDestroyTensor(t)


# ---- 4. misaligned device pointers -------------------------------------------------------------------

@budget(120)
@given(data=st.data())
def test_misaligned_device_pointers(emu, abi, data):
    k = data.draw(st.one_of(st.integers(1, 31), st.just(0), st.integers(33, 63)), label="byte offset")
    where = data.draw(st.sampled_from(["tensor", "workspace", "aclrtFree", "aclrtMemcpy"]), label="where")
    misaligned = k % 32 != 0
    with emu.session() as s:
        if where == "tensor":
            base = s.upload(np.full(128, 0.5, np.float32))
            d = op_args(s, BCE)
            name = data.draw(st.sampled_from(["self", "target", "out", "gradOutput"]), label="operand")
            shape = (3, 5) if name != "gradOutput" else ()
            t = create(abi, shape, C.ACL_FLOAT, support._contig(shape), 0, C.ACL_FORMAT_ND, [math.prod(shape)],
                       ptr_add(abi, base.ptr, k))
            try:
                d[name] = t
                before = snapshot(s)
                got, _, ex = abi.phase_one(BCE, *d.values())
                assert got == (INVALID if misaligned else 0), (k, name, got, abi.message())
                if misaligned:
                    assert "aligned" in abi.message()
                else:
                    destroy_ok(abi, ex)
                assert_only_written(s, before)
            finally:
                abi.lib.aclDestroyTensor(t)
        elif where == "workspace":
            op, kw = data.draw(st.sampled_from([(FLCE, {}), (FOCAL, {"reduction": 1})]), label="op")
            got, need, ex = abi.phase_one(op, *op_args(s, op, **kw).values())
            assert got == 0 and need > 0
            wsb = s.malloc(need + 64)
            before = snapshot(s)
            got = abi.phase_two(op, ptr_add(abi, wsb.ptr, k), need, ex, s.stream)
            assert got == (INVALID if misaligned else 0), (k, got, abi.message())
            if misaligned:
                assert_only_written(s, before, {id(wsb): np.ones(wsb.nbytes, bool)})
                assert abi.phase_two(op, wsb.ptr, need, ex, s.stream) == INNER  # spent by the failed run
        elif where == "aclrtFree":
            p = abi.ffi.new("void **")
            assert abi.lib.aclrtMalloc(p, 96, 0) == 0
            assert abi.lib.aclrtFree(ptr_add(abi, p[0], k)) == (ACL_INVALID_PARAM if k else 0)
            if k:
                assert abi.lib.aclrtFree(p[0]) == 0
        else:  # copies need no alignment, only to stay inside the block
            dev = s.malloc(96)
            host = np.arange(24, dtype=np.float32)
            hp = abi.ffi.cast("void *", host.ctypes.data)
            count = data.draw(st.integers(0, 96), label="count")
            got = abi.lib.aclrtMemcpy(ptr_add(abi, dev.ptr, k), 96, hp, count, C.ACL_MEMCPY_HOST_TO_DEVICE)
            assert got == (0 if k + count <= 96 or count == 0 else ACL_INVALID_PARAM), (k, count, got)
    COUNTS["misaligned device pointers"] += 1


# ---- 5. dtype codes -----------------------------------------------------------------------------------

#: operand -> dtype codes the operator accepts there, the other operands being op_args' defaults
ACCEPTED = {
    **{(op, n): FLOATS for op in (FOCAL, "aclnnXlossSigmoidFocalLossBackward", BCE)
       for n in ("self", "target", "weightOptional", "gradOutput", "out") if op != FOCAL or n != "gradOutput"},
    **{(NLL, n): {0} for n in ("gradOutput", "self", "weight", "totalWeight")}, (NLL, "target"): {3, 4, 9},
    (NLL, "out"): FLOATS,  # any float type self casts to (ops-nn CheckDtypeValid)
    **{(FLCE, n): {1} for n in ("input", "weight", "inputGradOut", "weightGradOut")},
    **{(FLCE, n): {0} for n in ("grad", "logitsMaxOptional", "sumExpLogitsOptional")},
    (FLCE, "targetMask"): {4}, (FLCE, "maskedTarget"): {3, 9},
}


@budget(200)
@given(data=st.data())
def test_dtype_codes(emu, abi, data):
    op, name = data.draw(st.sampled_from(sorted(ACCEPTED)), label="operand")
    code = data.draw(st.one_of(st.sampled_from(sorted(SIZED) + [13, 29, 30, -1, 5, 99]),
                               st.integers(-(2**31), 2**31 - 1)), label="dtype code")
    with emu.session() as s:
        d = op_args(s, op)
        desc = abi.ffi.new("xlossEmuTensorDesc *")
        assert abi.lib.xlossEmuDescribeTensor(d[name], b"x", desc) == 0
        shape = [desc.viewDims[i] for i in range(desc.viewDimsNum)]
        buf = s.malloc(max(1, math.prod(shape)) * 16)
        t = create(abi, shape, code, support._contig(shape), 0, C.ACL_FORMAT_ND, shape, buf.ptr)
        assert (t != abi.NULL) == (code in SIZED), code
        if t != abi.NULL:
            try:
                d[name] = t
                got, _, ex = abi.phase_one(op, *d.values())
                ok = code in ACCEPTED[op, name]
                assert got == (0 if ok else INVALID), (op, name, code, got, abi.message())
                if ok:
                    destroy_ok(abi, ex)
                elif (op, name, code) == (FLCE, "targetMask", C.ACL_BOOL):
                    # BOOL is a valid mask dtype, but it wants one element per token, not the packed shape
                    assert "targetMask must have shape" in abi.message()
                else:
                    assert "dtype" in abi.message()
            finally:
                abi.lib.aclDestroyTensor(t)
    COUNTS["dtype codes"] += 1


# ---- 6. mismatched shapes -----------------------------------------------------------------------------

def _bc(a, b) -> bool:
    return len(a) <= len(b) and all(x == 1 or x == y for x, y in zip(reversed(a), reversed(b)))


def model_shapes(op, sh: dict, reduction: int, mask_packed: bool = True) -> bool:
    """Do these operand shapes pass phase one? (README #21, #22, #24, as a model)."""
    if any(len(v) > 8 for v in sh.values() if v is not None):
        return False
    one = lambda v: v in ((), (1,))  # noqa: E731
    if op in (FOCAL, "aclnnXlossSigmoidFocalLossBackward", BCE):
        S = sh["self"]
        if op == BCE and math.prod(S) == 0:
            return True  # ops-nn CheckShape: an empty self passes whatever the other shapes
        ok = _bc(sh["target"], S) and (sh.get("weightOptional") is None or _bc(sh["weightOptional"], S))
        if op != FOCAL:
            ok = ok and _bc(sh["gradOutput"], S) and sh["out"] == S
        else:
            ok = ok and (sh["out"] == S if reduction == 0 else one(sh["out"]))
        return ok
    if op == NLL:
        s_ = sh["self"]
        if len(s_) not in (1, 2):
            return False
        two = len(s_) == 2
        t_ = sh["target"]  # ops-nn CheckShape: (self 1-D, target 0-D), or target 1-D of self.dim(0)
        ok = (not two and t_ == ()) or t_ == (s_[0],)
        ok = ok and (sh["gradOutput"] == (s_[0],) if reduction == 0 and two else one(sh["gradOutput"]))
        return ok and sh["weight"] == (s_[-1],) and math.prod(sh["totalWeight"]) == 1 and sh["out"] == s_
    g, x, w = sh["grad"], sh["input"], sh["weight"]
    if len(g) != 1 or len(x) != 2 or len(w) != 2:
        return False
    bt, h, v = g[0], x[1], w[0]
    want = {"input": (bt, h), "weight": (v, h), "maskedTarget": (bt,), "logitsMaxOptional": (bt,),
            "sumExpLogitsOptional": (bt,), "softmaxOptional": (bt, v), "inputGradOut": (bt, h), "weightGradOut": (v, h)}
    ok = all(sh.get(k) is None or sh[k] == want[k] for k in want)
    m = sh["targetMask"]
    ok = ok and (sh.get("softmaxOptional") is None or v >= 128)  # the high-performance mode's minimum shard
    return ok and (len(m) == 1 and m[0] * 8 >= bt if mask_packed else m == (bt,))


@budget(250)
@given(data=st.data())
def test_mismatched_shapes(emu, abi, data):
    op = data.draw(st.sampled_from(OPS), label="op")
    reduction = data.draw(st.sampled_from([0, 1, 2]), label="reduction")
    with emu.session() as s:
        d = op_args(s, op, reduction=reduction, mode=data.draw(st.sampled_from(["recompute", "softmax"])))
        shapes = {}
        desc = abi.ffi.new("xlossEmuTensorDesc *")
        for k, v in d.items():
            if isinstance(v, (int, float)):
                continue
            if v == abi.NULL:
                shapes[k] = None
            else:
                assert abi.lib.xlossEmuDescribeTensor(v, b"x", desc) == 0
                shapes[k] = tuple(desc.viewDims[i] for i in range(desc.viewDimsNum))
        names = [k for k, v in shapes.items() if v is not None]
        name = data.draw(st.sampled_from(names), label="operand")
        new = tuple(data.draw(st.one_of(st.lists(st.integers(0, 7), max_size=3),
                                        st.lists(st.integers(1, 2), min_size=9, max_size=10)), label="shape"))
        assert abi.lib.xlossEmuDescribeTensor(d[name], b"x", desc) == 0
        buf = s.malloc(max(1, math.prod(new)) * 8)
        t = create(abi, new, desc.dataType, support._contig(new), 0, C.ACL_FORMAT_ND, new, buf.ptr)
        assert t != abi.NULL
        try:
            d[name] = t
            shapes[name] = new
            got, _, ex = abi.phase_one(op, *d.values())
            ok = model_shapes(op, shapes, reduction)
            assert got == (0 if ok else INVALID), (op, reduction, name, new, got, abi.message())
            if ok:
                destroy_ok(abi, ex)
        finally:
            abi.lib.aclDestroyTensor(t)
    COUNTS["mismatched shapes"] += 1


# ---- 7. destroyed and reused executors and tensors (a state machine against a model) -----------------

class Lifecycle(RuleBasedStateMachine):
    """BCE operand sets and executors, created, destroyed, run, reused and freed in any order. The
    model says what each call must return; the result is checked whenever a run succeeds."""

    opsets = Bundle("opsets")
    executors = Bundle("executors")

    def __init__(self):
        super().__init__()
        self.emu = support.emulator_backend()
        self.abi = support.Abi(self.emu)
        self.baseline = self.abi.live()
        self.base_tensors = self.abi.live(C.LIVE_TENSORS)
        self.base_executors = self.abi.live(C.LIVE_EXECUTORS)
        self.session = self.emu.session().__enter__()
        self.live_tensors = self.live_executors = 0
        self.made: list = []     # operand sets
        self.handles: list = []  # executors

    def _check(self, got, want, what):
        assert got == want, (what, got, want, self.abi.message())
        COUNTS["destroyed or reused executors and tensors"] += 1

    @rule(target=opsets, seed=st.integers(0, 2**16))
    def make_operands(self, seed):
        s, abi = self.session, self.abi
        rng = np.random.default_rng(seed)
        x = rng.uniform(0.05, 0.95, (2, 3)).astype(np.float32)
        y = (rng.random((2, 3)) > 0.5).astype(np.float32)
        bufs = [s.upload(np.asarray(2.0, np.float32)), s.upload(x), s.upload(y), s.malloc(24)]
        ts = [abi.create(b, sh, C.ACL_FLOAT) for b, sh in zip(bufs, [(), (2, 3), (2, 3), (2, 3)])]
        assert all(t != abi.NULL for t in ts)
        self.live_tensors += 4
        o = {"tensors": ts, "alive": [True] * 4, "bufs": bufs, "freed": False,
             "want": (np.float32(2.0) * (x - y) / np.maximum(x * (1 - x), np.float32(1e-12))).astype(np.float32)}
        self.made.append(o)
        return o

    @rule(o=opsets, which=st.integers(0, 3))
    def destroy_tensor(self, o, which):
        got = self.abi.lib.aclDestroyTensor(o["tensors"][which])
        self._check(got, 0 if o["alive"][which] else INVALID, "aclDestroyTensor")
        if o["alive"][which]:
            o["alive"][which] = False
            self.live_tensors -= 1

    @rule(target=executors, o=opsets)
    def phase_one(self, o):
        g, x, y, out = o["tensors"]
        got, _, ex = self.abi.phase_one(BCE, g, x, y, self.abi.NULL, 0, out)
        self._check(got, 0 if all(o["alive"]) and not o["freed"] else INVALID, "phase one")
        h = {"ex": ex if got == 0 else None, "state": "fresh" if got == 0 else "none", "o": o}
        if got == 0:
            # the quarantine keeps released executors' addresses out of reuse
            assert all(old["ex"] != ex for old in self.handles if old["ex"] is not None)
            self.live_executors += 1
            self.handles.append(h)
        return h

    @rule(h=executors)
    def set_repeatable(self, h):
        if h["ex"] is None:
            return
        live = h["state"] in ("fresh", "repeatable")
        self._check(self.abi.lib.aclSetAclOpExecutorRepeatable(h["ex"]), 0 if live else INNER, "repeatable")
        if live:
            h["state"] = "repeatable"

    @rule(h=executors, wrong_op=st.booleans())
    def run(self, h, wrong_op):
        if h["ex"] is None:
            return
        s = self.session
        live = h["state"] in ("fresh", "repeatable")
        got = self.abi.phase_two(NLL if wrong_op else BCE, self.abi.NULL, 0, h["ex"], s.stream)
        if not live:  # released: an executor the runtime does not know
            self._check(got, INNER, "a released executor")
            return
        if wrong_op:  # another operator's executor is refused without being spent
            self._check(got, INVALID, "run by another operator")
            return
        self._check(got, RUNTIME if h["o"]["freed"] else 0, "run")
        if got == 0:  # the executor holds its own copy of the operands: destroyed tensors do not matter
            np.testing.assert_allclose(s._read(h["o"]["bufs"][3], (2, 3), np.float32), h["o"]["want"], rtol=1e-6)
        if h["state"] == "fresh":
            h["state"] = "spent"
            self.live_executors -= 1

    @rule(h=consumes(executors))
    def destroy_executor(self, h):
        if h["ex"] is None:
            return
        live = h["state"] in ("fresh", "repeatable")
        self._check(self.abi.lib.aclDestroyAclOpExecutor(h["ex"]), 0 if live else INNER, "destroy executor")
        if live:
            self.live_executors -= 1
        h["state"] = "destroyed"

    @rule(o=opsets)
    def free_input_memory(self, o):
        if o["freed"]:
            self._check(self.abi.lib.aclrtFree(o["bufs"][1].ptr), ACL_INVALID_PARAM, "aclrtFree twice")
            return
        self._check(self.abi.lib.aclrtFree(o["bufs"][1].ptr), 0, "aclrtFree")
        self.session._buffers.remove(o["bufs"][1])
        o["freed"] = True

    @invariant()
    def live_counts_match_the_model(self):
        assert self.abi.live(C.LIVE_TENSORS) - self.base_tensors == self.live_tensors
        assert self.abi.live(C.LIVE_EXECUTORS) - self.base_executors == self.live_executors

    def teardown(self):
        for h in self.handles:
            if h["state"] in ("fresh", "repeatable"):
                destroy_ok(self.abi, h["ex"])
        for o in self.made:
            for t, alive in zip(o["tensors"], o["alive"]):
                if alive:
                    assert self.abi.lib.aclDestroyTensor(t) == 0
        self.session.__exit__(None, None, None)
        assert self.abi.live() == self.baseline


def test_destroyed_and_reused_executors_and_tensors(emu):
    Lifecycle.TestCase.settings = settings(max_examples=max(5, int(40 * SCALE)), stateful_step_count=30,
                                           deadline=None, database=None, suppress_health_check=list(HealthCheck))
    Lifecycle.TestCase().runTest()


# ---- 8. zero and too-small workspaces ------------------------------------------------------------------

@budget(150)
@given(data=st.data())
def test_workspaces(emu, abi, data):
    op, kw = data.draw(st.sampled_from([(FLCE, {"mode": "recompute"}), (FLCE, {"mode": "softmax"}),
                                        (FOCAL, {"reduction": 1}), (FOCAL, {"reduction": 2}), (BCE, {}),
                                        (NLL, {})]), label="op")
    # every draw before any executor exists: hypothesis may stop a test at a draw
    size_choice = data.draw(st.one_of(st.sampled_from(["0", "need", "need-1", "need+1"]), st.integers(0, 256)),
                            label="workspaceSize")
    kind = data.draw(st.sampled_from(["none", "exact", "smaller block", "larger block", "host", "misaligned"]),
                     label="workspace")
    with emu.session() as s:
        got, need, ex = abi.phase_one(op, *op_args(s, op, **kw).values())
        assert got == 0 and (need > 0) == (op in (FLCE, FOCAL)) and need % 32 == 0
        size = {"0": 0, "need": need, "need-1": max(need - 1, 0), "need+1": need + 1}.get(size_choice, size_choice)
        if isinstance(size_choice, int):
            size = size_choice * (need + 256) // 256
        host = np.zeros(max(need, 1) + 64, np.uint8)
        if kind == "none":
            ptr, block = abi.NULL, 0
        elif kind == "host":
            ptr, block = abi.ffi.cast("void *", host.ctypes.data), 0
        else:
            block = {"exact": max(need, 1), "smaller block": max(need // 2, 1), "larger block": need + 64,
                     "misaligned": need + 64}[kind]
            ptr = s.malloc(block).ptr
            if kind == "misaligned":
                ptr = ptr_add(abi, ptr, 8)
        if size < need:
            want = INVALID
        elif need and kind == "none":
            want = NULLPTR
        elif need and kind in ("host", "misaligned", "smaller block") and not (kind == "smaller block" and
                                                                               block >= need):
            want = INVALID
        else:
            want = 0
        outs = {id(b): np.ones(b.nbytes, bool) for b in s._buffers[-3:]}  # workspace + outputs may change
        if op == FLCE and kw.get("mode") == "softmax":  # CANN's high-performance mode forms G in softmaxOptional
            outs[id(s._buffers[-4])] = np.ones(s._buffers[-4].nbytes, bool)
        before = snapshot(s)
        got = abi.phase_two(op, ptr, size, ex, s.stream)
        assert got == want, (op, kw, need, size, kind, got, abi.message())
        if got:
            ws_buf = {id(s._buffers[-1]): np.ones(s._buffers[-1].nbytes, bool)} if kind != "none" and kind != "host" \
                else {}
            assert_only_written(s, before, ws_buf)  # outputs untouched on error
            assert abi.phase_two(op, ptr, size, ex, s.stream) == INNER  # a failed run spends the executor
        else:
            assert_only_written(s, before, outs)
    COUNTS["zero or too-small workspaces"] += 1


# ---- 9. device data that phase two must refuse before writing anything ---------------------------------

@budget(150)
@given(data=st.data())
def test_nll_targets_are_checked_before_any_write(emu, abi, data):
    n, c = data.draw(st.integers(0, 6), label="N"), data.draw(st.integers(1, 5), label="C")
    tdt = data.draw(st.sampled_from([np.int64, np.int32, np.uint8]), label="target dtype")
    ignore = data.draw(st.one_of(st.just(-100), st.integers(-3, c + 2)), label="ignoreIndex")
    lo = 0 if tdt == np.uint8 else -150
    target = np.array(data.draw(st.lists(st.integers(lo, min(c + 3, 255)), min_size=n, max_size=n), label="target"),
                      dtype=tdt)
    reduction = data.draw(st.sampled_from([0, 1, 2]), label="reduction")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    w = rng.uniform(0.5, 2.0, c).astype(np.float32)
    g = rng.uniform(-2, 2, n if reduction == 0 else 1).astype(np.float32)
    tw = np.array([rng.uniform(0.5, 3.0)], np.float32)
    with emu.session() as s:
        out_buf = s.upload(np.full((n, c), 7.0, np.float32))
        args = [s.put(g)[0], s.put(-rng.random((n, c)).astype(np.float32))[0], s.put(target)[0], s.put(w)[0],
                reduction, ignore, s.put(tw)[0], s.tensor(out_buf, (n, c), np.float32)]
        got, _, ex = abi.phase_one(NLL, *args)
        assert got == 0, abi.message()
        before = snapshot(s)
        bad = [(i, int(t)) for i, t in enumerate(target.astype(np.int64)) if t != ignore and not 0 <= t < c]
        got = abi.phase_two(NLL, abi.NULL, 0, ex, s.stream)
        if bad:
            assert got == RUNTIME and f"target[{bad[0][0]}] = {bad[0][1]}" in abi.message()
            assert_only_written(s, before)
        else:
            assert got == 0, abi.message()
            want = ref.nll_loss_grad(g if reduction == 0 else float(g[0]), np.zeros((n, c)), target, weight=w,
                                     reduction=["none", "mean", "sum"][reduction], ignore_index=ignore,
                                     total_weight=float(tw[0]))
            np.testing.assert_allclose(s._read(out_buf, (n, c), np.float32), want, rtol=1e-6, atol=0)
    COUNTS["device data refused in phase two"] += 1


@budget(100)
@given(data=st.data())
def test_flce_masked_targets_are_never_used_out_of_range(emu, abi, data):
    """CANN does not check maskedTarget's range (the adapter does): the operator runs, an
    out-of-range target subtracts nothing (as if the token were masked) and is never an index."""
    bt, h, v = data.draw(st.integers(0, 6), label="BT"), data.draw(st.integers(0, 4), label="H"), \
        data.draw(st.integers(1, 5), label="V")
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=bt, max_size=bt), label="mask"), bool)
    mt = np.array(data.draw(st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-2, v + 1), min_size=bt,
                                     max_size=bt), label="maskedTarget"), np.int64)
    packed = data.draw(st.booleans(), label="bit-packed")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    grad = rng.uniform(-1, 1, bt).astype(np.float32)
    x, w = rng.uniform(-1, 1, (bt, h)).astype(np.float16), rng.uniform(-1, 1, (v, h)).astype(np.float16)
    lmax, sexp = rng.uniform(-1, 1, bt).astype(np.float32), rng.uniform(1, 3, bt).astype(np.float32)
    outs = []
    with emu.session() as s:
        for m, t in ((mask, mt), (mask | ~((mt >= 0) & (mt < v)), np.where((mt >= 0) & (mt < v), mt, 0))):
            ig = s.upload(np.full((bt, h), 7, np.float16))
            wg = s.upload(np.full((v, h), 7, np.float16))
            args = [s.put(grad)[0], s.put(x)[0], s.put(w)[0],
                    s.put(np.packbits(m, bitorder="little") if packed else m)[0], s.put(t)[0], 0.0,
                    s.put(lmax)[0], s.put(sexp)[0], abi.NULL, s.tensor(ig, (bt, h), np.float16),
                    s.tensor(wg, (v, h), np.float16)]
            got, need, ex = abi.phase_one(FLCE, *args)
            assert got == 0, abi.message()
            wsb = s.malloc(max(need, 1))
            assert abi.phase_two(FLCE, wsb.ptr if need else abi.NULL, need, ex, s.stream) == 0, abi.message()
            outs.append((s._read(ig, (bt, h), np.float16), s._read(wg, (v, h), np.float16)))
    # out-of-range targets behave exactly like masked tokens
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    COUNTS["out-of-range FLCE targets never indexed"] += 1


# ---- 10. hostile descriptors at the executor interface (what an operator library passes) -------------

def model_descriptor(d: dict, block: int) -> bool:
    """Does xlossEmuCreateExecutor accept this operand descriptor? (xloss_aclnn_emu.h)"""
    if d["dtype"] not in SIZED or d["ndim"] > 8 or d["offset"] < 0 or d["storage"] < 0:
        return False
    dims, strides = d["dims"][: d["ndim"]], d["strides"][: d["ndim"]]
    if any(v < 0 for v in dims) or any(v < 0 for v in strides):
        return False
    n = view_numel(dims)
    if n > INT64_MAX or n != d["numel"] or d["storage"] * SIZED[d["dtype"]] > INT64_MAX:
        return False
    if n == 0:
        return True
    if reach(dims, strides, d["offset"]) >= d["storage"]:
        return False
    return d["data"] == "block" and d["storage"] * SIZED[d["dtype"]] <= block


@budget(75)  # half of it went to test_ascend_loss_fuzz.py (the same time over more operators)
@given(data=st.data())
def test_executor_interface_with_hostile_descriptors(emu, abi, data):
    """Operand descriptors an operator library might get wrong: refused (161002) unless the view
    lies in its storage and the storage in live device memory; an accepted executor runs the
    library's kernel (a Python callback here) once, with its plan intact."""
    ffi, lib = abi.ffi, abi.lib
    nops = data.draw(st.one_of(st.integers(0, 3), st.just(17)), label="operands")
    plan_size = data.draw(st.one_of(st.integers(0, 64), st.just(C.EMU_MAX_PLAN + 1)), label="plan bytes")
    block = 256
    with emu.session() as s:
        dev = s.malloc(block)
        host = np.zeros(64, np.float32)
        descs = ffi.new("xlossEmuTensorDesc[]", max(nops, 1))
        ok = nops <= C.EMU_MAX_OPERANDS and plan_size <= C.EMU_MAX_PLAN
        for k in range(min(nops, 3)):  # past XLOSS_EMU_MAX_OPERANDS the count alone is refused
            nd = data.draw(st.one_of(st.integers(0, 3), st.integers(9, 12)), label="ndim")
            dims = data.draw(st.lists(st.one_of(st.integers(0, 4), st.integers(-3, -1), st.integers(2**40, 2**62)),
                                      min_size=8, max_size=8), label="dims")
            d = {"dtype": data.draw(st.one_of(st.sampled_from([0, 1, 9, 12]), st.integers(-5, 40)), label="dtype"),
                 "ndim": nd, "dims": dims,
                 "strides": data.draw(st.lists(st.one_of(st.integers(0, 5), st.integers(-2, -1)), min_size=8,
                                               max_size=8), label="strides"),
                 "offset": data.draw(st.one_of(st.integers(0, 10), st.integers(-3, -1)), label="offset"),
                 "storage": data.draw(st.one_of(st.integers(0, 80), st.just(2**62)), label="storage elements"),
                 "data": data.draw(st.sampled_from(["block", "misaligned", "host", "NULL"]), label="data")}
            d["numel"] = view_numel(d["dims"][: min(nd, 8)]) + data.draw(st.sampled_from([0, 0, 0, 1]), label="bad n")
            d["numel"] = max(min(d["numel"], INT64_MAX), -(2**63))  # what an int64 field can hold
            x = descs[k]
            x.dataType, x.format, x.viewDimsNum = d["dtype"], 2, nd
            for i in range(8):
                x.viewDims[i], x.strides[i] = d["dims"][i], d["strides"][i]
            x.offset, x.numel, x.storageNumel = d["offset"], d["numel"], d["storage"]
            x.data = {"block": dev.ptr, "misaligned": ptr_add(abi, dev.ptr, 4),
                      "host": ffi.cast("void *", host.ctypes.data), "NULL": ffi.NULL}[d["data"]]
            ok = ok and model_descriptor(d, block)
        plan = bytes(range(256))[:plan_size] if plan_size <= 256 else bytes(plan_size)
        seen = []

        @ffi.callback("xlossEmuKernel")
        def kernel(p, workspace, size):
            seen.append((ffi.buffer(p, min(plan_size, 256))[:] if plan_size else b"", workspace == ffi.NULL, size))
            return 0

        ws, exe = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
        got = lib.xlossEmuCreateExecutor(b"fuzzOp", descs, nops, plan if plan_size else ffi.NULL, plan_size, kernel, 0,
                                         ws, exe)
        assert got == (0 if ok else INVALID), (nops, plan_size, got, abi.message())
        if got == 0:
            assert lib.xlossEmuRunExecutor(b"otherOp", abi.NULL, 0, exe[0], s.stream) == INVALID  # not spent
            assert lib.xlossEmuRunExecutor(b"fuzzOp", abi.NULL, 0, exe[0], s.stream) == 0
            assert seen == [(plan[:256], True, 0)]
            assert lib.xlossEmuRunExecutor(b"fuzzOp", abi.NULL, 0, exe[0], s.stream) == INNER  # single use: unknown now
        else:
            assert exe[0] == abi.NULL and ws[0] == 0 and not seen
    COUNTS["executor-interface descriptors"] += 1


# ---- 11. aliased operands and workspaces ---------------------------------------------------------------

def _extent(view: dict) -> tuple[int, int]:
    """[lo, hi) bytes of a view inside its block (empty: (0, 0))."""
    if view_numel(view["shape"]) == 0:
        return 0, 0
    last = reach(view["shape"], view["strides"], view["offset"])
    return view["base"] + view["offset"] * view["item"], view["base"] + (last + 1) * view["item"]


def _overlap(a, b) -> bool:
    (alo, ahi), (blo, bhi) = a, b
    return alo < ahi and blo < bhi and alo < bhi and blo < ahi


@budget(150)
@given(data=st.data())
def test_aliased_operands_and_workspaces(emu, abi, data):
    """Operands placed at random inside one shared device block. An output overlapping the indices
    a kernel validates and then uses (NLL's target, FLCE's targetMask/maskedTarget) is refused in
    phase one, a workspace sharing memory with an operand in phase two (161002, nothing written);
    any other aliasing may give any values but never a write outside the block's views."""
    op = data.draw(st.sampled_from([NLL, FLCE]), label="op")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    block = 2048
    with emu.session() as s:
        host = np.zeros(block, np.uint8)
        buf = s.upload(host)
        views, tensors = {}, {}

        # every draw before any tensor or executor exists: hypothesis may stop a test at a draw
        fractions = data.draw(st.lists(st.floats(0, 1), min_size=11, max_size=11), label="placements")
        ws_shared = data.draw(st.booleans(), label="workspace inside the shared block")
        ws_frac = data.draw(st.floats(0, 1), label="workspace place")
        COUNTS["aliased operands and workspaces"] += 1

        def place(name, arr, code, dtype):
            n = arr.size
            item = np.dtype(dtype).itemsize
            base = int(fractions[len(views)] * ((block - max(n, 1) * item) // 32)) * 32  # 32-byte aligned
            host[base:base + n * item] = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
            views[name] = dict(shape=arr.shape, strides=support._contig(arr.shape), offset=0, base=base, item=item)
            tensors[name] = create(abi, arr.shape, code, support._contig(arr.shape), 0, C.ACL_FORMAT_ND, [max(n, 1)],
                                   ptr_add(abi, buf.ptr, base))

        if op == NLL:
            n, c = 5, 4
            place("gradOutput", rng.uniform(-1, 1, n).astype(np.float32), C.ACL_FLOAT, np.float32)
            place("self", -rng.random((n, c)).astype(np.float32), C.ACL_FLOAT, np.float32)
            place("target", rng.integers(0, c, n).astype(np.int64), C.ACL_INT64, np.int64)
            place("weight", np.ones(c, np.float32), C.ACL_FLOAT, np.float32)
            place("totalWeight", np.ones(1, np.float32), C.ACL_FLOAT, np.float32)
            place("out", np.zeros((n, c), np.float32), C.ACL_FLOAT, np.float32)
            outs, idx = ["out"], ["target"]
            order = ["gradOutput", "self", "target", "weight", 0, -100, "totalWeight", "out"]
        else:
            bt, h, v = 6, 4, 5
            place("grad", rng.uniform(-1, 1, bt).astype(np.float32), C.ACL_FLOAT, np.float32)
            place("input", rng.uniform(-1, 1, (bt, h)).astype(np.float16), C.ACL_FLOAT16, np.float16)
            place("weight", rng.uniform(-1, 1, (v, h)).astype(np.float16), C.ACL_FLOAT16, np.float16)
            place("targetMask", np.zeros(bt, bool), C.ACL_BOOL, np.bool_)
            place("maskedTarget", rng.integers(0, v, bt).astype(np.int64), C.ACL_INT64, np.int64)
            place("logitsMaxOptional", np.zeros(bt, np.float32), C.ACL_FLOAT, np.float32)  # recompute mode:
            place("sumExpLogitsOptional", np.full(bt, 5.0, np.float32), C.ACL_FLOAT, np.float32)  # V < 128
            place("inputGradOut", np.zeros((bt, h), np.float16), C.ACL_FLOAT16, np.float16)
            place("weightGradOut", np.zeros((v, h), np.float16), C.ACL_FLOAT16, np.float16)
            outs, idx = ["inputGradOut", "weightGradOut"], ["targetMask", "maskedTarget"]
            order = ["grad", "input", "weight", "targetMask", "maskedTarget", 0.0, "logitsMaxOptional",
                     "sumExpLogitsOptional", None, "inputGradOut", "weightGradOut"]
        s.rt.call("aclrtMemcpy", buf.ptr, block, abi.ffi.cast("void *", host.ctypes.data), block,
                  C.ACL_MEMCPY_HOST_TO_DEVICE)
        try:
            args = [tensors[a] if isinstance(a, str) else (abi.NULL if a is None else a) for a in order]
            got, need, ex = abi.phase_one(op, *args)
            refused = any(_overlap(_extent(views[o]), _extent(views[i])) for o in outs for i in idx)
            assert got == (INVALID if refused else 0), (op, got, abi.message())
            if refused:
                assert "overlaps" in abi.message()
                return
            # later placements may have overwritten earlier operands: the indices are what the block holds now
            def now(name, dtype):
                vw = views[name]
                n = view_numel(vw["shape"])
                return host[vw["base"]:vw["base"] + n * vw["item"]].view(dtype)

            if op == NLL:
                bad_data = any(t != -100 and not 0 <= t < 4 for t in now("target", np.int64))
            else:  # CANN does not check maskedTarget: no bad data for FLCE (never used out of range)
                bad_data = False
            ws_ptr, ws_range = abi.NULL, None
            if need:  # the workspace: its own block, or a region of the shared one
                if ws_shared and need <= block:
                    start = int(ws_frac * ((block - need) // 32)) * 32
                    ws_ptr, ws_range = ptr_add(abi, buf.ptr, start), (start, start + need)
                else:
                    ws_ptr = s.malloc(need).ptr
            before = snapshot(s)
            got = abi.phase_two(op, ws_ptr, need, ex, s.stream)
            # a workspace inside the block overlaps some operand's storage (each spans its own region)
            ws_overlaps = ws_range is not None and any(
                _overlap(ws_range, (vw["base"], vw["base"] + max(view_numel(vw["shape"]), 1) * vw["item"]))
                for vw in views.values())
            want = INVALID if ws_overlaps else RUNTIME if bad_data else 0
            assert got == want, (got, want, abi.message())
            if got:
                assert ("workspace overlaps" if ws_overlaps else "outside") in abi.message()
                assert_only_written(s, before)
            else:
                allowed = np.zeros(block, bool)
                for o in outs:
                    vw = views[o]
                    allowed |= byte_mask(block, vw["shape"], vw["strides"], vw["offset"], vw["item"], vw["base"])
                if ws_range:  # the workspace is scratch
                    allowed[ws_range[0]:ws_range[1]] = True
                extra = {id(b): np.ones(b.nbytes, bool) for b in s._buffers if b is not buf}  # the workspace
                assert_only_written(s, before, {id(buf): allowed, **extra})
        finally:
            for t in tensors.values():
                abi.lib.aclDestroyTensor(t)
