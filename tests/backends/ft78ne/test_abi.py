"""The FT78NE/MT7004 C ABI of the emulator, called directly through cffi.

Vendor-side checks (core masks, private memory, chip, arguments, indices) each give their
status and leave outputs untouched; results never depend on the core mask; half precision
rounds to nearest even; the per-thread state is per thread.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from xloss.backends.ft78ne_shim import abi, capabilities, guards, staging

FT78NE, MT7004 = abi.CHIPS["ft78ne"], abi.CHIPS["mt7004"]
OK = "FT78NE_OK"
SENTINEL = 7.0
PRE = {"float32": "fp", "float16": "hp"}


# -- one concrete call per operator ------------------------------------------------------------


class Case:
    """Arrays of one vendor call and how to lay them into its argument list."""

    def __init__(self, op, dtype, arrays, args, outputs):
        self.op, self.dtype, self.arrays, self._args, self.outputs = op, np.dtype(dtype), arrays, args, outputs

    def fname(self, form):
        return f"{PRE[self.dtype.name]}_{self.op}_{form}"

    def args(self, emu, arrays=None, tail=()):
        arrays = self.arrays if arrays is None else arrays
        ptrs = {k: (v if not isinstance(v, np.ndarray) else emu.p(v)) for k, v in arrays.items()}
        return [*self._args(ptrs), *tail]

    def fresh(self):
        """A copy with the outputs reset to the sentinel."""
        arrays = {k: (np.full_like(v, SENTINEL) if k in self.outputs else v.copy()) for k, v in self.arrays.items()}
        return Case(self.op, self.dtype, arrays, self._args, self.outputs)


def bce_case(rng, dt, n=9233, red=0):
    a = dict(x=rng.uniform(0.01, 0.99, n).astype(dt), y=(rng.random(n) > 0.5).astype(dt),
             w=rng.uniform(0, 2, n).astype(dt),
             dl=(rng.uniform(-1, 1, n) if red == 0 else np.array([0.7])).astype(dt), dx=np.full(n, SENTINEL, dt))
    return Case("binarycrossentropygrad", dt, a, lambda p: [n, red, p["x"], p["y"], p["w"], p["dl"], p["dx"], 1],
                ("dx",))


def focal_case(rng, dt, n=9233, red=1):
    a = dict(x=rng.uniform(-8, 8, n).astype(dt), y=rng.uniform(0, 1, n).astype(dt),
             loss=np.full(n if red == 0 else 1, SENTINEL, dt))
    return Case("sigmoidfocalloss", dt, a, lambda p: [n, red, 0.25, 2.0, p["x"], p["y"], p["loss"]], ("loss",))


def focalgrad_case(rng, dt, n=9233, red=0):
    a = dict(x=rng.uniform(-8, 8, n).astype(dt), y=(rng.random(n) > 0.5).astype(dt),
             dl=(rng.uniform(-1, 1, n) if red == 0 else np.array([1.5])).astype(dt), dx=np.full(n, SENTINEL, dt))
    return Case("sigmoidfocallossgrad", dt, a,
                lambda p: [n, red, 0.5, 1.5, p["x"], p["y"], p["dl"], p["dx"]], ("dx",))


def nll_case(rng, dt, batch=37, classes=11, red=2):
    """The manual's layout; red: 0 none, 1 sum, 2 mean (nlllossgrad's own codes)."""
    t = rng.integers(0, classes, batch).astype(np.int32)
    a = dict(lg=rng.uniform(-3, 0, (batch, classes)).astype(dt),
             dl=(rng.uniform(-1, 1, batch) if red == 0 else np.array([0.5])).astype(dt), t=t,
             w=rng.uniform(0, 2, classes).astype(dt), tw=np.array([3.5], dt),
             dx=np.full((batch, classes), SENTINEL, dt))
    return Case("nlllossgrad", dt, a,
                lambda p: [p["lg"], p["dl"], p["t"], p["w"], p["tw"], p["dx"], batch, classes, red], ("dx",))


def flce_case(rng, dt, bt=13, h=5, v=11, softmax=False):
    x = rng.uniform(-1, 1, (bt, h)).astype(dt)
    w = rng.uniform(-1, 1, (v, h)).astype(dt)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    lm = logits.max(axis=1)
    se = np.exp(logits - lm[:, None]).sum(axis=1)
    mask = (rng.random(bt) < 0.3).astype(np.uint8)
    a = dict(grad=rng.uniform(-1, 1, bt).astype(np.float32), x=x, w=w, mask=mask,
             mt=np.where(mask == 1, 0, rng.integers(0, v, bt)).astype(np.int32),
             lm=lm.astype(np.float32), se=se.astype(np.float32),
             sm=(np.exp(logits - lm[:, None]) / se[:, None]).astype(np.float32),
             ig=np.full((bt, h), SENTINEL, dt), wg=np.full((v, h), SENTINEL, dt))
    return Case("fusedlinearcrossentropylossgrad", dt, a,
                lambda p: [bt, h, v, p["grad"], p["x"], p["w"], p["mask"], p["mt"], p["lm"], p["se"], p["sm"],
                           p["ig"], p["wg"], int(softmax)], ("ig", "wg"))


BUILDERS = {
    "bce": bce_case, "focal-mean": focal_case, "focal-sum": lambda r, d: focal_case(r, d, red=2),
    "focal-none": lambda r, d: focal_case(r, d, n=3077, red=0), "focalgrad": focalgrad_case,
    "focalgrad-mean": lambda r, d: focalgrad_case(r, d, red=1), "nll": nll_case,
    "nll-none": lambda r, d: nll_case(r, d, red=0), "flce": flce_case,
    "flce-softmax": lambda r, d: flce_case(r, d, softmax=True),
}
DTYPES = ("float32", "float16")


def tail(form, mask=0xFF):
    return (mask,) if form == "s" else ()


def run(emu, case, form="s", mask=0xFF, chip=MT7004):
    c = case.fresh()
    st = emu.call(c.fname(form), *c.args(emu, tail=tail(form, mask) if c.op != "fusedlinearcrossentropylossgrad"
                                          or form == "s" else (0,)), chip=chip)
    return st, c


def untouched(case):
    return all((case.arrays[o] == SENTINEL).all() for o in case.outputs)


# -- the ABI itself --------------------------------------------------------------------------


def _prototypes(text, pattern):
    return {m.group(1): re.sub(r"\s+", " ", m.group(2)).strip() for m in re.finditer(pattern, text, re.S)}


def test_header_and_cffi_declarations_agree():
    inc = abi.EMULATOR.parent / "include"
    header = (inc / "ft78ne.h").read_text()
    vendor_h = _prototypes(header, r"FT78NE_API void (\w+)\((.*?)\);")
    vendor_py = _prototypes(abi.VENDOR_CDEF, r"void (\w+)\((.*?)\);")
    assert len(vendor_h) == 28 and vendor_h == vendor_py
    assert set(vendor_h) == {f"{p}_{op}_{f}" for p in ("fp", "hp") for op in abi.OPS for f in ("s", "p")}
    emu_h = _prototypes((inc / "ft78ne_emu.h").read_text(), r"FT78NE_API [\w ]+?\**\s*(ft78ne_emu_\w+)\((.*?)\);")
    emu_py = _prototypes(abi.EMU_CDEF, r"[\w ]+?\**\s*(ft78ne_emu_\w+)\((.*?)\);")
    assert emu_h == emu_py and len(emu_h) == 14


def _defines(*names) -> dict:
    """``#define NAME value`` of the installed headers, values as Python numbers (C suffixes dropped)."""
    out = {}
    for name in names:
        text = (abi.EMULATOR.parent / "include" / name).read_text()
        for key, value in re.findall(r"^#define[ \t]+(\w+)[ \t]+([-+.\w]+)[ \t]*(?:/\*.*)?$", text, re.MULTILINE):
            for parse in (lambda v: int(v, 0), lambda v: int(v.rstrip("uU"), 0), lambda v: float(v.rstrip("fF"))):
                try:
                    out[key] = parse(value)
                    break
                except ValueError:
                    pass
    return out


