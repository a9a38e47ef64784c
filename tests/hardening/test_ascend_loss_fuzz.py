"""Hostile arguments at the raw C entry points of the ascend emulator's issue-30 operators.

The operators aclnnNLLLoss, aclnnNLLLoss2d, aclnnBinaryCrossEntropy, aclnnBinaryCrossEntropyWithLogits and its
Backward, aclnnCrossEntropyLoss and its Grad, aclnnSoftmaxCrossEntropyWithLogits and aclnnNLLLoss2dBackward, both
phases, fuzzed the
way tests/hardening/test_ascend_fuzz.py fuzzes the older ones (and with its helpers): NULL in every pointer
position, dtype codes of every kind, wrong ranks and shapes (a model of each op_api's checks gives the
status), hostile strides, offsets and storage over a device block, huge class counts, operands aliasing each
other in one block, reduction codes and CrossEntropyLoss's reduction string (over-long, embedded NUL,
unterminated at the end of readable memory), executors run twice, by another operator, after destruction
and repeatable, too-small workspaces, and device targets out of range. Besides the status: no byte written
outside an operation's outputs (every device buffer of the session compared byte for byte, guard regions
included), nothing written on error, a hostile view's results equal to the contiguous call's, and no leaked
runtime object. tests/hardening/test_ascend_sanitizers.py runs this module under ASan/UBSan too.

$XLOSS_ASCEND_FUZZ_SCALE scales the example budgets, as in test_ascend_fuzz.py; the cases per category are
printed at the end and written as JSON to $XLOSS_ASCEND_LOSS_FUZZ_COUNTS if set.
"""

from __future__ import annotations

import collections
import math
import mmap
import re
from pathlib import Path

import ascend_support as support  # tests/backends/ascend, on pytest's pythonpath
import cffi
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xloss.backends.ascend_aclnn import _cdef as C

fz = support.load_module(Path(__file__).with_name("test_ascend_fuzz.py"), "ascend_fuzz_helpers")
budget, snapshot, assert_only_written, create, ptr_add = (fz.budget, fz.snapshot, fz.assert_only_written, fz.create,
                                                          fz.ptr_add)
byte_mask, element_indices, model_create, view_numel, reach = (fz.byte_mask, fz.element_indices, fz.model_create,
                                                               fz.view_numel, fz.reach)
NULLPTR, INVALID, RUNTIME, INNER, INNER_NULLPTR = fz.NULLPTR, fz.INVALID, fz.RUNTIME, fz.INNER, fz.INNER_NULLPTR
TILING = 561002  # ACLNN_ERR_INNER_TILING_ERROR: the cross-entropy pages' code for shapes and values out of range
SIZED, FLOATS = fz.SIZED, fz.FLOATS
F32, F16, I32, U8, I64 = C.ACL_FLOAT, C.ACL_FLOAT16, C.ACL_INT32, C.ACL_UINT8, C.ACL_INT64

NLL, NLL2D, BCEF, BCEL, BCELB, CE, CEG, SCE, NLL2DB = support.LOSS_OPS
OPS, REQUIRED, op_args = support.LOSS_OPS, support.LOSS_REQUIRED, support.loss_op_args
REDUCTIONS = support.CE_REDUCTIONS
STRING_REDUCTION = (CE, CEG)  # reductionOptional: char *
#: what phase two writes (the z-loss outputs are checked but, as the pages say, not written yet)
OUTPUTS = {NLL: ("out", "totalWeightOut"), NLL2D: ("out", "totalWeightOut"), BCEF: ("out",), BCEL: ("out",),
           BCELB: ("out",), CE: ("lossOut", "logProbOut", "zlossOut", "lseForZlossOut"), CEG: ("out",),
           SCE: ("loss", "backprop"), NLL2DB: ("out",)}
#: device data the kernel validates and then indexes with: no output may overlap it
INDICES = {NLL: ("target",), NLL2D: ("target",), CE: ("target",), CEG: ("target",), NLL2DB: ("target",)}

COUNTS: collections.Counter = collections.Counter()

_libc_ffi = cffi.FFI()
_libc_ffi.cdef("int mprotect(void *addr, size_t len, int prot);")
_libc = _libc_ffi.dlopen(None)


emu, abi, no_leaks = fz.emu, fz.abi, fz.no_leaks  # the older fuzzer's fixtures: the emulator, no leaks


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    yield
    fz.report(request, COUNTS, "ascend loss-operator fuzz", "XLOSS_ASCEND_LOSS_FUZZ_COUNTS")


def describe(abi, t) -> dict:
    desc = abi.ffi.new("xlossEmuTensorDesc *")
    assert abi.lib.xlossEmuDescribeTensor(t, b"x", desc) == 0
    return {"shape": tuple(desc.viewDims[i] for i in range(desc.viewDimsNum)), "dtype": desc.dataType,
            "strides": tuple(desc.strides[i] for i in range(desc.viewDimsNum)), "offset": desc.offset,
            "data": desc.data, "storage": desc.storageNumel}


def tensors(abi, d) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, abi.ffi.CData) and abi.ffi.typeof(v).kind == "pointer"
            and abi.ffi.typeof(v).item.cname == "aclTensor"}


def buffer_of(s, abi, t):
    """The session buffer whose memory holds tensor ``t``'s data."""
    addr = int(abi.ffi.cast("uintptr_t", describe(abi, t)["data"]))
    for b in s._buffers:
        lo = int(abi.ffi.cast("uintptr_t", b.ptr))
        if lo <= addr < lo + max(b.nbytes, 1):
            return b, addr - lo
    raise AssertionError("no session buffer holds the tensor")