def test_python_tables_match_the_headers():
    """Every code and constant the backend copies from ft78ne.h / ft78ne_emu.h has the header's value,
    and every status code the header defines has its name in abi.STATUS: a drift fails here."""
    d = _defines("ft78ne.h", "ft78ne_emu.h")
    status = {v: k for k, v in d.items() if k == "FT78NE_OK" or k.startswith("FT78NE_ERR_")}
    assert abi.STATUS == status and len(status) == 9
    assert abi.ERR_CAPACITY == d["FT78NE_ERR_CAPACITY"]
    assert abi.CHIPS == {chip: d[f"FT78NE_EMU_CHIP_{chip.upper()}"] for chip in abi.CHIPS}
    assert (abi.NUM_CORES, abi.CORE_MASK_ALL, abi.EXT_ABI) == (
        d["FT78NE_NUM_CORES"], d["FT78NE_CORE_MASK_ALL"], d["XLOSS_FT78NE_EXT_ABI"])
    assert staging.ALIGN == d["FT78NE_EMU_PRIVATE_ALIGN"]
    assert capabilities.BCE_EPS == d["FT78NE_BCE_EPS"]
    # reduction codes: the default table of every operator is its header's
    table = abi.code_table()
    for op in abi.OPS:
        prefix = "FT78NE_NLL_REDUCTION_" if op == "nlllossgrad" else "FT78NE_REDUCTION_"
        assert table[op] == {r: d[prefix + r.upper()] for r in abi.REDUCTIONS}, op
    # the checked mode's argument names are the header's parameter names (the _s form)
    header = "".join((abi.EMULATOR.parent / "include" / h).read_text()
                     for h in ("ft78ne.h", "fusedlinearonlinemaxsum.h", "fusedcrossentropylosswithmaxsum.h",
                               "nllloss.h", "binarycrossentropy.h", "softmax_cross_entropy_with_logits.h",
                               "sparse_softmax_cross_entropy_with_logits.h"))
    for op, names in guards.ARGS.items():
        params = re.search(rf"void fp_{op}_s\((.*?)\);", header, re.DOTALL).group(1)
        assert tuple(p.split()[-1].lstrip("*") for p in params.split(",")) == names, op