def output_masks(s, abi, d, op) -> dict:
    """{id(buffer): bytes phase two may write}: the output views (their exact elements)."""
    masks = {}
    for name in OUTPUTS[op]:
        t = d[name]
        if t == abi.NULL:
            continue
        dd = describe(abi, t)
        buf, base = buffer_of(s, abi, t)
        item = SIZED[dd["dtype"]]
        m = masks.setdefault(id(buf), np.zeros(buf.nbytes, bool))
        if view_numel(dd["shape"]):
            m |= byte_mask(buf.nbytes, dd["shape"], dd["strides"], dd["offset"], item, base)
    return masks


def run_two_phases(s, abi, op, d):
    """Phase one (must succeed), a fresh workspace of the size asked for, phase two (must succeed); nothing
    but the outputs (and the workspace) written."""
    got, need, ex = abi.phase_one(op, *d.values())
    assert got == 0, (op, got, abi.message())
    wsb = s.malloc(need) if need else None
    before = snapshot(s)
    got = abi.phase_two(op, wsb.ptr if wsb else abi.NULL, need, ex, s.stream)
    assert got == 0, (op, got, abi.message())
    allowed = output_masks(s, abi, d, op)
    if wsb:
        allowed[id(wsb)] = np.ones(wsb.nbytes, bool)
    assert_only_written(s, before, allowed)


def read_view(s, abi, t) -> np.ndarray:
    dd = describe(abi, t)
    buf, base = buffer_of(s, abi, t)
    item = SIZED[dd["dtype"]]
    raw = s._read(buf, (buf.nbytes,), np.uint8)
    dt = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, U8: np.uint8}[dd["dtype"]]
    idx = element_indices(dd["shape"], dd["strides"], dd["offset"])
    return np.array([raw[base + i * item: base + (i + 1) * item].view(dt)[0] for i in idx], dt).reshape(dd["shape"])


# ---- 1. NULL in every pointer position, in both phases --------------------------------------------

@budget(30)
@given(data=st.data())
def test_null_pointers(emu, abi, data):
    op = data.draw(st.sampled_from(OPS), label="op")
    with emu.session() as s:
        d = op_args(s, op, reduction=data.draw(st.sampled_from([0, 1, 2]), label="reduction"))
        params = [*tensors(abi, d), "workspaceSize", "executor"]
        if op in STRING_REDUCTION:
            params.append("reductionOptional")  # NULL is "mean" (the pages)
        nulls = data.draw(st.sets(st.sampled_from(params), min_size=1), label="NULL positions")
        args = {k: (abi.NULL if k in nulls else v) for k, v in d.items()}
        ws = abi.NULL if "workspaceSize" in nulls else abi.ffi.new("uint64_t *", 777)
        exe = abi.NULL if "executor" in nulls else abi.ffi.new("aclOpExecutor **", abi.ffi.cast("void *", 0x70))
        before = snapshot(s)
        got = abi.lib.symbol(op + "GetWorkspaceSize")(*args.values(), ws, exe)
        msg = abi.message()  # read once: reading clears it
        expect_null = bool(nulls & {"workspaceSize", "executor", *REQUIRED[op]})
        if not expect_null and op in STRING_REDUCTION and "reductionOptional" in nulls:
            # NULL is a mean: a per-row (reduction "none") loss or gradient no longer fits
            expect = INVALID if d["reductionOptional"] == b"none" else 0
        else:
            expect = NULLPTR if expect_null else 0
        assert got == expect, (op, sorted(nulls), got, msg)
        if got:
            assert ws == abi.NULL or ws[0] == 0
            assert exe == abi.NULL or exe[0] == abi.NULL
            if expect_null:
                assert any(k in msg for k in nulls), msg
        else:
            need = ws[0]
            wsb = s.malloc(need) if need else None
            assert abi.phase_two(op, wsb.ptr if wsb else abi.NULL, need, exe[0], s.stream) == 0, abi.message()
        if got:
            assert_only_written(s, before)
    COUNTS["null pointers"] += 1


def test_phase_two_with_null_or_foreign_executors(emu, abi):
    """Phase two of each operator: a NULL executor is 161001; another operator's executor is refused
    (161002) without being spent."""
    with emu.session() as s:
        for i, op in enumerate(OPS):
            assert abi.phase_two(op, abi.NULL, 0, abi.NULL, s.stream) == NULLPTR, op
            other = OPS[(i + 1) % len(OPS)]
            got, need, ex = abi.phase_one(other, *op_args(s, other).values())
            assert got == 0, abi.message()
            assert abi.phase_two(op, abi.NULL, 0, ex, s.stream) == INVALID, (op, other)
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
            COUNTS["null pointers"] += 2


# ---- 2. dtype codes ------------------------------------------------------------------------------------

#: (op, operand) -> the dtype codes phase one accepts there, the other operands being op_args' (FLOAT)
ACCEPTED = {
    **{(op, k): {F32} for op in (NLL, NLL2D) for k in ("self", "weight")},  # weight in self's dtype
    **{(op, k): FLOATS for op in (NLL, NLL2D) for k in ("out", "totalWeightOut")},  # any float self casts to
    **{(op, "target"): {I64, I32, U8} for op in (NLL, NLL2D)},
    **{(BCEF, k): {F32} for k in ("self", "target", "weight", "out")},  # all in self's dtype
    **{(op, k): FLOATS for op in (BCEL, BCELB) for k in ("self", "weightOptional", "posWeightOptional")},
    (BCELB, "gradOutput"): FLOATS, **{(op, k): {F32} for op in (BCEL, BCELB) for k in ("target", "out")},
    **{(CE, k): {F32} for k in ("input", "weightOptional", "lossOut", "logProbOut", "zlossOut", "lseForZlossOut")},
    (CE, "target"): {I64, I32},
    **{(CEG, k): {F32} for k in ("gradLoss", "logProb", "weightOptional", "out")}, (CEG, "target"): {I64},
    **{(SCE, k): {F32} for k in ("features", "labels", "loss", "backprop")},  # all in features' dtype
    # self FLOAT, FLOAT16 or BF16 and the other floats exactly its dtype: with FLOAT beside it, FLOAT only
    **{(NLL2DB, k): {F32} for k in ("gradOutput", "self", "weight", "totalWeight", "out")},
    (NLL2DB, "target"): {I64, I32, U8},
}


@budget(40)
@given(data=st.data())
def test_dtype_codes(emu, abi, data):
    op, name = data.draw(st.sampled_from(sorted(ACCEPTED)), label="operand")
    code = data.draw(st.one_of(st.sampled_from(sorted(SIZED) + [13, 29, -1, 5, 99]),
                               st.integers(-(2**31), 2**31 - 1)), label="dtype code")
    with emu.session() as s:
        d = op_args(s, op)
        shape = list(describe(abi, d[name])["shape"])
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
                    assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
                else:
                    assert "dtype" in abi.message() and ex == abi.NULL
            finally:
                abi.lib.aclDestroyTensor(t)
    COUNTS["dtype codes"] += 1


# ---- 3. wrong ranks and shapes --------------------------------------------------------------------------

def _bc(a, b) -> bool:
    return len(a) <= len(b) and all(x == 1 or x == y for x, y in zip(reversed(a), reversed(b)))


def _one(v) -> bool:
    return v in ((), (1,))


def model_shapes(op, sh: dict, reduction: int) -> int:
    """The status phase one gives these shapes (each op_api's CheckShape, in its order; the operands'
    dtypes valid). The runtime describes no tensor of more than 8 dims (161002)."""
    if any(len(v) > 8 for v in sh.values() if v is not None):
        return INVALID
    numel = {k: math.prod(v) for k, v in sh.items() if v is not None}
    if op == NLL:
        s_, t_, w_, o_ = sh["self"], sh["target"], sh["weight"], sh["out"]
        if len(s_) not in (1, 2) or not ((len(s_) == 1 and t_ == ()) or (len(s_) == 2 and t_ == (s_[0],))):
            return INVALID
        if w_ != (s_[-1],):
            return INVALID
        per_position = reduction == 0 and len(s_) == 2
        if (per_position and o_ != (s_[0],)) or (not per_position and not _one(o_)):
            return INVALID
        if numel["totalWeightOut"] != 1:
            return INVALID
        return INVALID if numel["self"] == 0 and s_[-1] == 0 and numel["target"] > 0 else 0
    if op == NLL2D:
        s_, t_, w_, o_ = sh["self"], sh["target"], sh["weight"], sh["out"]
        if len(s_) != 4 or not (len(w_) >= 1 and w_[0] == s_[1]):
            return INVALID
        if t_ != (s_[0], s_[2], s_[3]):
            return INVALID
        if (reduction == 0 and o_ != t_) or (reduction != 0 and numel["out"] != 1):
            return INVALID
        return INVALID if numel["totalWeightOut"] != 1 or len(w_) != 1 else 0
    if op == BCEF:
        s_ = sh["self"]
        if not 1 <= len(s_) <= 8 or sh["target"] != s_ or sh["weight"] != s_:
            return INVALID
        return 0 if (sh["out"] == s_ if reduction == 0 else _one(sh["out"])) else INVALID
    if op == BCEL:
        s_ = sh["self"]
        if sh["target"] != s_:
            return INVALID
        if numel["target"] and not (_bc(sh["weightOptional"], s_) and _bc(sh["posWeightOptional"], s_)):
            return INVALID
        if reduction == 0:
            return 0 if sh["out"] == s_ else INVALID
        return 0 if numel["self"] == 0 or _one(sh["out"]) else INVALID
    if op == BCELB:
        s_ = sh["self"]
        if numel["self"] and not (sh["target"] == s_ and sh["out"] == s_ and all(
                _bc(sh[k], s_) for k in ("gradOutput", "weightOptional", "posWeightOptional"))):
            return INVALID
        return 0
    if op in (CE, CEG):
        x = sh["input" if op == CE else "logProb"]
        if len(x) != 2 or x[1] <= 0:
            return TILING
        n, c = x
        if sh["target"] != (n,) or sh["weightOptional"] != (c,):
            return TILING
        if op == CE:
            if (reduction == 0 and sh["lossOut"] != (n,)) or (reduction != 0 and not _one(sh["lossOut"])):
                return INVALID
            ok = sh["logProbOut"] == x and sh["zlossOut"] == sh["lossOut"] and sh["lseForZlossOut"] == (n,)
            return 0 if ok else INVALID
        if sh["gradLoss"] != ((n,) if reduction == 0 else ()):
            return INVALID
        return 0 if sh["out"] == x else INVALID
    if op == NLL2DB:  # aclnn_nll_loss2d_backward.cpp's CheckShape; CheckReduction comes after it
        g, s_, t_ = sh["gradOutput"], sh["self"], sh["target"]
        if (reduction == 0 and g != t_) or (reduction != 0 and not (len(g) <= 1 and numel["gradOutput"] == 1)):
            return INVALID
        if len(s_) != 4 or len(t_) != 3 or (s_[0], s_[2], s_[3]) != t_:
            return INVALID
        ok = numel["weight"] == s_[1] and sh["out"] == s_ and numel["totalWeight"] == 1
        return 0 if ok else INVALID  # an empty self: success, no kernel
    assert op == SCE
    x, y = sh["features"], sh["labels"]
    if len(x) != 2 or len(y) != 2:
        return INVALID
    if numel["features"] and numel["labels"]:
        ok = y == x and sh["loss"] == (x[0],) and sh["backprop"] == x
        return 0 if ok else INVALID
    return 0