SEED_PROTOTYPES = (  # the vendor manual page, verbatim
    "void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y, float *weight, "
    "float *dloss, float *dx, int weight_defined, int core_mask)",
    "void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y, half *weight, "
    "half *dloss, half *dx, int weight_defined, int core_mask)",
    "void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y, float *weight, "
    "float *dloss, float *dx, int weight_defined)",
    "void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y, half *weight, "
    "half *dloss, half *dx, int weight_defined)",
    # the nlllossgrad page (its _s forms; the _p forms are assumed: see test_nll_private_forms_are_marked_assumed)
    "void fp_nlllossgrad_s(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight, "
    "float *logits_grad, int batch, int class_num, int reduction_type, int core_mask)",
    "void hp_nlllossgrad_s(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight, "
    "half *logits_grad, int batch, int class_num, int reduction_type, int core_mask)",
    "void fp_nlllossgrad_p(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight, "
    "float *logits_grad, int batch, int class_num, int reduction_type)",
    "void hp_nlllossgrad_p(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight, "
    "half *logits_grad, int batch, int class_num, int reduction_type)",
)


def test_ours_are_marked_and_vendor_pages_are_not():
    """Every prototype of an operator with no vendor page carries OURS; the manual's do not."""
    header = "".join((abi.EMULATOR.parent / "include" / h).read_text()
                     for h in ("ft78ne.h", "fusedlinearonlinemaxsum.h", "fusedcrossentropylosswithmaxsum.h"))
    for line in header.splitlines():
        m = re.search(r"FT78NE_API \w+ \**(\w+)\(", line)
        if m:
            ours = any(op in m.group(1) for op in abi.OURS_OPS) or m.group(1) == abi.EXT_MARKER
            assert ("/* OURS */" in line) == ours, line