def _fill_for(code, n, rng):
    """Valid data of ``n`` elements for an operand of dtype ``code`` (class 0 for indices)."""
    if code in (I64, I32, U8):
        return np.zeros(n, {I64: np.int64, I32: np.int32, U8: np.uint8}[code])
    return rng.uniform(0.1, 0.9, n).astype(np.float32)


@budget(50)
@given(data=st.data())
def test_wrong_ranks_and_shapes(emu, abi, data):
    """One operand of another rank or shape: phase one gives the model's status (nothing written); an
    accepted call runs and writes nothing outside its outputs."""
    op = data.draw(st.sampled_from(OPS), label="op")
    reduction = data.draw(st.sampled_from([0, 1, 2]), label="reduction")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    with emu.session() as s:
        d = op_args(s, op, reduction=reduction)
        shapes = {k: (None if v == abi.NULL else describe(abi, v)["shape"]) for k, v in tensors(abi, d).items()}
        name = data.draw(st.sampled_from([k for k, v in shapes.items() if v is not None]), label="operand")
        new = tuple(data.draw(st.one_of(st.lists(st.integers(0, 5), max_size=4),
                                        st.lists(st.integers(1, 2), min_size=9, max_size=10)), label="shape"))
        code = describe(abi, d[name])["dtype"]
        buf = s.upload(_fill_for(code, max(1, math.prod(new)), rng))
        t = create(abi, new, code, support._contig(new), 0, C.ACL_FORMAT_ND, new, buf.ptr)
        assert t != abi.NULL
        try:
            d[name] = t
            shapes[name] = new
            want = model_shapes(op, shapes, reduction)
            before = snapshot(s)
            got, need, ex = abi.phase_one(op, *d.values())
            assert got == want, (op, reduction, name, new, got, want, abi.message())
            assert_only_written(s, before)
            if got == 0:
                assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
                if len(new) <= 8:
                    run_two_phases(s, abi, op, d)
            else:
                assert ex == abi.NULL
        finally:
            abi.lib.aclDestroyTensor(t)
    COUNTS["wrong ranks and shapes"] += 1


# ---- 4. negative and huge dims, huge class counts --------------------------------------------------------

@budget(30)
@given(data=st.data())
def test_hostile_descriptors_as_operands(emu, abi, data):
    """A tensor with negative, huge or int64-overflowing dims, strides or offsets (test_ascend_fuzz's
    strategies) in any operand position: aclCreateTensor refuses it, or phase one refuses it or accepts it
    without touching memory; an accepted executor is destroyed unrun (its loops may be 2^40 long)."""
    op = data.draw(st.sampled_from(OPS), label="op")
    nd = data.draw(st.integers(0, 4), label="ndim")
    dims = data.draw(st.lists(fz._dim(), min_size=nd, max_size=nd), label="dims")
    strides = data.draw(st.lists(st.one_of(st.just(0), fz._stride()), min_size=nd, max_size=nd), label="strides")
    offset = data.draw(st.one_of(st.integers(0, 4), st.integers(-(2**63), -1), st.integers(2**32, 2**63 - 1)),
                       label="offset")
    storage = data.draw(st.lists(st.integers(0, 8), max_size=2), label="storage dims")
    with emu.session() as s:
        d = op_args(s, op)
        name = data.draw(st.sampled_from(list(tensors(abi, d))), label="operand")
        code = describe(abi, d[name])["dtype"]
        buf = s.malloc(64 * 16)
        t = create(abi, dims, code, strides, offset, C.ACL_FORMAT_ND, storage, buf.ptr)
        assert (t != abi.NULL) == model_create(dims, code, strides, offset, C.ACL_FORMAT_ND, storage, False)
        if t == abi.NULL:
            COUNTS["negative or huge dims"] += 1
            return
        try:
            d[name] = t
            before = snapshot(s)
            got, need, ex = abi.phase_one(op, *d.values())
            assert got in (0, INVALID, TILING), (op, name, got, abi.message())
            assert_only_written(s, before)
            if got == 0:
                assert need < 2**63, need
                assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
        finally:
            abi.lib.aclDestroyTensor(t)
    COUNTS["negative or huge dims"] += 1


@pytest.mark.parametrize("classes", [2**62, 2**62 + 1, 2**61 + 3, 2**63 - 1])
@pytest.mark.parametrize("op", [CE, CEG, SCE])
def test_huge_class_counts_are_refused(emu, abi, op, classes):
    """A stride-0 (1, C) view over one element claims any C. The row workspace C x 4 (x 3) bytes wraps in
    uint64 for these C: the emulator sized it unchecked and phase two filled rows of C floats into a few
    bytes. Ours: 561002, as the pages' other tiling failures."""
    ffi = abi.ffi
    with emu.session() as s:
        def wide():
            return create(abi, [1, classes], F32, [0, 0], 0, C.ACL_FORMAT_ND, [1], s.malloc(64).ptr)

        made = [wide(), wide(), wide()]
        x, lp, y = made
        try:
            t = s.put(np.zeros(1, np.int64))[0]
            one = s.empty((1,), np.float32)[0]
            args = {CE: [x, t, ffi.NULL, b"mean", -100, 0.0, 0.0, False, one, lp, s.empty((1,), np.float32)[0],
                         s.empty((1,), np.float32)[0]],
                    CEG: [s.put(np.asarray(1.0, np.float32))[0], x, t, ffi.NULL, ffi.NULL, ffi.NULL, b"mean", -100,
                          0.0, 0.0, lp],
                    SCE: [x, y, one, lp]}[op]
            before = snapshot(s)
            got, need, ex = abi.phase_one(op, *args)
            assert (got, need, ex) == (TILING, 0, abi.NULL), (got, need, abi.message())
            assert "too large" in abi.message()
            assert_only_written(s, before)
        finally:
            for m in made:
                abi.lib.aclDestroyTensor(m)
    COUNTS["negative or huge dims"] += 1


@pytest.mark.parametrize("numel", [2**63 - 1, 2**63 - 4096, 2**62 + 1])
@pytest.mark.parametrize("op", [BCEF, BCEL])
def test_element_counts_near_int64_max_size_the_reduction_workspace(emu, abi, op, numel):
    """A stride-0 view of up to INT64_MAX elements over one: the mean's workspace is one float64 partial sum
    per 4096-element block (README, Operators #18), rounded to 32 bytes. numel + 4095 overflowed int64 (UB;
    in practice a wrapped, meaningless size). Phase one only: phase two would loop 2^62 times."""
    ffi = abi.ffi
    with emu.session() as s:
        x, y = (create(abi, [numel], F32, [0], 0, C.ACL_FORMAT_ND, [1], s.malloc(64).ptr) for _ in range(2))
        try:
            out = s.empty((), np.float32)[0]
            args = [x, y, ffi.NULL, 1, out] if op == BCEF else [x, y, ffi.NULL, ffi.NULL, 1, out]
            got, need, ex = abi.phase_one(op, *args)
            assert got == 0, abi.message()
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
            assert need == -(-(-(-numel // 4096) * 8) // 32) * 32, need
        finally:
            abi.lib.aclDestroyTensor(x)
            abi.lib.aclDestroyTensor(y)
    COUNTS["negative or huge dims"] += 1


# ---- 5. hostile strides, offsets and storage over a device block ------------------------------------------

@budget(40)
@given(data=st.data())
def test_hostile_views(emu, abi, data):
    """One operand (input or output) as a view with random strides, offset and storage over a device block
    of random size: created or refused as modelled; refused in phase one (161002) when its storage leaves the
    block; otherwise the call writes only its outputs' elements, and gives what the contiguous call gives."""
    op = data.draw(st.sampled_from(OPS), label="op")
    reduction = data.draw(st.sampled_from([0, 1, 2]), label="reduction")
    with emu.session() as s:
        d = op_args(s, op, reduction=reduction)
        named = tensors(abi, d)
        name = data.draw(st.sampled_from(list(named)), label="operand")
        dd = describe(abi, named[name])
        shape, code, item = dd["shape"], dd["dtype"], SIZED[dd["dtype"]]
        strides = data.draw(st.lists(st.integers(0, 9), min_size=len(shape), max_size=len(shape)), label="strides")
        offset = data.draw(st.integers(0, 24), label="offset")
        block = data.draw(st.integers(item, 480), label="device block bytes") // item * item
        storage = data.draw(st.one_of(st.just(block // item), st.integers(0, 120)), label="storage elements")
        n = view_numel(shape)
        idx = element_indices(shape, strides, offset)
        # the view's logical values (an input) or a pattern (an output) placed at its elements
        src = read_view(s, abi, named[name]).reshape(-1)
        host = np.full(block, 0x5A, np.uint8)
        fits = n == 0 or reach(shape, strides, offset) < block // item
        if fits and n:
            host[: (block // item) * item].view(src.dtype)[idx] = src
        buf = s.upload(host)
        t = create(abi, shape, code, strides, offset, C.ACL_FORMAT_ND, [storage], buf.ptr)
        made = model_create(shape, code, strides, offset, C.ACL_FORMAT_ND, [storage], False)
        assert (t != abi.NULL) == made, (shape, strides, offset, storage, abi.message())
        COUNTS["hostile strides, offsets, storage"] += 1
        if t == abi.NULL:
            return
        try:
            unique = len(set(idx.tolist())) == n
            # the contiguous call first (its outputs to compare with); then the hostile one
            if name not in OUTPUTS[op] or unique:
                run_two_phases(s, abi, op, d)
            want = {k: read_view(s, abi, d[k]) for k in OUTPUTS[op]}
            d[name] = t
            before = snapshot(s)
            got, need, ex = abi.phase_one(op, *d.values())
            in_block = n == 0 or storage * item <= block
            assert got == (0 if in_block else INVALID), (op, name, got, abi.message())
            if got:
                assert "device memory" in abi.message()
                assert_only_written(s, before)
                return
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
            if name in OUTPUTS[op] and not unique:
                # two elements in one place: any of the values may land there, nothing outside the view
                run_two_phases(s, abi, op, d)
                return
            if name not in OUTPUTS[op] and not unique:
                src = read_view(s, abi, t).reshape(-1)  # what the view reads (later writes won)
                d[name] = s.put(src.reshape(shape))[0]
                run_two_phases(s, abi, op, d)
                want = {k: read_view(s, abi, d[k]) for k in OUTPUTS[op]}
                d[name] = t
            run_two_phases(s, abi, op, d)
            for k in OUTPUTS[op]:
                np.testing.assert_array_equal(read_view(s, abi, d[k]), want[k], err_msg=f"{op} {k}")
        finally:
            abi.lib.aclDestroyTensor(t)


# ---- 6. operands aliasing one another in one device block -----------------------------------------------

def _extent(v: dict) -> tuple[int, int]:
    if view_numel(v["shape"]) == 0:
        return 0, 0
    return v["base"], v["base"] + view_numel(v["shape"]) * v["item"]


def _overlap(a, b) -> bool:
    (alo, ahi), (blo, bhi) = a, b
    return alo < ahi and blo < bhi and alo < bhi and blo < ahi


@budget(40)
@given(data=st.data())
def test_aliased_operands_and_workspaces(emu, abi, data):
    """Every operand placed at random (32-byte aligned) in one shared block: an output overlapping the
    targets a kernel validates and indexes with is refused in phase one (161002); a workspace inside the
    block overlapping any operand is refused in phase two (161002, nothing written); any other aliasing may
    give any values, but no byte outside the outputs' views and the workspace changes."""
    op = data.draw(st.sampled_from(OPS), label="op")
    reduction = data.draw(st.sampled_from([0, 1, 2]), label="reduction")
    block = 1024
    with emu.session() as s:
        d = op_args(s, op, reduction=reduction)
        named = tensors(abi, d)
        fractions = data.draw(st.lists(st.floats(0, 1), min_size=len(named), max_size=len(named)), label="places")
        ws_shared = data.draw(st.booleans(), label="workspace inside the shared block")
        ws_frac = data.draw(st.floats(0, 1), label="workspace place")
        host = np.zeros(block, np.uint8)
        views, made = {}, []
        for (k, t), frac in zip(named.items(), fractions):
            if t == abi.NULL:
                continue
            dd = describe(abi, t)
            vals = read_view(s, abi, t)
            item = SIZED[dd["dtype"]]
            base = int(frac * ((block - max(vals.size, 1) * item) // 32)) * 32
            host[base:base + vals.size * item] = np.ascontiguousarray(vals).view(np.uint8).reshape(-1)
            views[k] = {"shape": dd["shape"], "dtype": dd["dtype"], "base": base, "item": item}
        buf = s.upload(host)
        for k, v in views.items():
            d[k] = create(abi, v["shape"], v["dtype"], support._contig(v["shape"]), 0, C.ACL_FORMAT_ND,
                          [max(view_numel(v["shape"]), 1)], ptr_add(abi, buf.ptr, v["base"]))
            made.append(d[k])
        COUNTS["aliased operands and workspaces"] += 1
        try:
            got, need, ex = abi.phase_one(op, *d.values())
            refused = any(_overlap(_extent(views[o]), _extent(views[i])) for o in OUTPUTS[op]
                          for i in INDICES.get(op, ()) if o in views and i in views)
            assert got == (INVALID if refused else 0), (op, got, abi.message())
            if refused:
                assert "overlaps" in abi.message()
                return
            # later placements may have overwritten the targets: what the block holds now decides
            bad = False
            if op in INDICES:
                v = views["target"]
                tdt = {8: np.int64, 4: np.int32, 1: np.uint8}[v["item"]]
                now = host[v["base"]:v["base"] + view_numel(v["shape"]) * v["item"]].view(tdt).astype(np.int64)
                classes = 3
                bad = bool(((now != -100) & ((now < 0) | (now >= classes))).any())
            ws_ptr, ws_range = abi.NULL, None
            if need:
                if ws_shared and need <= block:
                    start = int(ws_frac * ((block - need) // 32)) * 32
                    ws_ptr, ws_range = ptr_add(abi, buf.ptr, start), (start, start + need)
                else:
                    ws_ptr = s.malloc(need).ptr
            before = snapshot(s)
            got = abi.phase_two(op, ws_ptr, need, ex, s.stream)
            ws_overlaps = ws_range is not None and any(
                _overlap(ws_range, (v["base"], v["base"] + max(view_numel(v["shape"]), 1) * v["item"]))
                for v in views.values())
            want = INVALID if ws_overlaps else RUNTIME if bad else 0
            assert got == want, (op, got, want, abi.message())
            if got:
                assert_only_written(s, before)
                return
            allowed = np.zeros(block, bool)
            for o in OUTPUTS[op]:
                if o in views:
                    lo, hi = _extent(views[o])
                    allowed[lo:hi] = True
            if ws_range:
                allowed[ws_range[0]:ws_range[1]] = True
            extra = {id(b): np.ones(b.nbytes, bool) for b in s._buffers if b is not buf}
            assert_only_written(s, before, {id(buf): allowed, **extra})
        finally:
            for t in made:
                abi.lib.aclDestroyTensor(t)


# ---- 7. reduction codes and CrossEntropyLoss's reduction string -------------------------------------------

@budget(20)
@given(data=st.data())
def test_reduction_codes(emu, abi, data):
    op = data.draw(st.sampled_from([NLL, NLL2D, BCEF, BCEL, BCELB, NLL2DB]), label="op")
    code = data.draw(st.one_of(st.sampled_from([-1, 3, 4, 255, -(2**63), 2**63 - 1]),
                               st.integers(-(2**63), 2**63 - 1)), label="reduction")
    with emu.session() as s:
        d = op_args(s, op, reduction=1)
        d["reduction"] = code
        before = snapshot(s)
        got, _, ex = abi.phase_one(op, *d.values())
        if code in (0, 1, 2):  # only a per-element out fits none; the one-element out fits mean and sum
            assert got in (0, INVALID)
            if got == 0:
                assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
        else:
            assert (got, ex) == (INVALID, abi.NULL) and "reduction" in abi.message(), (op, code, got)
        assert_only_written(s, before)
    COUNTS["reduction codes"] += 1


def _guarded_string(raw: bytes):
    """``raw`` (no terminator added) ending at the last byte of a readable page, the next page unreadable:
    a read past its end faults. Returns (the mapping, to keep alive, and the address)."""
    page = mmap.PAGESIZE
    readable = -(-max(len(raw), 1) // page) * page
    m = mmap.mmap(-1, readable + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = int(_libc_ffi.cast("uintptr_t", _libc_ffi.from_buffer(m)))
    m[readable - len(raw):readable] = raw
    assert _libc.mprotect(_libc_ffi.cast("void *", base + readable), page, 0) == 0
    return m, base + readable - len(raw)


def _names_ruled_out(raw: bytes) -> bool:
    """Does some byte of ``raw`` rule out every reduction name (with its terminator)?"""
    return all(any(raw[i] != (name + b"\0")[i] for i in range(min(len(raw), len(name) + 1)))
               for name in REDUCTIONS.values())


REDUCTION_TEXT = st.one_of(
    st.sampled_from([b"none", b"mean", b"sum", b"", b"Mean", b"SUM", b"mea", b"meann", b"sum ", b" sum", b"batchmean",
                     b"sum\0junk", b"none\0", b"\xff\xfe", b"m\x01an"]),
    st.binary(max_size=12), st.integers(33, 100_000).map(lambda n: b"mean" * (n // 4)))


@budget(30)
@given(data=st.data())
def test_reduction_strings(emu, abi, data):
    """reductionOptional of CrossEntropyLoss and its Grad: "none", "mean", "sum" or NULL (mean) accepted,
    anything else 561002 with a message that quotes at most the bytes read, never read past the byte that
    rules out every name: over-long strings, embedded NULs, and strings with no terminator ending at the
    last readable byte (a read past it faults)."""
    op = data.draw(st.sampled_from(STRING_REDUCTION), label="op")
    raw = data.draw(REDUCTION_TEXT, label="reduction bytes")
    terminated = data.draw(st.booleans(), label="terminated") or not _names_ruled_out(raw)
    text = raw.split(b"\0")[0] if terminated else None
    code = {v: k for k, v in REDUCTIONS.items()}.get(text, -1) if terminated else -1
    with emu.session() as s:
        d = op_args(s, op, reduction=code if code >= 0 else 1)
        if terminated:
            keep = abi.ffi.new("char[]", raw)  # cffi adds the terminator
        else:
            keep, addr = _guarded_string(raw)
        d["reductionOptional"] = keep if terminated else abi.ffi.cast("char *", addr)
        before = snapshot(s)
        got, _, ex = abi.phase_one(op, *d.values())
        try:
            if code >= 0:
                assert got == 0, (op, raw, abi.message())
                assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
            else:
                msg = abi.message()
                assert (got, ex) == (TILING, abi.NULL), (op, raw, got, msg)
                quoted = re.search(r'reductionOptional "(.*)" is not', msg)
                assert quoted and len(quoted.group(1)) <= 4 * 5 + 3, msg  # five bytes at most, escaped, and "..."
            assert_only_written(s, before)
        finally:
            if not terminated:
                keep.close()
    COUNTS["reduction strings"] += 1


@pytest.mark.parametrize("raw", [b"x", b"batchmean", b"sumx", b"nonE", b"meanmeanmean", b"\xff" * 40])
@pytest.mark.parametrize("op", STRING_REDUCTION)
def test_unterminated_reduction_strings_are_not_read_past_their_end(emu, abi, op, raw):
    """Whatever the random draws above: unterminated strings whose bytes rule out every name, ending at the
    last readable byte. The emulator printed up to 32 bytes of an invalid string ("%.32s"), past the end
    of these (a fault here, an ASan report under the sanitizers)."""
    assert _names_ruled_out(raw)
    with emu.session() as s:
        d = op_args(s, op)
        m, addr = _guarded_string(raw)
        try:
            d["reductionOptional"] = abi.ffi.cast("char *", addr)
            got, _, ex = abi.phase_one(op, *d.values())
            msg = abi.message()
            assert (got, ex) == (TILING, abi.NULL), (got, msg)
            assert msg.endswith('..." is not "none", "mean" or "sum"'), msg
        finally:
            m.close()
    COUNTS["reduction strings"] += 1


# ---- 8. executors run twice, by another operator, after destruction, repeatable -----------------------------

@budget(20)
@given(data=st.data())
def test_executor_reuse(emu, abi, data):
    """A single-use executor runs once (then 561000, unknown); destroyed, it is unknown; a repeatable one
    runs again with the same results and stays alive until destroyed."""
    op = data.draw(st.sampled_from(OPS), label="op")
    repeatable = data.draw(st.booleans(), label="repeatable")
    destroy_first = data.draw(st.booleans(), label="destroy before the first run")
    with emu.session() as s:
        d = op_args(s, op, reduction=data.draw(st.sampled_from([0, 1, 2]), label="reduction"))
        outs = {k: buffer_of(s, abi, d[k])[0] for k in OUTPUTS[op]}
        got, need, ex = abi.phase_one(op, *d.values())
        assert got == 0, abi.message()
        wsb = s.malloc(need) if need else None
        ws = wsb.ptr if wsb else abi.NULL
        if repeatable:
            assert abi.lib.aclSetAclOpExecutorRepeatable(ex) == 0
        if destroy_first:
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
            assert abi.phase_two(op, ws, need, ex, s.stream) == INNER
            assert abi.lib.aclDestroyAclOpExecutor(ex) == INNER
            COUNTS["executor reuse"] += 1
            return
        assert abi.phase_two(op, ws, need, ex, s.stream) == 0, abi.message()
        first = {k: s._read(b, (b.nbytes,), np.uint8) for k, b in outs.items()}
        second = abi.phase_two(op, ws, need, ex, s.stream)
        if repeatable:
            assert second == 0, abi.message()
            for k, b in outs.items():
                np.testing.assert_array_equal(s._read(b, (b.nbytes,), np.uint8), first[k], err_msg=k)
            assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
        else:
            assert second == INNER, second
            assert abi.lib.aclSetAclOpExecutorRepeatable(ex) == INNER
            assert abi.lib.aclDestroyAclOpExecutor(ex) == INNER
    COUNTS["executor reuse"] += 1


# ---- 9. zero and too-small workspaces --------------------------------------------------------------------------

@budget(30)
@given(data=st.data())
def test_workspaces(emu, abi, data):
    """The operators that ask for a workspace (the reductions' block sums, cross entropy's row, softmax's
    rows): a size below the need, no workspace, a host one, a smaller block or a misaligned one is refused
    (nothing written, the executor spent); an exact or larger one runs."""
    op, reduction = data.draw(st.sampled_from([(BCEF, 1), (BCEF, 2), (BCEL, 1), (BCEL, 2), (CE, 0), (CE, 1),
                                               (CEG, 2), (SCE, 0)]), label="op")
    size_choice = data.draw(st.one_of(st.sampled_from(["0", "need", "need-1", "need+1"]), st.integers(0, 256)),
                            label="workspaceSize")
    kind = data.draw(st.sampled_from(["none", "exact", "smaller block", "larger block", "host", "misaligned"]),
                     label="workspace")
    with emu.session() as s:
        d = op_args(s, op, reduction=reduction)
        got, need, ex = abi.phase_one(op, *d.values())
        assert got == 0 and need > 0, (op, got, need, abi.message())
        size = {"0": 0, "need": need, "need-1": need - 1, "need+1": need + 1}.get(size_choice, size_choice)
        if isinstance(size_choice, int):
            size = size_choice * (need + 256) // 256
        host = np.zeros(need + 64, np.uint8)
        wsb = None
        if kind == "none":
            ptr = abi.NULL
        elif kind == "host":
            ptr = abi.ffi.cast("void *", host.ctypes.data)
        else:
            block = {"exact": need, "smaller block": max(need // 2, 1), "larger block": need + 64,
                     "misaligned": need + 64}[kind]
            wsb = s.malloc(block)
            ptr = ptr_add(abi, wsb.ptr, 8) if kind == "misaligned" else wsb.ptr
        if size < need:
            want = INVALID
        elif kind == "none":
            want = NULLPTR
        elif kind in ("host", "misaligned", "smaller block"):
            want = INVALID
        else:
            want = 0
        before = snapshot(s)
        got = abi.phase_two(op, ptr, size, ex, s.stream)
        assert got == want, (op, need, size, kind, got, abi.message())
        if got:
            assert_only_written(s, before)
            assert abi.phase_two(op, ptr, size, ex, s.stream) == INNER  # a failed run spends the executor
        else:
            allowed = output_masks(s, abi, d, op)
            allowed[id(wsb)] = np.ones(wsb.nbytes, bool)
            assert_only_written(s, before, allowed)
    COUNTS["zero or too-small workspaces"] += 1


# ---- 10. device targets that phase two must refuse before writing anything ---------------------------------

@budget(30)
@given(data=st.data())
def test_targets_are_checked_before_any_write(emu, abi, data):
    """Targets are device data: one outside [0, C) and not ignoreIndex fails phase two (361001) naming it,
    with nothing written; valid ones (ignoreIndex drawn too) run."""
    op = data.draw(st.sampled_from([NLL, NLL2D, CE, CEG, NLL2DB]), label="op")
    ignore = data.draw(st.one_of(st.just(-100), st.integers(-3, 5)), label="ignoreIndex")
    with emu.session() as s:
        d = op_args(s, op, reduction=data.draw(st.sampled_from([0, 1, 2]), label="reduction"))
        tb, base = buffer_of(s, abi, d["target"])
        tshape = describe(abi, d["target"])["shape"]
        n = math.prod(tshape)
        t = np.array(data.draw(st.lists(st.one_of(st.integers(-2, 4), st.sampled_from([-(2**63), 2**63 - 1, -100])),
                                        min_size=n, max_size=n), label="targets"), np.int64)
        s.rt.call("aclrtMemcpy", ptr_add(abi, tb.ptr, base), n * 8, abi.ffi.cast("void *", t.ctypes.data), n * 8,
                  C.ACL_MEMCPY_HOST_TO_DEVICE)
        d["ignoreIndex"] = ignore
        got, need, ex = abi.phase_one(op, *d.values())
        assert got == 0, abi.message()
        wsb = s.malloc(need) if need else None
        before = snapshot(s)
        got = abi.phase_two(op, wsb.ptr if wsb else abi.NULL, need, ex, s.stream)
        bad = [(i, int(v)) for i, v in enumerate(t) if v != ignore and not 0 <= v < 3]
        if bad:  # the first in row-major order, named by its flat index or (NLL2DB) by (n, h, w)
            where = ", ".join(map(str, np.unravel_index(bad[0][0], tshape))) if op == NLL2DB else bad[0][0]
            assert got == RUNTIME and f"target[{where}] = {bad[0][1]}" in abi.message(), (got, abi.message())
            assert_only_written(s, before)
        else:
            assert got == 0, abi.message()
            allowed = output_masks(s, abi, d, op)
            if wsb:
                allowed[id(wsb)] = np.ones(wsb.nbytes, bool)
            assert_only_written(s, before, allowed)
    COUNTS["device targets refused in phase two"] += 1