def test_nll_private_forms_are_marked_assumed():
    """The stored nlllossgrad manual page shows the _s prototypes only: the header marks its _p forms
    ASSUMED right above them, and the README's operator table says so (issue 27)."""
    source = Path(__file__).resolve().parents[3] / "backends" / "ft78ne_shim"  # the README is not installed
    header = (source / "include" / "ft78ne.h").read_text()
    before = header[:header.index("FT78NE_API void fp_nlllossgrad_p(")].rstrip()
    assert before.endswith("*/") and "ASSUMED" in before[before.rindex("/*"):]
    readme = (source / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `nlllossgrad` |"))
    assert "**`_p`: assumed**" in row and "no `_p` prototype" in row


def test_bce_prototypes_are_the_manuals():
    header = re.sub(r"\s+", " ", (abi.EMULATOR.parent / "include" / "ft78ne.h").read_text())
    for proto in SEED_PROTOTYPES:
        assert "FT78NE_API " + proto + ";" in header


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_exports_exactly_the_abi_and_the_helpers(emu):
    out = subprocess.run(["nm", "-D", "--defined-only", str(abi.EMULATOR)], capture_output=True, text=True,
                         check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.split()[-2] in "TDB"}
    expected = set(_prototypes(abi.VENDOR_CDEF + abi.VOCAB_PARALLEL_CDEF + abi.LOSS_FORWARD_CDEF + abi.SOFTMAX_CE_CDEF
                               + abi.SCE_I8_CDEF, r"void (\w+)\((.*?)\);")) | set(
        _prototypes(abi.EMU_CDEF, r"(ft78ne_emu_\w+)\((.*?)\);")) | {abi.EXT_MARKER}
    assert names == expected


# -- core masks ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("dt", DTYPES)
def test_bad_core_mask_is_refused_and_outputs_untouched(emu, kind, dt):
    case = BUILDERS[kind](np.random.default_rng(1), dt)
    for mask in (0, 0x100, 0x1FF, -1, -256, 2**31 - 1):
        (st, msg), c = run(emu, case, "s", mask)
        assert st == "FT78NE_ERR_CORE_MASK", (mask, msg)
        assert "core_mask" in msg and c.fname("s") in msg
        assert untouched(c)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("dt", DTYPES)
def test_every_core_mask_gives_the_same_bits(emu, kind, dt):
    """Each output element is produced by one core in a fixed order; reductions sum fixed blocks."""
    case = BUILDERS[kind](np.random.default_rng(2), dt)
    st, first = run(emu, case, "s", 0xFF)
    assert st[0] == OK, st
    assert not untouched(first)
    for mask in range(1, 256):
        st, c = run(emu, case, "s", mask)
        assert st[0] == OK
        for o in c.outputs:
            np.testing.assert_array_equal(c.arrays[o].view(np.uint8), first.arrays[o].view(np.uint8),
                                          err_msg=f"core_mask {mask:#x}, output {o}")


# -- private memory --------------------------------------------------------------------------


def in_private(emu, case, core=0):
    """The case with every array copied into core's private memory; returns (case, raw pointers)."""
    views, raws = {}, []
    for k, v in case.arrays.items():
        views[k], raw = emu.private(core, v)
        raws.append(raw)
    return Case(case.op, case.dtype, views, case._args, case.outputs), raws


def p_tail(case):
    return (0,) if case.op == "fusedlinearcrossentropylossgrad" else ()


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("dt", DTYPES)
def test_private_call_matches_shared_bits(emu, kind, dt):
    case = BUILDERS[kind](np.random.default_rng(3), dt)
    st, shared = run(emu, case, "s", 0x5A)
    assert st[0] == OK
    emu.lib.ft78ne_emu_set_core(3)
    pc, raws = in_private(emu, case.fresh(), core=3)
    try:
        st = emu.call(pc.fname("p"), *pc.args(emu, tail=p_tail(pc)))
        assert st[0] == OK, st
        for o in pc.outputs:
            np.testing.assert_array_equal(pc.arrays[o].view(np.uint8), shared.arrays[o].view(np.uint8))
    finally:
        emu.release(3, *raws)
        emu.lib.ft78ne_emu_set_core(0)


@pytest.mark.parametrize("kind", ["bce", "focal-mean", "focalgrad", "nll", "flce", "flce-softmax"])
def test_private_refuses_any_buffer_outside_the_core_and_leaves_outputs(emu, kind):
    case = BUILDERS[kind](np.random.default_rng(4), "float32")
    emu.lib.ft78ne_emu_set_core(0)
    pc, raws = in_private(emu, case.fresh(), core=0)
    other, other_raws = in_private(emu, case.fresh(), core=1)  # the right memory, but core 1's
    try:
        used = [k for k in pc.arrays if not (kind == "flce" and k == "sm") and not (kind == "flce-softmax"
                                                                                    and k in ("lm", "se"))
                and not (kind == "nll" and k == "lg")]  # logits: read for its size only, never accessed
        for name in used:
            for elsewhere in (case.fresh().arrays[name], other.arrays[name]):  # DDR, then core 1
                arrays = dict(pc.arrays, **{name: elsewhere})
                st, msg = emu.call(pc.fname("p"), *pc.args(emu, arrays, tail=p_tail(pc)))
                assert st == "FT78NE_ERR_NOT_PRIVATE", (name, msg)
                assert "core 0's private memory" in msg
                for o in pc.outputs:
                    assert (arrays[o] == SENTINEL).all()
    finally:
        emu.release(0, *raws)
        emu.release(1, *other_raws)


def test_private_buffer_must_lie_wholly_inside(emu):
    lib, ffi = emu.lib, emu.ffi
    cap = int(lib.ft78ne_emu_private_capacity())
    base = ffi.cast("char *", lib.ft78ne_emu_private_base(0))
    lib.ft78ne_emu_set_core(0)
    n = 16
    x = ffi.cast("float *", base)
    out = ffi.cast("float *", base + 64 * 4)
    tail_ptr = ffi.cast("float *", base + cap - 8)  # two floats from the end: 16 of them straddle it
    st, msg = emu.call("fp_sigmoidfocalloss_p", n, 0, 0.25, 2.0, x, x, tail_ptr)
    assert st == "FT78NE_ERR_NOT_PRIVATE" and "loss" in msg
    before = ffi.cast("float *", base - 64)  # just below the arena
    assert emu.call("fp_sigmoidfocalloss_p", n, 0, 0.25, 2.0, before, x, out)[0] == "FT78NE_ERR_NOT_PRIVATE"
    assert emu.call("fp_sigmoidfocalloss_p", n, 0, 0.25, 2.0, x, x, out)[0] == OK  # fixed offsets are fine
    # a size whose buffers exceed the whole private memory is over capacity, whatever the pointer
    big = cap // 4 + 1
    st, msg = emu.call("fp_sigmoidfocalloss_p", big, 1, 0.25, 2.0, x, x, out)
    assert st == "FT78NE_ERR_CAPACITY" and f"({cap} bytes)" in msg


def test_private_scratch_over_capacity_is_refused_untouched_and_released(emu):
    """FLCE's row accumulator is private scratch: a call that leaves no room for it is over capacity."""
    lib, ffi = emu.lib, emu.ffi
    case = flce_case(np.random.default_rng(5), "float32", bt=4, h=96, v=3).fresh()
    lib.ft78ne_emu_set_core(2)
    pc, raws = in_private(emu, case, core=2)
    cap = int(lib.ft78ne_emu_private_capacity())
    staged = int(lib.ft78ne_emu_private_in_use(2))
    filler = lib.ft78ne_emu_private_alloc(2, cap - staged - 64)  # leaves 64 bytes: not the 384 of scratch
    assert filler != ffi.NULL
    try:
        used = int(lib.ft78ne_emu_private_in_use(2))
        st, msg = emu.call(pc.fname("p"), *pc.args(emu, tail=(0,)))
        assert st == "FT78NE_ERR_CAPACITY" and "384 bytes of private scratch on core 2" in msg, msg
        assert untouched(pc) and int(lib.ft78ne_emu_private_in_use(2)) == used
        emu.release(2, filler)
        filler = None
        assert emu.call(pc.fname("p"), *pc.args(emu, tail=(0,)))[0] == OK
        assert int(lib.ft78ne_emu_private_in_use(2)) == staged and not untouched(pc)
    finally:
        if filler is not None:
            emu.release(2, filler)
        emu.release(2, *raws)
        lib.ft78ne_emu_set_core(0)
    assert int(lib.ft78ne_emu_private_in_use(2)) == 0


def test_private_allocator(emu):
    lib, ffi = emu.lib, emu.ffi
    cap = int(lib.ft78ne_emu_private_capacity())
    if "FT78NE_EMU_PRIVATE_BYTES" not in os.environ:
        assert cap == 768 * 1024  # the documented default
    base = int(ffi.cast("uintptr_t", lib.ft78ne_emu_private_base(5)))
    ptrs = [lib.ft78ne_emu_private_alloc(5, n) for n in (0, 1, 63, 64, 65, 1000)]
    addrs = [int(ffi.cast("uintptr_t", p)) for p in ptrs]
    assert all(a % 64 == 0 and base <= a < base + cap for a in addrs) and len(set(addrs)) == len(addrs)
    assert int(lib.ft78ne_emu_private_in_use(5)) == 64 * (1 + 1 + 1 + 1 + 2 + 16)
    assert lib.ft78ne_emu_private_alloc(5, cap) == ffi.NULL  # does not fit next to the others
    st, msg = emu.status()
    assert st == "FT78NE_ERR_CAPACITY" and "core 5" in msg and f"capacity {cap} bytes" in msg
    assert lib.ft78ne_emu_private_alloc(5, cap + 1) == ffi.NULL and emu.status()[0] == "FT78NE_ERR_CAPACITY"
    assert lib.ft78ne_emu_private_free(4, ptrs[0]) == 2  # another core's block
    assert "not a live allocation in core 4" in emu.status()[1]
    assert lib.ft78ne_emu_private_free(5, ffi.NULL) == 0
    for p in ptrs:
        assert lib.ft78ne_emu_private_free(5, p) == 0
    assert lib.ft78ne_emu_private_free(5, ptrs[0]) == 2  # double free is refused
    whole = lib.ft78ne_emu_private_alloc(5, cap)  # everything again once empty
    assert int(ffi.cast("uintptr_t", whole)) == base
    assert lib.ft78ne_emu_private_free(5, whole) == 0
    for bad in (-1, 8):
        assert lib.ft78ne_emu_private_alloc(bad, 64) == ffi.NULL and emu.status()[0] == "FT78NE_ERR_INVALID_ARGUMENT"
        assert lib.ft78ne_emu_private_base(bad) == ffi.NULL
        assert lib.ft78ne_emu_set_core(bad) == 2 and "core must be in 0..7" in emu.status()[1]


def test_private_capacity_is_configurable_when_empty(emu):
    lib, ffi = emu.lib, emu.ffi
    default = int(lib.ft78ne_emu_private_capacity())
    p = lib.ft78ne_emu_private_alloc(6, 10)
    try:
        assert lib.ft78ne_emu_set_private_capacity(4096) == 2
        assert "core 6's private memory holds 1 allocation" in emu.status()[1]
    finally:
        emu.release(6, p)
    try:
        assert lib.ft78ne_emu_set_private_capacity(4000) == 0
        assert int(lib.ft78ne_emu_private_capacity()) == 4032  # rounded up to 64 bytes
        assert lib.ft78ne_emu_private_alloc(6, 4033) == ffi.NULL
        q = lib.ft78ne_emu_private_alloc(6, 4032)
        assert q != ffi.NULL
        emu.release(6, q)
        for bad in (0, 63, 2**30 + 1):
            assert lib.ft78ne_emu_set_private_capacity(bad) == 2
    finally:
        assert lib.ft78ne_emu_set_private_capacity(default) == 0


@pytest.mark.parametrize("env, expr, expected", [
    ({"FT78NE_EMU_CHIP": "MT7004"}, "ft78ne_emu_chip()", 1),
    ({}, "ft78ne_emu_chip()", 0),
    ({"FT78NE_EMU_PRIVATE_BYTES": "100000"}, "ft78ne_emu_private_capacity()", 100032),
    ({"FT78NE_EMU_PRIVATE_BYTES": "nonsense"}, "ft78ne_emu_private_capacity()", 768 * 1024),
])
def test_process_defaults_come_from_the_environment(emu, env, expr, expected, monkeypatch):
    monkeypatch.delenv("FT78NE_EMU_CHIP", raising=False)
    monkeypatch.delenv("FT78NE_EMU_PRIVATE_BYTES", raising=False)
    code = (f"import ctypes; lib = ctypes.CDLL({str(abi.EMULATOR)!r}); "
            f"lib.ft78ne_emu_private_capacity.restype = ctypes.c_size_t; print(lib.{expr})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout
    assert int(out) == expected


# -- chip, arguments, indices ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_ft78ne_refuses_half_precision(emu, kind):
    case = BUILDERS[kind](np.random.default_rng(6), "float16")
    (st, msg), c = run(emu, case, "s", 0xFF, chip=FT78NE)
    assert st == "FT78NE_ERR_UNSUPPORTED" and "FT78NE supports fp32 only" in msg and untouched(c)
    (st, _), c = run(emu, case, "s", 0xFF, chip=MT7004)
    assert st == OK and not untouched(c)
    (st, _), c = run(emu, BUILDERS[kind](np.random.default_rng(6), "float32"), "s", 0xFF, chip=FT78NE)
    assert st == OK


def test_chip_selection(emu):
    lib = emu.lib
    assert lib.ft78ne_emu_set_chip(MT7004) == 0 and lib.ft78ne_emu_chip() == MT7004
    assert lib.ft78ne_emu_set_chip(7004) == 2 and lib.ft78ne_emu_chip() == MT7004
    assert "chip must be 0 (FT78NE) or 1 (MT7004)" in emu.status()[1]
    assert lib.ft78ne_emu_num_cores() == 8


def test_argument_checks(emu):
    x = np.full(4, 0.5, np.float32)
    out = np.full(4, SENTINEL, np.float32)
    p, NULL = emu.p, emu.ffi.NULL
    checks = [
        (("fp_binarycrossentropygrad_s", -1, 0, p(x), p(x), NULL, p(x), p(out), 0, 0xFF), "INVALID_ARGUMENT",
         "input_size must be >= 0"),
        (("fp_binarycrossentropygrad_s", 4, 3, p(x), p(x), NULL, p(x), p(out), 0, 0xFF), "INVALID_ARGUMENT",
         "reduction must be 0 (none), 1 (mean) or 2 (sum), got 3"),
        (("fp_binarycrossentropygrad_s", 4, 0, p(x), p(x), NULL, p(x), p(out), 1, 0xFF), "NULL_POINTER",
         "weight is NULL but 16 bytes"),
        (("fp_binarycrossentropygrad_s", 4, 1, p(x), NULL, NULL, p(x), p(out), 0, 0xFF), "NULL_POINTER",
         "input_y is NULL"),
        (("fp_binarycrossentropygrad_s", 4, 1, p(x), p(x), NULL, NULL, p(out), 0, 0xFF), "NULL_POINTER",
         "dloss is NULL but 4 bytes"),
        (("fp_sigmoidfocalloss_s", 4, 0, 1.5, 2.0, p(x), p(x), p(out), 0xFF), "INVALID_ARGUMENT",
         "alpha must be in [0, 1]"),
        (("fp_sigmoidfocalloss_s", 4, 0, float("nan"), 2.0, p(x), p(x), p(out), 0xFF), "INVALID_ARGUMENT", "alpha"),
        (("fp_sigmoidfocallossgrad_s", 4, 0, 0.25, -1.0, p(x), p(x), p(x), p(out), 0xFF), "INVALID_ARGUMENT",
         "gamma must be finite and >= 0"),
        (("fp_sigmoidfocallossgrad_s", 4, 0, 0.25, float("inf"), p(x), p(x), p(x), p(out), 0xFF),
         "INVALID_ARGUMENT", "gamma"),
        (("fp_sigmoidfocalloss_s", 4, 1, 0.25, 2.0, p(x), p(x), NULL, 0xFF), "NULL_POINTER", "loss is NULL"),
        (("fp_nlllossgrad_s", NULL, p(x), NULL, NULL, NULL, p(out), 2, -2, 0, 0xFF), "INVALID_ARGUMENT",
         "batch and class_num must be >= 0"),
        (("fp_nlllossgrad_s", NULL, p(x), p(np.zeros(2, np.int32)), p(x), NULL, p(out), 2, 2, 2, 0xFF),
         "NULL_POINTER", "total_weight is NULL"),
        (("fp_nlllossgrad_s", NULL, p(x), p(np.zeros(2, np.int32)), NULL, NULL, p(out), 2, 2, 1, 0xFF),
         "NULL_POINTER", "weight is NULL"),
        (("fp_nlllossgrad_s", NULL, p(x), p(np.zeros(2, np.int32)), p(x), p(x), p(out), 2, 2, 3, 0xFF),
         "INVALID_ARGUMENT", "reduction_type must be 0 (none), 1 (sum) or 2 (mean)"),
        (("fp_fusedlinearcrossentropylossgrad_s", 1, -1, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
          NULL, 0, 0xFF), "INVALID_ARGUMENT", "bt, hidden and vocab must be >= 0"),
        (("fp_fusedlinearcrossentropylossgrad_s", 1, 1, 1, p(x), p(x), p(x), p(np.zeros(1, np.uint8)),
          p(np.zeros(1, np.int32)), NULL, p(x), NULL, p(out), p(out), 0, 0xFF), "NULL_POINTER",
         "logits_max is NULL"),
    ]
    for call, status, text in checks:
        st, msg = emu.call(*call)
        assert st == "FT78NE_ERR_" + status and text in msg and call[0] in msg, (call[0], msg)
        assert (out == SENTINEL).all()
    # buffers a call does not touch may be NULL: no weight, nothing at all for size 0
    assert emu.call("fp_binarycrossentropygrad_s", 4, 1, p(x), p(x), NULL, p(x), p(out), 0, 0xFF)[0] == OK
    assert emu.call("fp_binarycrossentropygrad_s", 0, 1, NULL, NULL, NULL, NULL, NULL, 1, 0xFF)[0] == OK
    assert emu.call("fp_nlllossgrad_s", NULL, NULL, NULL, NULL, NULL, NULL, 0, 5, 2, 0xFF)[0] == OK
    assert emu.call("fp_fusedlinearcrossentropylossgrad_s", 0, 0, 0, *[NULL] * 10, 1, 0xFF)[0] == OK
    # a successful call clears the previous error
    assert emu.call("fp_sigmoidfocalloss_s", -1, 0, 0.25, 2.0, NULL, NULL, NULL, 0xFF)[0] != OK
    assert emu.call("fp_sigmoidfocalloss_s", 0, 0, 0.25, 2.0, NULL, NULL, NULL, 0xFF) == (OK, "")


def test_size_zero_reductions(emu):
    loss = np.full(1, SENTINEL, np.float32)
    NULL = emu.ffi.NULL
    assert emu.call("fp_sigmoidfocalloss_s", 0, 1, 0.25, 2.0, NULL, NULL, emu.p(loss), 0xFF)[0] == OK
    assert np.isnan(loss[0])  # the mean of nothing, as PyTorch
    assert emu.call("fp_sigmoidfocalloss_s", 0, 2, 0.25, 2.0, NULL, NULL, emu.p(loss), 0xFF)[0] == OK
    assert loss[0] == 0.0


def test_nll_label_out_of_range_is_refused_before_any_write(emu):
    """The manual: labels must lie in [0, class_num). There is no ignore_index (-100 is refused too)."""
    for bad in (11, -3, -100):
        case = nll_case(np.random.default_rng(7), "float32").fresh()
        case.arrays["t"][30] = bad
        (st, msg), c = run(emu, case, "s", 0xFF)
        assert st == "FT78NE_ERR_INDEX" and f"labels[30] = {bad} is out of range" in msg and untouched(c)


@pytest.mark.parametrize("dt", DTYPES)
def test_nll_manual_semantics(emu, dt):
    """logits is never read (NULL is fine); loss_grad[0] only for sum/mean; total_weight (of the
    dtype) only for mean; codes 0 none, 1 sum, 2 mean."""
    NULL = emu.ffi.NULL
    t = np.array([0, 2, 1, 2], np.int32)
    w = np.array([1.0, 2.0, 4.0], dt)
    tw = np.array([2.0], dt)
    exact = {0: None, 1: -1.0, 2: -0.5}  # g = 1: none reads loss_grad[i], sum g, mean g / total_weight
    for red, scale in exact.items():
        dl = np.array([1.0, 0.5, -1.0, 2.0], dt) if red == 0 else np.array([1.0, 99.0, 99.0, 99.0], dt)
        dx = np.full((4, 3), SENTINEL, dt)
        assert emu.call(f"{'hp' if dt == 'float16' else 'fp'}_nlllossgrad_s", NULL, emu.p(dl), emu.p(t), emu.p(w),
                        emu.p(tw) if red == 2 else NULL, emu.p(dx), 4, 3, red, 0x03, chip=MT7004)[0] == OK
        expected = np.zeros((4, 3), dt)
        g = -dl.astype(np.float64) if red == 0 else np.full(4, scale)
        expected[np.arange(4), t] = w[t].astype(np.float64) * g
        np.testing.assert_array_equal(dx, expected)


def test_flce_masked_target_out_of_range(emu):
    case = flce_case(np.random.default_rng(8), "float32").fresh()
    row = int(np.nonzero(case.arrays["mask"] == 0)[0][0])
    case.arrays["mt"][row] = 11
    (st, msg), c = run(emu, case, "s", 0xFF)
    assert st == "FT78NE_ERR_INDEX" and f"masked_target[{row}] = 11" in msg and untouched(c)
    masked = int(np.nonzero(case.arrays["mask"] == 1)[0][0])
    case.arrays["mt"][row] = 0
    case.arrays["mt"][masked] = -99  # never read: the token's target is in another shard
    (st, _), c = run(emu, case, "s", 0xFF)
    assert st == OK


def test_flce_private_accumulate_adds(emu):
    case = flce_case(np.random.default_rng(9), "float32")
    st, fresh = run(emu, case, "s")
    assert st[0] == OK
    emu.lib.ft78ne_emu_set_core(0)
    pc, raws = in_private(emu, case.fresh())
    try:
        prior = {o: np.random.default_rng(10).uniform(-1, 1, pc.arrays[o].shape).astype(np.float32)
                 for o in pc.outputs}
        for o in pc.outputs:
            pc.arrays[o][...] = prior[o]
        assert emu.call(pc.fname("p"), *pc.args(emu, tail=(1,)))[0] == OK
        for o in pc.outputs:
            np.testing.assert_allclose(pc.arrays[o], prior[o] + fresh.arrays[o], rtol=1e-6, atol=1e-6)
        assert emu.call(pc.fname("p"), *pc.args(emu, tail=(0,)))[0] == OK  # 0 overwrites
        for o in pc.outputs:
            np.testing.assert_array_equal(pc.arrays[o], fresh.arrays[o])
    finally:
        emu.release(0, *raws)


# -- half precision -----------------------------------------------------------------------------


def test_every_half_value_round_trips(emu):
    """dx = -dloss for (N, 1) input, target 0: half -> float -> half for all 65536 bit patterns."""
    bits = np.arange(65536, dtype=np.uint16)
    dl = bits.view(np.float16)
    dx = np.zeros((65536, 1), np.float16)
    t = np.zeros(65536, np.int32)
    st = emu.call("hp_nlllossgrad_s", emu.ffi.NULL, emu.p(dl), emu.p(t), emu.p(np.ones(1, np.float16)),
                  emu.ffi.NULL, emu.p(dx), 65536, 1, 0, 0xFF)
    assert st[0] == OK
    got = dx.reshape(-1).view(np.uint16)
    nan = np.isnan(dl)
    np.testing.assert_array_equal(got[~nan], bits[~nan] ^ 0x8000)
    assert np.isnan(dx.reshape(-1)[nan]).all()
    assert ((got[nan] & 0x0200) != 0).all()  # quiet


def test_half_results_round_to_nearest_even(emu):
    """w * -g of two halves is exact in float32; the stored half must be NumPy's RNE rounding of it,
    including ties (w = 3, g = 1 + 2^-10), subnormals and overflow."""
    rng = np.random.default_rng(11)
    classes, batch = 2048, 65536
    w = rng.integers(0, 0x7C00, classes, dtype=np.uint16).view(np.float16)  # every finite positive range
    w[:4] = [3.0, 1.5, 2.0**-14, 65504.0]
    g = rng.integers(0, 0x7C00, batch, dtype=np.uint16).view(np.float16)
    t = rng.integers(0, classes, batch).astype(np.int32)
    t[:4], g[:4] = [0, 1, 2, 3], [np.float16(1 + 2**-10), np.float16(1 + 3 * 2**-10), np.float16(0.75), 2.0]
    dx = np.zeros((batch, classes), np.float16)
    st = emu.call("hp_nlllossgrad_s", emu.ffi.NULL, emu.p(g), emu.p(t), emu.p(w), emu.ffi.NULL, emu.p(dx), batch,
                  classes, 0, 0xFF)
    assert st[0] == OK
    exact = w[t].astype(np.float32) * -g.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = exact.astype(np.float16)
    got = dx[np.arange(batch), t]
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
    assert got[0] == np.float16(-3.0 - 2**-8)  # 3 + 3*2^-10 is a tie: to the even neighbour
    assert np.isinf(got[3]) and (np.abs(got) < 2**-14).any() and (got != 0).any()


# -- threads ----------------------------------------------------------------------------------------


def test_concurrent_callers_keep_their_own_chip_error_and_core(emu):
    """Many threads, each with its own chip and core, some failing: every one sees its own state."""
    rng = np.random.default_rng(12)
    cases = [BUILDERS[k](rng, dt) for k in ("bce", "focal-mean", "nll", "flce") for dt in DTYPES]
    expected = []
    for c in cases:
        st, done = run(emu, c, "s")
        assert st[0] == OK
        expected.append(done)
    failures = []

    def worker(i):
        try:
            lib = emu.lib
            for rep in range(15):
                j = (i + rep) % len(cases)
                chip = FT78NE if (i + rep) % 3 == 0 else MT7004
                lib.ft78ne_emu_set_core(i % 8)
                (st, msg), c = run(emu, cases[j], "s", 0xFF >> (i % 8), chip=chip)
                if cases[j].dtype == np.float16 and chip == FT78NE:
                    assert st == "FT78NE_ERR_UNSUPPORTED" and untouched(c)
                else:
                    assert st == OK, msg
                    for o in c.outputs:
                        np.testing.assert_array_equal(c.arrays[o], expected[j].arrays[o])
                assert lib.ft78ne_emu_chip() == chip and lib.ft78ne_emu_core() == i % 8
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    emu.lib.ft78ne_emu_set_core(0)
