"""Hostile-argument fuzzing of the FT78NE/MT7004 emulator's raw C entry points (issue 9).

Every vendor function (fp_/hp_ x _s/_p x eleven operators: the first five, and issue 30's nllloss,
binarycrossentropy, sigmoidcrossentropywithlogits and its grad, softmax_cross_entropy_with_logits and
its sparse form; and the FT78NE's int8 forms i8_sigmoidcrossentropywithlogits_s/_p and i8_nllloss_s, on
the FT78NE chip) is called through cffi with arguments drawn by hypothesis per category: NULL in any buffer
position; negative, huge and overflowing sizes; bad core masks; private buffers outside the
arena, straddling its ends, in another core's arena, freed, at unallocated fixed offsets, overlapping,
misaligned; FLCE ``accumulate`` and output garbage; bad reduction codes; garbage need_grads/is_grad
flags; the sparse form's inconsistent or huge uint64 geometry; NaN/inf/out-of-range alpha and gamma;
garbage class indices; and the emulator helpers with garbage. The example budget per category is
shared by all the operators drawn; test_int8_forms runs the categories that reach an i8_ function again on
those alone, with valid calls whose int8 values saturate the results.

The oracle is a Python model of the documented contract (backends/ft78ne_shim/README.md: which
bytes each buffer spans, the order of the checks, the status of each refusal), written apart
from the C. Each call must give the model's status; every buffer sits in a backing region with
guard bytes, and after the call no byte outside the outputs' extents may have changed (none at
all after a refusal). Accepted calls are compared with float64 NumPy formulas. The run with the
ASan/UBSan build of the emulator (test_ft78ne_sanitizers.py) runs this module too.
"""

from __future__ import annotations

import collections
import math
import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from xloss.backends.ft78ne_shim import abi

if os.environ.get(abi.ENV_VAR):
    pytest.skip(f"fuzzes the in-tree emulator, but {abi.ENV_VAR} selects another library", allow_module_level=True)

EXAMPLES = int(os.environ.get("XLOSS_FT78NE_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

FUZZ_MORE = settings(FUZZ, max_examples=2 * EXAMPLES)  # the categories with the most shapes of hostility
FUZZ_HALF = settings(FUZZ, max_examples=max(EXAMPLES // 2, 5))  # the categories of one or two operators

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
GUARD = 64
PATTERN = 0xA7
OK, NULLP, INVALID, MASK, NOT_PRIVATE, CAPACITY, UNSUPPORTED, INDEX = (
    "FT78NE_OK", "FT78NE_ERR_NULL_POINTER", "FT78NE_ERR_INVALID_ARGUMENT", "FT78NE_ERR_CORE_MASK",
    "FT78NE_ERR_NOT_PRIVATE", "FT78NE_ERR_CAPACITY", "FT78NE_ERR_UNSUPPORTED", "FT78NE_ERR_INDEX")
FT78NE, MT7004 = abi.CHIPS["ft78ne"], abi.CHIPS["mt7004"]

COUNTS: collections.Counter = collections.Counter()
OUTCOMES: collections.Counter = collections.Counter()  # (category, status) of the vendor calls
INT8_CALLS: collections.Counter = collections.Counter()  # (function, status) of the i8_ calls


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None and COUNTS:
        with capman.global_and_fixture_disabled():  # past output capture, onto the terminal
            tr.write_line("")
            tr.write_line(f"ft78ne ABI fuzz: {sum(COUNTS.values())} cases")
            for k, v in sorted(COUNTS.items()):
                mix = ", ".join(f"{st.replace('FT78NE_ERR_', '').replace('FT78NE_', '')} {m}"
                                for (cat, st), m in sorted(OUTCOMES.items()) if cat == k)
                tr.write_line(f"  {k:<36} {v:>5}" + (f"  ({mix})" if mix else ""))
            for fn in sorted({fn for fn, _ in INT8_CALLS}):
                mix = ", ".join(f"{st.replace('FT78NE_ERR_', '').replace('FT78NE_', '')} {m}"
                                for (f, st), m in sorted(INT8_CALLS.items()) if f == fn)
                tr.write_line(f"  of them {fn:<28} {sum(m for (f, _), m in INT8_CALLS.items() if f == fn):>5}  ({mix})")


@pytest.fixture(scope="module")
def lib():
    lib = abi.load([str(abi.EMULATOR)])
    yield lib
    assert all(int(lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8)), "the fuzzer leaked arena blocks"


# -- the contract, as a model ------------------------------------------------------------------

T, F32, I32, U8 = "T", "float32", "int32", "uint8"  # T: the function's float type (float32 or float16)
IN, OUT, INPLACE = "in", "out", "inplace"


@dataclass
class Buf:
    name: str
    kind: str  # T, F32, I32, U8
    role: str
    extent: int  # bytes the call accesses (0: none)
    align: int


def _dt(prefix):
    return np.dtype({"hp": np.float16, "i8": np.int8}.get(prefix, np.float32))


#: the FT78NE's int8 forms (i8_ prefix, FT78NE only), by operator: the memory forms the manual's pages show
INT8_FORMS = {"sce": ("s", "p"), "nllf": ("s",)}


def model_buffers(op, prefix, ints) -> list[Buf]:
    """Each buffer of the call, in ABI order, with the bytes the documented contract says it spans
    (a negative size is refused before any buffer is looked at: its buffers are laid out empty)."""
    es = _dt(prefix).itemsize
    if op == "ssmce" and sparse_geometry_error(ints):
        return [Buf(name, kind, role, 0, a) for name, kind, role, a in SSMCE_BUFS]  # refused before any buffer
    ints = {k: (max(v, 0) if k in ("n", "batch", "classes", "bt", "hidden", "vocab", "length") else v)
            for k, v in ints.items()}
    if op in NEW_BUFFERS:
        return NEW_BUFFERS[op](ints, es)
    if op in ("bce", "focal", "focalgrad"):
        n, red = ints["n"], ints["reduction"]
        dl = 0 if n == 0 else (n * es if red == 0 else es)
        if op == "bce":
            return [Buf("input_x", T, IN, n * es, es), Buf("input_y", T, IN, n * es, es),
                    Buf("weight", T, IN, n * es if ints["weight_defined"] else 0, es),
                    Buf("dloss", T, IN, dl, es), Buf("dx", T, INPLACE, n * es, es)]
        if op == "focal":
            return [Buf("input_x", T, IN, n * es, es), Buf("input_y", T, IN, n * es, es),
                    Buf("loss", T, INPLACE if red == 0 else OUT, n * es if red == 0 else es, es)]
        return [Buf("input_x", T, IN, n * es, es), Buf("input_y", T, IN, n * es, es), Buf("dloss", T, IN, dl, es),
                Buf("dx", T, INPLACE, n * es, es)]
    if op == "nll":
        b, c, red = ints["batch"], ints["classes"], ints["reduction"]
        # the manual's page: logits is read for its size only (never accessed); codes 0 none, 1 sum, 2 mean
        return [Buf("logits", T, IN, 0, es), Buf("loss_grad", T, IN, 0 if b == 0 else (b * es if red == 0 else es), es),
                Buf("labels", I32, IN, b * 4, 4), Buf("weight", T, IN, c * es if b else 0, es),
                Buf("total_weight", T, IN, es if red == 2 and b else 0, es), Buf("logits_grad", T, OUT, b * c * es, es)]
    bt, h, v, sm = ints["bt"], ints["hidden"], ints["vocab"], ints["softmax_defined"] != 0
    return [Buf("grad", F32, IN, bt * 4, 4), Buf("input", T, IN, bt * h * es, es), Buf("weight", T, IN, v * h * es, es),
            Buf("target_mask", U8, IN, bt, 1), Buf("masked_target", I32, IN, bt * 4, 4),
            Buf("logits_max", F32, IN, 0 if sm else bt * 4, 4), Buf("sum_exp_logits", F32, IN, 0 if sm else bt * 4, 4),
            Buf("softmax", F32, IN, bt * v * 4 if sm else 0, 4), Buf("input_grad", T, OUT, bt * h * es, es),
            Buf("weight_grad", T, OUT, v * h * es, es)]


def _nllf_bufs(i, es):
    b, c, red = i["batch"], i["classes"], i["reduction"]
    out, oes = (I32, 4) if es == 1 else (T, es)  # i8_nllloss_s: int8 log_probs and weight, int32 loss and total
    return [Buf("log_probs", T, IN, b * c * es, es), Buf("labels", I32, IN, b * 4, 4),
            Buf("weight", T, IN, c * es if b else 0, es), Buf("loss", out, OUT, b * oes if red == 0 else oes, oes),
            Buf("total_weight", out, OUT, oes, oes)]


def _bcef_bufs(i, es):
    n = i["n"]
    return [Buf("input_x", T, IN, n * es, es), Buf("input_y", T, IN, n * es, es),
            Buf("weight", T, IN, n * es if i["weight_defined"] else 0, es),
            Buf("loss", T, OUT, n * es if i["reduction"] == 0 else es, es), Buf("tmp_loss", T, OUT, n * es, es)]


def _sce_bufs(i, es, grad):
    n = i["length"]
    return [Buf("Input0" if grad else "input0", T, IN, n * es, es), Buf("Input1" if grad else "input1", T, IN,
                                                                        n * es, es),
            Buf("output", T, INPLACE, n * es, es)]


def _smce_bufs(i, es):
    b, c = i["batch"], i["classes"]
    return [Buf("logits", T, IN, b * c * es, es), Buf("labels", T, IN, b * c * es, es),
            Buf("probs", T, OUT, b * c * es, es), Buf("grads", T, OUT, b * c * es if i["need_grads"] else 0, es),
            Buf("output", T, OUT, b * es, es), Buf("sum_data", T, OUT, b * es, es)]


#: the sparse form's buffers in ABI order: name, kind, role, alignment (its sizes are uint64 geometry)
SSMCE_BUFS = (("input", T, IN, 0), ("losses", T, OUT, 0), ("sum_data", T, OUT, 0), ("labels", I32, IN, 4),
              ("output", T, OUT, 0), ("partial_losses", T, OUT, 0))
U64 = 2**64


def sparse_geometry(ints):
    """(inner, outer, axis, batch, classes) as the call passes them (uint64): inner 1, outer batch and axis
    classes unless the case overrides them."""
    b, c = ints["batch"] % U64, ints["classes"] % U64
    return ints.get("inner", 1) % U64, ints.get("outer", b) % U64, ints.get("axis", c) % U64, b, c


def sparse_geometry_error(ints) -> bool:
    """Refused before any buffer: a geometry that is not 2-D [batch, classes], is_grad past 1, or a
    batch x classes extent no size_t holds (the page's header, README)."""
    inner, outer, axis, b, c = sparse_geometry(ints)
    if inner != 1 or outer != b or axis != c or ints["is_grad"] % U64 > 1:
        return True
    return b > (U64 - 1) // 4 or b * c * 4 >= U64  # 4: the widest element (fp_); hp_ is checked in the model


def _ssmce_bufs(i, es):
    _, _, _, b, c = sparse_geometry(i)
    ext = {"input": b * c * es, "losses": b * es, "sum_data": b * es, "labels": b * 4,
           "output": b * c * es if i["is_grad"] % U64 else 0, "partial_losses": b * es}
    return [Buf(name, kind, role, ext[name], a or es) for name, kind, role, a in SSMCE_BUFS]


NEW_BUFFERS = {"nllf": _nllf_bufs, "bcef": _bcef_bufs, "sce": lambda i, es: _sce_bufs(i, es, False),
               "sceg": lambda i, es: _sce_bufs(i, es, True), "smce": _smce_bufs, "ssmce": _ssmce_bufs}

SIZES = {"bce": ("n",), "focal": ("n",), "focalgrad": ("n",), "nll": ("batch", "classes"),
         "flce": ("bt", "hidden", "vocab"), "nllf": ("batch", "classes"), "bcef": ("n",), "sce": ("length",),
         "sceg": ("length",), "smce": ("batch", "classes"), "ssmce": ()}
VENDOR = {"bce": "binarycrossentropygrad", "focal": "sigmoidfocalloss", "focalgrad": "sigmoidfocallossgrad",
          "nll": "nlllossgrad", "flce": "fusedlinearcrossentropylossgrad", "nllf": "nllloss",
          "bcef": "binarycrossentropy", "sce": "sigmoidcrossentropywithlogits",
          "sceg": "sigmoidcrossentropywithlogitsgrad", "smce": "softmax_cross_entropy_with_logits",
          "ssmce": "sparse_softmax_cross_entropy_with_logits"}
REDUCING = ("bce", "focal", "focalgrad", "nll", "nllf", "bcef")  # an int reduction argument, codes 0..2


def expected_status(c, cap, arena_base) -> str:
    """The status the documented check order gives (README, "Emulator: errors, chip, cores")."""
    if (c.prefix == "hp" and c.chip == FT78NE) or (c.prefix == "i8" and c.chip != FT78NE):
        return UNSUPPORTED
    if c.form == "s" and not 0 < c.ints["mask"] <= 0xFF:
        return MASK
    if any(c.ints[k] < 0 for k in SIZES[c.op]):
        return INVALID
    if c.op in REDUCING and c.ints["reduction"] not in (0, 1, 2):
        return INVALID
    if c.op == "smce" and c.ints["need_grads"] not in (0, 1):
        return INVALID
    if c.op == "ssmce":
        _, _, _, b, k = sparse_geometry(c.ints)
        if sparse_geometry_error(c.ints) or b * k * _dt(c.prefix).itemsize >= U64:
            return INVALID
    if c.op in ("focal", "focalgrad"):
        with np.errstate(over="ignore"):  # alpha and gamma cross the ABI as C float
            a, g = float(np.float32(c.alpha)), float(np.float32(c.gamma))
        if not math.isfinite(a) or a > 1 or not math.isfinite(g) or g < 0:
            return INVALID
    bufs = c.bufs
    live = [(b, c.addr[b.name]) for b in bufs if b.extent]
    if any(a == 0 for _, a in live):
        return NULLP
    if any(a % b.align for b, a in live):
        return INVALID
    if c.form == "p":
        for b, a in live:
            if b.extent > cap:
                return CAPACITY
            if not arena_base <= a <= arena_base + cap - b.extent:
                return NOT_PRIVATE
    for o, ao in live:
        if o.role == IN:
            continue
        for b, ab in live:
            if b is o or not (ao < ab + b.extent and ab < ao + o.extent):
                continue
            if not (o.role == INPLACE and b.role == IN and ao == ab and o.extent == b.extent):
                return INVALID
    if c.op in ("nll", "nllf", "ssmce"):
        t, classes = c.data["labels"], c.ints["classes"]
        if ((t < 0) | (t >= classes)).any():
            return INDEX
    if c.op == "flce":
        m, mt = c.data["target_mask"], c.data["masked_target"]
        if ((m == 0) & ((mt < 0) | (mt >= c.ints["vocab"]))).any():
            return INDEX
    return OK


# -- one call: its arguments, its buffers in guarded backing memory ----------------------------------


@dataclass
class Call:
    op: str
    prefix: str  # fp, hp, i8
    form: str  # s, p
    ints: dict
    alpha: float = 0.25
    gamma: float = 2.0
    chip: int = MT7004
    place: dict = field(default_factory=dict)  # buffer name -> placement (default: DDR for _s, arena for _p)
    data: dict = field(default_factory=dict)  # buffer name -> array of its elements (None: leave unwritten)
    bufs: list = field(default_factory=list)
    addr: dict = field(default_factory=dict)

    @property
    def fname(self):
        return f"{self.prefix}_{VENDOR[self.op]}_{self.form}"


class Backing:
    """A region of host or arena memory holding one buffer (and its guards), viewed as bytes."""

    def __init__(self, view: np.ndarray, unallocated=False):
        self.view, self.unallocated = view, unallocated  # unallocated: a fixed-offset region of the arena
        self.before = None


def _np_dtype(kind, prefix):
    return {T: _dt(prefix), F32: np.dtype(np.float32), I32: np.dtype(np.int32), U8: np.dtype(np.uint8)}[kind]


class Harness:
    """Lays out a Call's buffers, runs it, and checks it against the model and the oracle."""

    def __init__(self, lib):
        self.lib, self.ffi = lib, lib.ffi
        self.cap = int(lib.ft78ne_emu_private_capacity())

    def base(self, core):
        return int(self.ffi.cast("uintptr_t", self.lib.ft78ne_emu_private_base(core)))

    def arena_view(self, core, offset, nbytes):
        return np.frombuffer(self.ffi.buffer(self.ffi.cast("char *", self.base(core) + offset), nbytes), np.uint8)

    def _host(self, nbytes, keep):
        raw = np.full(nbytes + 2 * GUARD + 64, PATTERN, np.uint8)  # 64: room to align the start
        keep.append(raw)
        start = (-raw.ctypes.data) % 64
        return raw[start:start + nbytes + 2 * GUARD]

    def _arena_block(self, core, nbytes, allocated):
        p = self.lib.ft78ne_emu_private_alloc(core, nbytes)
        assert p != self.ffi.NULL, self.ffi.string(self.lib.ft78ne_emu_last_error_message()).decode()
        allocated.append((core, p))
        view = np.frombuffer(self.ffi.buffer(p, nbytes), np.uint8)
        view[...] = PATTERN
        return view

    def run(self, c: Call, core=0):
        """Lay out, call, check. Returns the status name."""
        lib, ffi = self.lib, self.ffi
        c.bufs = model_buffers(c.op, c.prefix, c.ints)
        keep, allocated, freed, backings = [], [], [], []
        out_ranges = []
        lib.ft78ne_emu_set_core(core)
        base = self.base(core)
        fixed_top, fixed_bottom = self.cap, 0
        # all at fixed offsets (the manual's style, nothing allocated): from the bottom, where first-fit
        # scratch would go; mixed with allocations (which grow from the bottom): from the top
        all_fixed = all(c.place.get(b.name) == "fixed" for b in c.bufs)
        try:
            # sizes of each backing: an "overlap" buffer lives inside the backing of the one it overlaps
            need = {b.name: b.extent for b in c.bufs}
            for b in c.bufs:
                pl = c.place.get(b.name)
                if isinstance(pl, tuple) and pl[0] == "overlap":
                    need[pl[1]] = max(need[pl[1]], pl[2] + b.extent)
            default = "ddr" if c.form == "s" else "arena"
            order = sorted(c.bufs, key=lambda b: c.place.get(b.name, default) == "freed")  # freed ones last
            for b in order:
                pl = c.place.get(b.name, default)
                n = max(need[b.name], 1)
                mis = 0
                if isinstance(pl, tuple) and pl[0] == "misaligned":
                    pl, mis = pl[1], pl[2]
                if pl == "null":
                    c.addr[b.name] = 0
                    continue
                if isinstance(pl, tuple) and pl[0] == "overlap":
                    continue  # placed below, once its host is
                if pl in ("ddr", "arena", "other", "freed"):
                    if pl == "ddr":
                        region = self._host(n + mis, keep)
                    else:
                        region = self._arena_block((core + 3) % 8 if pl == "other" else core, n + mis + 2 * GUARD,
                                                   allocated)
                    addr = region.ctypes.data + GUARD + mis
                    if pl == "freed":  # freed after the layout: still inside the arena, no longer allocated
                        freed.append(allocated.pop())
                elif pl == "fixed" and all_fixed:  # back to back from offset 0, as the manual's L2 addresses
                    region = self.arena_view(core, fixed_bottom, need[b.name]) if need[b.name] else None
                    addr = base + fixed_bottom
                    fixed_bottom += -(-need[b.name] // 64) * 64
                    assert fixed_bottom < self.cap // 2, "layout too large"
                    if region is not None:
                        region[...] = PATTERN
                elif pl == "fixed":  # an unallocated fixed offset at the top (allocations grow from the bottom)
                    fixed_top -= -(-(n + mis + 2 * GUARD) // 64) * 64
                    assert fixed_top > self.cap // 2, "layout too large"
                    region = self.arena_view(core, fixed_top, n + mis + 2 * GUARD)
                    region[...] = PATTERN
                    addr = base + fixed_top + GUARD + mis
                elif isinstance(pl, tuple) and pl[0] == "straddle_end":  # the last pl[1] bytes of the arena
                    region, addr = None, base + self.cap - pl[1]
                elif isinstance(pl, tuple) and pl[0] == "before":  # pl[1] bytes below the arena: never touched
                    region, addr = None, base - pl[1]
                else:
                    raise AssertionError(pl)
                c.addr[b.name] = addr
                if region is not None:
                    backings.append(Backing(region, unallocated=pl in ("fixed", "freed")))
            for b in c.bufs:
                pl = c.place.get(b.name)
                if isinstance(pl, tuple) and pl[0] == "overlap":
                    c.addr[b.name] = c.addr[pl[1]] + pl[2]
            # data, written where the buffer is backed
            for b in c.bufs:
                arr = c.data.get(b.name)
                a = c.addr[b.name]
                if arr is None or not b.extent:
                    continue
                raw = np.ascontiguousarray(arr, _np_dtype(b.kind, c.prefix)).reshape(-1).view(np.uint8)[:b.extent]
                if self._writable(a, len(raw), backings):  # never write where nothing is backed
                    np.frombuffer(ffi.buffer(ffi.cast("char *", a), len(raw)), np.uint8)[...] = raw
            for b in c.bufs:
                if b.role != IN and b.extent:
                    out_ranges.append((c.addr[b.name], c.addr[b.name] + b.extent))
            for bk in backings:
                bk.before = bk.view.copy()
            for core_, p in freed:
                assert lib.ft78ne_emu_private_free(core_, p) == 0
            expected = expected_status(c, self.cap, base)
            status, msg = self._call(c)
            assert status == expected, f"{c.fname}: got {status} ({msg}), the contract says {expected}\n{c}"
            if status != OK:
                assert c.fname in msg, msg
            # no byte outside the outputs changed (none at all after a refusal)
            # (FLCE's _p row scratch may use unallocated arena bytes outside the call's buffers: the
            # guards around fixed-offset buffers are such bytes)
            spans = [(c.addr[b.name], c.addr[b.name] + b.extent) for b in c.bufs if b.extent]
            scratch = status == OK and c.op == "flce" and c.form == "p"
            for bk in backings:
                changed = np.nonzero(bk.view != bk.before)[0]
                if changed.size:
                    start = bk.view.ctypes.data
                    stray = [start + i for i in changed
                             if status != OK or not any(lo <= start + i < hi for lo, hi in out_ranges)]
                    if scratch and bk.unallocated:
                        stray = [a for a in stray if any(lo <= a < hi for lo, hi in spans)]
                    assert not stray, (f"{c.fname} ({status}) wrote {len(stray)} byte(s) outside its outputs, first at "
                                       f"offset {stray[0] - start} of a backing region\n{c}")
            if status == OK:
                self._check_values(c)
            return status
        finally:
            for core_, p in allocated:
                lib.ft78ne_emu_private_free(core_, p)
            lib.ft78ne_emu_set_core(0)

    @staticmethod
    def _writable(a, nbytes, backings):
        return any(bk.view.ctypes.data <= a and a + nbytes <= bk.view.ctypes.data + bk.view.size for bk in backings)

    def _call(self, c):
        lib, ffi = self.lib, self.ffi
        ct = {"hp": "half", "i8": "int8_t"}.get(c.prefix, "float")
        ctypes = {T: ct, F32: "float", I32: "int", U8: "unsigned char"}
        if c.prefix == "i8":  # i8_nllloss_s spells its int32 outputs int32_t (labels stay int)
            ctypes[I32] = "int32_t"
        ctype = {b.name: "int" if b.name == "labels" and b.kind == I32 else ctypes[b.kind] for b in c.bufs}
        ptr = {b.name: ffi.cast(ctype[b.name] + " *", c.addr[b.name]) for b in c.bufs}
        i = c.ints
        p = ptr
        if c.op == "nllf":
            args = [p["log_probs"], p["labels"], p["weight"], p["loss"], p["total_weight"], i["batch"], i["classes"],
                    i["reduction"]]
        elif c.op == "bcef":
            args = [i["n"], i["reduction"], p["input_x"], p["input_y"], p["weight"], p["loss"], p["tmp_loss"],
                    i["weight_defined"]]
        elif c.op in ("sce", "sceg"):
            args = [*ptr.values(), i["length"]]
        elif c.op == "smce":
            args = [p["logits"], p["labels"], p["probs"], p["grads"], p["output"], p["sum_data"], i["batch"],
                    i["classes"], i["need_grads"]]
        elif c.op == "ssmce":
            inner, outer, axis, b, k = sparse_geometry(i)
            args = [p["input"], p["losses"], p["sum_data"], inner, outer, axis, p["labels"], i["is_grad"] % U64,
                    p["output"], b, k, p["partial_losses"]]
        elif c.op == "bce":
            args = [i["n"], i["reduction"], *ptr.values(), i["weight_defined"]]
        elif c.op in ("focal", "focalgrad"):
            args = [i["n"], i["reduction"], c.alpha, c.gamma, *ptr.values()]
        elif c.op == "nll":
            args = [*ptr.values(), i["batch"], i["classes"], i["reduction"]]
        else:
            args = [i["bt"], i["hidden"], i["vocab"], *ptr.values(), i["softmax_defined"]]
        last = i["accumulate"] if c.op == "flce" and c.form == "p" else i.get("mask", 0) if c.form == "s" else None
        args.append(last)
        if args[-1] is None:
            args.pop()
        lib.ft78ne_emu_set_chip(c.chip)
        getattr(lib, c.fname)(*args)
        code = int(lib.ft78ne_emu_last_error())
        return abi.STATUS[code], ffi.string(lib.ft78ne_emu_last_error_message()).decode()

    # -- the float64 oracle for accepted calls --------------------------------------------------------
    def _read(self, c, name, count, kind=T):
        dt = _np_dtype(kind, c.prefix)
        b = self.ffi.buffer(self.ffi.cast("char *", c.addr[name]), count * dt.itemsize)
        return np.frombuffer(b, dt).astype(np.float64).copy()

    def _check_values(self, c):
        if c.prefix == "i8":
            return self._check_i8_values(c)
        d, i = c.data, c.ints
        tol = dict(rtol=2e-2, atol=1e-3) if c.prefix == "hp" else dict(rtol=2e-5, atol=1e-6)
        q = lambda a: np.asarray(a, _dt(c.prefix)).astype(np.float64)  # noqa: E731 - the inputs as the call saw them
        if c.op in NEW_BUFFERS:
            self._check_new_values(c, q, tol)
        elif c.op in ("bce", "focal", "focalgrad"):
            n, red = i["n"], i["reduction"]
            if n == 0:
                if c.op == "focal" and red:
                    got = self._read(c, "loss", 1)[0]
                    assert (math.isnan(got) if red == 1 else got == 0), got
                return
            x, y = q(d["input_x"]), q(d["input_y"])
            g = q(d["dloss"]) if red == 0 else q(d["dloss"])[0] / (n if red == 1 else 1)
            if c.op == "bce":
                w = q(d["weight"]) if i["weight_defined"] else 1.0
                expected = g * w * (x - y) / (x * (1 - x) + 1e-12)
                got = self._read(c, "dx", n)
            else:
                a32, g32 = float(np.float32(c.alpha)), float(np.float32(c.gamma))
                p = 1 / (1 + np.exp(-x))
                ce = np.logaddexp(0, x) - x * y
                qq = p + y - 2 * p * y
                at = a32 * y + (1 - a32) * (1 - y) if a32 >= 0 else 1.0
                if c.op == "focal":
                    loss = at * ce * qq**g32
                    expected = loss if red == 0 else np.array([loss.mean() if red == 1 else loss.sum()])
                    got = self._read(c, "loss", n if red == 0 else 1)
                else:
                    r = np.where(qq > 0, p * (1 - p) / np.where(qq > 0, qq, 1), 1.0)
                    expected = g * at * ((p - y) * qq**g32 + g32 * qq**g32 * r * (1 - 2 * y) * ce)
                    got = self._read(c, "dx", n)
            scale = np.abs(expected).max() if expected.size else 0
            floor = 2.0**-24 if c.prefix == "hp" else 0.0  # a half result is a multiple of its subnormal step
            np.testing.assert_allclose(got, expected, rtol=tol["rtol"],
                                       atol=max(tol["atol"] * max(scale, 1e-30), floor), err_msg=c.fname)
        elif c.op == "nll":
            b, k, red = i["batch"], i["classes"], i["reduction"]
            if b * k == 0:
                return
            t, w = d["labels"], q(d["weight"])
            g = q(d["loss_grad"]) if red == 0 else np.full(b, q(d["loss_grad"])[0] / (q(d["total_weight"])[0]
                                                                                      if red == 2 else 1))
            expected = np.zeros((b, k))
            expected[np.arange(b), t] = -w[t] * g
            np.testing.assert_allclose(self._read(c, "logits_grad", b * k).reshape(b, k), expected, **tol,
                                       err_msg=c.fname)
        else:
            bt, h, v = i["bt"], i["hidden"], i["vocab"]
            if h == 0:
                return
            x, w = q(d["input"]).reshape(bt, h), q(d["weight"]).reshape(v, h)
            if i["softmax_defined"]:
                G = d["softmax"].astype(np.float64).reshape(bt, v)
            else:
                G = np.exp(x @ w.T - d["logits_max"][:, None].astype(np.float64)) / d["sum_exp_logits"][:, None]
            rows = np.nonzero(d["target_mask"] == 0)[0]
            G[rows, d["masked_target"][rows]] -= 1
            G *= d["grad"].astype(np.float64)[:, None]
            ig, wg = G @ w, G.T @ x
            if c.form == "p" and i["accumulate"]:
                ig, wg = ig + q(d["input_grad"]).reshape(bt, h), wg + q(d["weight_grad"]).reshape(v, h)
            for name, e in (("input_grad", ig), ("weight_grad", wg)):
                got = self._read(c, name, e.size).reshape(e.shape)
                scale = max(np.abs(e).max() if e.size else 0, 1e-30)
                np.testing.assert_allclose(got, e, rtol=tol["rtol"], atol=tol["atol"] * scale,
                                           err_msg=f"{c.fname} {name}")


    def _check_i8_values(self, c):
        """The int8 forms against exact formulas of xloss's documented rules (README: the values are the
        integers themselves; sigmoid CE rounded to nearest and saturated to int8; nllloss exact in int64,
        the mean truncated toward zero, 0 over a zero weight sum, each result saturated to int32)."""
        d, i = c.data, c.ints
        if c.op == "sce":
            n = i["length"]
            x, y = d["input0"].astype(np.float64), d["input1"].astype(np.float64)
            exact = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
            want = np.clip(np.rint(exact), -128, 127)
            # the C evaluates in float32 (a few ulps of 16512 at most): within 1e-2 of a tie either neighbour is right
            tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-2
            got = self._read(c, "output", n)
            alt = np.clip(np.where(np.rint(exact) == np.floor(exact), np.ceil(exact), np.floor(exact)), -128, 127)
            bad = (got != want) & ~(tie & (got == alt))
            assert not bad.any(), f"{c.fname}: output {got[bad][:5]} where {want[bad][:5]} (x {x[bad][:5]})"
            return
        b, k, red = i["batch"], i["classes"], i["reduction"]

        def sat(v):
            return max(INT_MIN, min(INT_MAX, int(v)))

        x, w, t = d["log_probs"].astype(np.int64).reshape(b, k), d["weight"].astype(np.int64), d["labels"]
        rows = [-int(x[r, t[r]]) * int(w[t[r]]) for r in range(b)]
        total, weights = sum(rows), sum(int(w[t[r]]) for r in range(b))
        if red == 0:
            want = rows
        elif red == 1:
            want = [sat(total)]
        else:
            q = abs(total) // abs(weights) * (1 if (total < 0) == (weights < 0) else -1) if weights else 0
            want = [sat(q)]
        got = self._read(c, "loss", len(want), I32).astype(np.int64).tolist()
        assert got == want, f"{c.fname} loss: {got[:8]} where {want[:8]}"
        tw = int(self._read(c, "total_weight", 1, I32)[0])
        assert tw == sat(weights), f"{c.fname} total_weight: {tw} where {sat(weights)}"

    def _check_new_values(self, c, q, tol):
        """The issue-30 operators against float64 formulas of their pages (README)."""
        d, i = c.data, c.ints

        def close(name, got_n, want):
            got = self._read(c, name, got_n)
            scale = max(float(np.abs(np.nan_to_num(want)).max()) if want.size else 0.0, 1e-30)
            floor = 2.0**-24 if c.prefix == "hp" else 0.0  # a half result rounds to a multiple of its subnormal step
            np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=max(tol["atol"] * scale, floor),
                                       err_msg=f"{c.fname} {name}")

        if c.op == "nllf":
            b, k, red = i["batch"], i["classes"], i["reduction"]
            x, w, t = q(d["log_probs"]).reshape(b, k), q(d["weight"]), d["labels"]
            rows = -x[np.arange(b), t] * w[t] if b else np.zeros(0)
            tw = w[t].sum() if b else 0.0
            with np.errstate(invalid="ignore", divide="ignore"):
                want = rows if red == 0 else np.array([rows.sum() if red == 1 else rows.sum() / tw])
            close("loss", want.size, want)
            close("total_weight", 1, np.array([tw]))
        elif c.op == "bcef":
            n, red = i["n"], i["reduction"]
            x, y = q(d["input_x"]), q(d["input_y"])
            lw = q(d["weight"]) if i["weight_defined"] else 1.0
            el = -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log1p(-x), -100)) * lw
            with np.errstate(invalid="ignore"):
                want = el if red == 0 else np.array([el.mean() if red == 1 else el.sum()]) if n else \
                    np.array([np.nan if red == 1 else 0.0])
            close("tmp_loss", n, el)
            close("loss", want.size, want)
        elif c.op in ("sce", "sceg"):
            x, y = q(d["input0" if c.op == "sce" else "Input0"]), q(d["input1" if c.op == "sce" else "Input1"])
            if c.op == "sce":
                want = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
            else:
                want = 1 / (1 + np.exp(-x)) - y
            close("output", x.size, want)
        else:
            sparse = c.op == "ssmce"
            _, _, _, b, k = sparse_geometry(i) if sparse else (0, 0, 0, i["batch"], i["classes"])
            x = q(d["input" if sparse else "logits"]).reshape(b, k)
            if b == 0 or k == 0:
                return
            m = x.max(axis=1, keepdims=True)
            s = np.exp(x - m).sum(axis=1)
            logp = x - m - np.log(s)[:, None]
            if sparse:
                onehot = np.zeros((b, k))
                onehot[np.arange(b), d["labels"]] = 1
                loss, grad = -logp[np.arange(b), d["labels"]], np.exp(logp) - onehot
                close("losses", b, loss)
                close("partial_losses", b, loss)
                if i["is_grad"] % U64:
                    close("output", b * k, grad.reshape(-1))
            else:
                y = q(d["labels"]).reshape(b, k)
                close("output", b, -(y * logp).sum(axis=1))
                close("probs", b * k, np.exp(logp).reshape(-1))
                if i["need_grads"]:
                    close("grads", b * k, (np.exp(logp) - y).reshape(-1))
            close("sum_data", b, s)


@pytest.fixture(scope="module")
def harness(lib):
    return Harness(lib)


# -- strategies -------------------------------------------------------------------------------------

OPS = tuple(VENDOR)


def valid_data(op, prefix, ints, rng) -> dict:
    """Operands inside every documented range (the hostile part is drawn separately)."""
    def u(lo, hi, n):
        return rng.uniform(lo, hi, max(n, 0))

    def i8(n):  # int8 values, a third of them from the ends of the range (where products and losses saturate)
        v = rng.integers(-128, 128, max(n, 0))
        return np.where(rng.random(v.size) < 1 / 3, rng.choice((-128, -127, 126, 127), v.size), v).astype(np.int8)

    if prefix == "i8" and op == "sce":
        n = max(ints["length"], 0)  # labels 0/1 half the time; the page does not restrict them: any int8 too
        return {"input0": i8(n), "input1": np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), i8(n)).astype(np.int8)}
    if prefix == "i8":
        b, k = max(ints["batch"], 0), max(ints["classes"], 0)
        b, k = (b, k) if b * k < 2**20 else (0, 0)
        return {"log_probs": i8(b * k), "labels": rng.integers(0, max(k, 1), b).astype(np.int32), "weight": i8(k),
                "loss": None, "total_weight": None}

    if op in ("bce", "focal", "focalgrad"):
        n = max(ints["n"], 0)
        d = {"input_x": u(0.02, 0.98, n) if op == "bce" else u(-6, 6, n),
             "input_y": (rng.random(n) < 0.5).astype(float) if op != "focal" else rng.random(n),
             "weight": u(0.1, 2, n), "dloss": u(-1, 1, n) if ints["reduction"] == 0 else u(0.5, 1.5, 1)}
        d["dx"] = d["loss"] = None
        return d
    if op in ("nllf", "ssmce", "smce"):
        b, k = max(ints["batch"], 0), max(ints["classes"], 0)
        b, k = (b, k) if b * k < 2**20 else (0, 0)  # a refused giant: no data to lay out
        labels = rng.integers(0, max(k, 1), b).astype(np.int32)  # with no class, label 0 is out of range: INDEX
        if op == "nllf":
            return {"log_probs": u(-6, 0, b * k), "labels": labels, "weight": u(0.1, 2, k), "loss": None,
                    "total_weight": None}
        if op == "ssmce":
            return {"input": u(-5, 5, b * k), "labels": labels}
        y = rng.random((b, k))
        return {"logits": u(-5, 5, b * k), "labels": (y / np.maximum(y.sum(axis=1, keepdims=True), 1e-9)).reshape(-1)}
    if op == "bcef":
        n = max(ints["n"], 0)
        return {"input_x": u(0.02, 0.98, n), "input_y": rng.random(n), "weight": u(0.1, 2, n)}
    if op in ("sce", "sceg"):
        n = max(ints["length"], 0)
        names = ("input0", "input1") if op == "sce" else ("Input0", "Input1")
        return {names[0]: u(-8, 8, n), names[1]: rng.random(n)}
    if op == "nll":
        b, k = max(ints["batch"], 0), max(ints["classes"], 0)
        t = rng.integers(0, max(k, 1), b).astype(np.int32)  # with no class, label 0 is out of range: INDEX
        return {"logits": None, "loss_grad": u(-1, 1, b) if ints["reduction"] == 0 else u(0.5, 1.5, 1), "labels": t,
                "weight": u(0.1, 2, k), "total_weight": np.array([rng.uniform(0.5, 4)]), "logits_grad": None}
    bt, h, v = (max(ints[k], 0) for k in ("bt", "hidden", "vocab"))
    x, w = u(-1, 1, bt * h), u(-1, 1, v * h)
    logits = x.reshape(bt, h) @ w.reshape(v, h).T if h else np.zeros((bt, v))
    lm = logits.max(axis=1) if v else np.zeros(bt)
    se = np.exp(logits - lm[:, None]).sum(axis=1) if v else np.ones(bt)
    mask = (rng.random(bt) < 0.3).astype(np.uint8) if v else np.ones(bt, np.uint8)
    return {"grad": u(-1, 1, bt).astype(np.float32), "input": x, "weight": w, "target_mask": mask,
            "masked_target": np.where(mask == 1, 0, rng.integers(0, max(v, 1), bt)).astype(np.int32),
            "logits_max": lm.astype(np.float32), "sum_exp_logits": se.astype(np.float32),
            "softmax": (np.exp(logits - lm[:, None]) / se[:, None]).astype(np.float32).reshape(-1),
            "input_grad": None, "weight_grad": None}


@st.composite
def calls(draw, *, ops=OPS, forms=("s", "p"), small=True, prefixes=("fp", "hp", "i8")):
    """A valid call: operator, precision, memory form, sizes, flags (the categories then spoil it)."""
    if prefixes == ("i8",):
        ops = tuple(op for op in ops if set(INT8_FORMS.get(op, ())) & set(forms))
    op = draw(st.sampled_from(ops))
    int8 = set(INT8_FORMS.get(op, ())) & set(forms)  # each vendor function of the op an equal share
    prefix = draw(st.sampled_from(tuple(p for p in prefixes if p != "i8" or int8)))
    form = draw(st.sampled_from(tuple(f for f in forms if f in int8) if prefix == "i8" else forms))
    hi = 3000 if small else 20000
    if op in ("bce", "focal", "focalgrad"):
        ints = {"n": draw(st.one_of(st.integers(0, 9), st.integers(0, hi))), "reduction": draw(st.integers(0, 2)),
                "weight_defined": draw(st.sampled_from((0, 1, -7)))}
    elif op in ("nll", "nllf"):
        ints = {"batch": draw(st.integers(0, 40)), "classes": draw(st.integers(0, 40)),
                "reduction": draw(st.integers(0, 2))}
    elif op == "bcef":
        ints = {"n": draw(st.one_of(st.integers(0, 9), st.integers(0, hi))), "reduction": draw(st.integers(0, 2)),
                "weight_defined": draw(st.sampled_from((0, 1, -7)))}
    elif op in ("sce", "sceg"):
        ints = {"length": draw(st.one_of(st.integers(0, 9), st.integers(0, hi)))}
    elif op in ("smce", "ssmce"):
        ints = {"batch": draw(st.integers(0, 20)), "classes": draw(st.integers(0, 20)),
                "need_grads" if op == "smce" else "is_grad": draw(st.integers(0, 1))}
    else:
        ints = {"bt": draw(st.integers(0, 12)), "hidden": draw(st.integers(0, 9)), "vocab": draw(st.integers(0, 12)),
                "softmax_defined": draw(st.sampled_from((0, 1, 2))), "accumulate": 0}
    ints["mask"] = draw(st.integers(1, 255))
    seed = draw(st.integers(0, 2**32 - 1))
    c = Call(op, prefix, form, ints, chip=FT78NE if prefix == "i8" else MT7004)
    c.data = valid_data(op, prefix, ints, np.random.default_rng(seed))
    return c


def run_counted(harness, c, category, core=0):
    COUNTS[category] += 1
    status = harness.run(c, core)
    OUTCOMES[(category, status)] += 1
    if c.prefix == "i8":
        INT8_CALLS[(c.fname, status)] += 1
    return status


# -- categories ---------------------------------------------------------------------------------------


@FUZZ_MORE
@given(c=calls(), data=st.data())
def test_null_in_any_position(harness, c, data):
    """Any subset of the buffer positions NULL: refused if one of them is accessed, else a normal call."""
    names = [b.name for b in model_buffers(c.op, c.prefix, c.ints)]
    nulls = data.draw(st.sets(st.sampled_from(names), min_size=1), label="null")
    c.place = {name: "null" for name in nulls}
    run_counted(harness, c, "null pointers")


@FUZZ
@given(c=calls(ops=tuple(op for op in OPS if SIZES[op])), data=st.data())
def test_negative_sizes(harness, c, data):
    key = data.draw(st.sampled_from(SIZES[c.op]), label="size")
    c.ints[key] = data.draw(st.one_of(st.just(-1), st.just(INT_MIN), st.integers(INT_MIN, -1)), label="value")
    assert run_counted(harness, c, "negative sizes") in (INVALID, MASK)


@FUZZ
@given(c=calls(forms=("p",)), data=st.data())
def test_huge_sizes_in_private_memory(harness, c, data):
    """_p with sizes up to INT_MAX (products far beyond int): extents are computed in size_t, so the
    call is over capacity, or not private, never a write past the arena. A buffer too large to lay
    out is pointed at the arena's last 4 KiB (it must be refused before it is touched)."""
    for key in data.draw(st.sets(st.sampled_from(SIZES[c.op] or ("batch", "classes")), min_size=1), label="grown"):
        c.ints[key] = data.draw(st.sampled_from((INT_MAX, INT_MAX - 1, 2**16, 2**20 + 1, 46341)), label=key)
    for b in model_buffers(c.op, c.prefix, c.ints):
        if b.extent > 4096:
            c.place[b.name] = ("straddle_end", 4096)
    status = run_counted(harness, c, "huge sizes (_p)")
    assert status in (OK, CAPACITY, NOT_PRIVATE), status


@FUZZ
@given(c=calls(ops=("nll", "flce", "nllf", "smce"), forms=("s",)), data=st.data())
def test_size_products_overflowing_int_in_shared_memory(harness, c, data):
    """_s: batch*classes or bt*hidden / vocab*hidden of 2^32 or more (0 or small when wrapped in
    int) with that buffer NULL. The extent is computed in size_t, so the NULL is seen; in int the
    extent would wrap, the NULL pass, and the call write through it."""
    rows = data.draw(st.sampled_from((64, 128, 96, 1, 3)), label="rows")
    if c.op == "nll":
        c.ints.update(batch=rows, classes=2**26, reduction=0)
        nulls = ("logits_grad",)
    elif c.op == "nllf":
        c.ints.update(batch=rows, classes=2**26)
        nulls = ("log_probs",)
    elif c.op == "smce":
        c.ints.update(batch=rows, classes=2**26)
        nulls = ("logits", "labels", "probs", "grads")
    elif data.draw(st.booleans(), label="input"):
        c.ints.update(bt=rows, hidden=2**26, vocab=0, softmax_defined=0)
        nulls = ("input", "input_grad")
    else:
        c.ints.update(bt=0, hidden=2**26, vocab=rows, softmax_defined=0)
        nulls = ("weight", "weight_grad")
    small = {**c.ints, "classes": 8, "hidden": 1, "vocab": max(c.ints.get("vocab", 1), 1)}
    c.data = valid_data(c.op, c.prefix, small, np.random.default_rng(rows))
    c.place = {name: "null" for name in nulls}
    if c.op in ("nll", "nllf"):  # weight (2^26 classes) is never reached: a non-NULL address it is not laid out at
        c.place["weight"] = ("before", 64)
    assert run_counted(harness, c, "int-overflowing size products (_s)") == NULLP


MASKS = st.one_of(st.sampled_from((0, 0x100, 0x1FF, -1, -255, INT_MIN, INT_MAX)), st.integers(INT_MIN, INT_MAX))


@FUZZ
@given(c=calls(forms=("s",)), mask=MASKS)
def test_core_masks(harness, c, mask):
    c.ints["mask"] = mask
    status = run_counted(harness, c, "core masks")
    if not 0 < mask <= 0xFF:
        assert status == MASK


PLACEMENTS = ("ddr", "other", "straddle_end", "before", "freed", "fixed", "misaligned", "overlap")
ACCEPTED = ("freed", "fixed")  # still the core's private memory: the call must run, confined to its outputs


@FUZZ_MORE
@given(c=calls(forms=("p",)), data=st.data())
def test_private_buffer_placement(harness, c, data):
    """_p buffers in DDR, in another core's arena, straddling the arena's end or start, freed, at
    unallocated fixed offsets (accepted: the arena is the core's memory), misaligned, or an output
    overlapping another buffer."""
    bufs = [b for b in model_buffers(c.op, c.prefix, c.ints)]
    live = [b for b in bufs if b.extent]
    assume(live)
    kinds = data.draw(st.sampled_from((PLACEMENTS, ACCEPTED, ("misaligned", "overlap"))), label="kinds")
    for b in data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique_by=lambda b: b.name),
                       label="hostile"):
        kind = data.draw(st.sampled_from(kinds), label=f"{b.name} placement")
        hosts = {pl[1] for pl in c.place.values() if isinstance(pl, tuple) and pl[0] == "overlap"}
        if b.name in hosts:  # already holds an overlapping buffer: it stays where it is (no chains)
            continue
        if kind == "straddle_end":
            cut = data.draw(st.integers(1, max(1, b.extent - 1)), label="inside") // b.align * b.align
            c.place[b.name] = ("straddle_end", cut) if 0 < cut < b.extent else "ddr"
        elif kind == "before":
            c.place[b.name] = ("before", data.draw(st.integers(1, 8), label="below") * 64)
        elif kind == "misaligned":
            delta = data.draw(st.integers(1, 63), label="delta")
            c.place[b.name] = ("misaligned", "arena", delta)
        elif kind == "overlap":
            others = [o for o in live if o.name != b.name and not isinstance(c.place.get(o.name), tuple)]
            outs = [o for o in live if o.role != IN and o.name != b.name]
            if b.role == IN or not others:
                if not outs:
                    continue
                o, host = outs[0], b  # an output laid over this input
                if o.name in hosts or isinstance(c.place.get(o.name), tuple):
                    continue
            else:
                o, host = b, data.draw(st.sampled_from(others), label="host")
            if isinstance(c.place.get(host.name), tuple) or c.place.get(host.name) in ("null", "straddle_end"):
                continue
            off = data.draw(st.integers(0, max(0, host.extent - 1)), label="offset") // o.align * o.align
            c.place[o.name] = ("overlap", host.name, off)
        else:
            c.place[b.name] = kind
    run_counted(harness, c, "private placement")


@FUZZ_HALF
@given(c=calls(forms=("s",)), data=st.data())
def test_overlapping_buffers_in_shared_memory(harness, c, data):
    """_s: an output laid over another buffer (any offset inside it, the exact in-place case included) is
    refused (INVALID) before anything is written, unless it is an exact in-place output over an input."""
    live = [b for b in model_buffers(c.op, c.prefix, c.ints) if b.extent]
    outs = [b for b in live if b.role != IN]
    assume(outs and len(live) > 1)
    o = data.draw(st.sampled_from(outs), label="output")
    host = data.draw(st.sampled_from([b for b in live if b.name != o.name]), label="over")
    off = data.draw(st.one_of(st.just(0), st.integers(0, max(0, host.extent - 1))), label="offset") // o.align * o.align
    c.place = {o.name: ("overlap", host.name, off)}
    status = run_counted(harness, c, "overlapping buffers (_s)")
    if not (o.role == INPLACE and host.role == IN and off == 0 and o.extent == host.extent):
        assert status in (INVALID, UNSUPPORTED), status


@FUZZ
@given(c=calls(ops=("flce",), forms=("p",)), acc=st.one_of(st.sampled_from((0, 1, -1, 2, INT_MIN, INT_MAX)),
                                                             st.integers(INT_MIN, INT_MAX)),
       garbage=st.sampled_from(("random", "nan", "huge", "zero")), fixed=st.booleans())
def test_flce_accumulate_garbage(harness, c, acc, garbage, fixed):
    """Any nonzero accumulate adds into the outputs' current contents, zero overwrites them (NaN too);
    at unallocated fixed offsets the call's row scratch never lands on the call's own buffers."""
    c.ints["accumulate"] = acc
    rng = np.random.default_rng(abs(acc) % 1000)
    sizes = (("input_grad", c.ints["bt"] * c.ints["hidden"]), ("weight_grad", c.ints["vocab"] * c.ints["hidden"]))
    for name, count in sizes:
        c.data[name] = {"random": rng.uniform(-3, 3, count), "nan": np.full(count, np.nan),
                        "huge": np.full(count, 6e4), "zero": np.zeros(count)}[garbage]
    if fixed:
        c.place = {b.name: "fixed" for b in model_buffers(c.op, c.prefix, c.ints)}
    if acc and garbage == "nan" and c.ints["hidden"]:
        c.data["input_grad"] = c.data["input_grad"] * 0 + 1  # NaN + x is NaN: check the adding with numbers
        c.data["weight_grad"] = c.data["weight_grad"] * 0 + 1
    run_counted(harness, c, "FLCE accumulate garbage")


REDUCTION_CODES = st.one_of(st.sampled_from((-1, 3, 4, 255, INT_MIN, INT_MAX)), st.integers(INT_MIN, INT_MAX))


@FUZZ
@given(c=calls(ops=REDUCING), red=REDUCTION_CODES)
def test_reduction_codes(harness, c, red):
    c.ints["reduction"] = red
    c.data = valid_data(c.op, c.prefix, {**c.ints, "reduction": red if red in (0, 1, 2) else 1},
                        np.random.default_rng(1))
    status = run_counted(harness, c, "reduction codes")
    if red not in (0, 1, 2):
        assert status in (INVALID, MASK, UNSUPPORTED)


SCALARS = st.one_of(st.sampled_from((math.nan, math.inf, -math.inf, 1.0, 1.0000001, 1.5, 0.0, -0.0, -1.0, 1e-45,
                                     3.5e38, 3.5e38 * 10, -1e30, 2.0, 0.5)),
                    st.floats(-10, 10), st.floats(allow_nan=True, allow_infinity=True))


@FUZZ
@given(c=calls(ops=("focal", "focalgrad")), alpha=SCALARS, gamma=SCALARS)
def test_alpha_gamma(harness, c, alpha, gamma):
    """NaN/inf/out-of-range alpha and gamma are refused; accepted values (alpha <= 1, negative
    disables the weighting; 0 <= gamma, huge included) give finite results that match the oracle."""
    c.alpha, c.gamma = alpha, gamma
    if c.prefix == "hp" or abs(float(np.float32(gamma) if math.isfinite(gamma) else 0)) > 50:
        c.data["input_x"] = np.clip(c.data["input_x"], -3, 3)  # keep huge-gamma and half results representable
    run_counted(harness, c, "alpha/gamma")


@FUZZ
@given(c=calls(ops=("nll", "flce", "nllf", "ssmce")), data=st.data())
def test_garbage_class_indices(harness, c, data):
    ints32 = st.one_of(st.integers(INT_MIN, INT_MAX), st.integers(-3, 45), st.sampled_from((INT_MIN, INT_MAX)))
    if c.op != "flce":
        b = c.ints["batch"]
        c.data["labels"] = np.array(data.draw(st.lists(ints32, min_size=b, max_size=b), label="labels"), np.int32)
    else:
        bt = c.ints["bt"]
        c.data["target_mask"] = np.array(data.draw(st.lists(st.integers(0, 255), min_size=bt, max_size=bt),
                                                   label="mask"), np.uint8)
        c.data["masked_target"] = np.array(data.draw(st.lists(ints32, min_size=bt, max_size=bt), label="mt"), np.int32)
    run_counted(harness, c, "class indices")


@FUZZ
@given(c=calls(), chip=st.sampled_from((FT78NE, MT7004)))
def test_chip(harness, c, chip):
    c.chip = chip
    no_class = c.op in ("nll", "nllf", "ssmce") and c.ints["batch"] > 0 and c.ints["classes"] == 0  # label 0: INDEX
    unsupported = (c.prefix, chip) in (("hp", FT78NE), ("i8", MT7004))
    assert run_counted(harness, c, "chip") == (UNSUPPORTED if unsupported else INDEX if no_class else OK)


@FUZZ_HALF
@given(c=calls(ops=("smce", "ssmce")), flag=st.one_of(st.sampled_from((2, -1, 255, INT_MIN, INT_MAX)),
                                                      st.integers(INT_MIN, INT_MAX)))
def test_grad_flags(harness, c, flag):
    """need_grads (int) and is_grad (uint64): 0 or 1, anything else refused before any buffer is read."""
    c.ints["need_grads" if c.op == "smce" else "is_grad"] = flag
    status = run_counted(harness, c, "grad flags")
    if flag not in (0, 1):
        assert status in (INVALID, MASK, UNSUPPORTED)


U64_GARBAGE = st.one_of(st.integers(0, 24), st.sampled_from((2**32, 2**62, 2**63, 2**64 - 1, 2**62 + 1)),
                        st.integers(0, 2**64 - 1))


@FUZZ_HALF
@given(c=calls(ops=("ssmce",)), data=st.data())
def test_sparse_geometry(harness, c, data):
    """The sparse form's uint64 inner_size/outter_size/axis_size/batch_size/number_of_classes: anything but
    a consistent 2-D geometry, or a batch x classes past size_t, refused (INVALID) before any buffer; huge
    consistent ones are refused by their buffers (NULL here), never read or written."""
    for key in data.draw(st.sets(st.sampled_from(("inner", "outer", "axis", "batch", "classes")), min_size=1),
                         label="spoiled"):
        c.ints[key] = data.draw(U64_GARBAGE, label=key)
    _, _, _, b, k = sparse_geometry(c.ints)
    huge = b * k >= 2**20 or b >= 2**20
    c.data = valid_data("ssmce", c.prefix, {"batch": 0 if huge else b, "classes": 0 if huge else k},
                        np.random.default_rng(b % 997))
    if huge:  # too large to lay out: every buffer the call would need is NULL
        c.place = {name: "null" for name, *_ in SSMCE_BUFS}
    status = run_counted(harness, c, "sparse geometry")
    if sparse_geometry_error(c.ints):
        assert status in (INVALID, MASK, UNSUPPORTED)


SIZE_T_MAX = 2**64 - 1


@FUZZ
@given(ops=st.lists(st.tuples(st.sampled_from(("alloc", "free", "free_other", "free_garbage", "set_core", "set_chip",
                                                 "capacity", "base")),
                              st.one_of(st.integers(-3, 10), st.sampled_from((INT_MIN, INT_MAX))),
                              st.one_of(st.integers(0, 5000), st.sampled_from((0, 1, 2**30, 786432, 786433,
                                                                               SIZE_T_MAX, SIZE_T_MAX - 63)))),
                    min_size=1, max_size=25))
def test_helpers_with_garbage(harness, ops):
    """The helpers refuse garbage with their status (and never hand out overlapping or foreign blocks):
    cores out of range, sizes up to SIZE_MAX, frees of garbage, of another core's block, twice."""
    lib, ffi = harness.lib, harness.ffi  # (hypothesis probes its arguments' attributes: not the CLibrary)
    cap = int(lib.ft78ne_emu_private_capacity())
    live: dict[int, list] = collections.defaultdict(list)
    try:
        for what, core, size in ops:
            COUNTS["helpers"] += 1
            valid_core = 0 <= core < 8
            if what == "alloc":
                p = lib.ft78ne_emu_private_alloc(core, size)
                code = int(lib.ft78ne_emu_last_error())
                if not valid_core:
                    assert p == ffi.NULL and code == 2
                elif size > cap:
                    assert p == ffi.NULL and code == 5
                elif p != ffi.NULL:
                    a = int(ffi.cast("uintptr_t", p))
                    base = int(ffi.cast("uintptr_t", lib.ft78ne_emu_private_base(core)))
                    length = max(64, -(-size // 64) * 64)
                    assert a % 64 == 0 and base <= a and a + length <= base + cap
                    for q, qlen in live[core]:
                        assert a + length <= q or q + qlen <= a, "overlapping blocks"
                    live[core].append((a, length))
                else:
                    assert code == 5
            elif what in ("free", "free_other") and valid_core and live[core]:
                a, _ = live[core][-1]
                target = core if what == "free" else (core + 1) % 8
                rc = lib.ft78ne_emu_private_free(target, ffi.cast("void *", a))
                if what == "free":
                    assert rc == 0
                    live[core].pop()
                    assert lib.ft78ne_emu_private_free(core, ffi.cast("void *", a)) == 2  # twice
                else:
                    assert rc == 2
            elif what == "free_garbage":
                rc = lib.ft78ne_emu_private_free(core, ffi.cast("void *", (size * 8 + 8) % 2**64 or 8))  # never NULL
                assert rc == 2
            elif what == "set_core":
                assert lib.ft78ne_emu_set_core(core) == (0 if valid_core else 2)
            elif what == "set_chip":
                assert lib.ft78ne_emu_set_chip(core) == (0 if core in (0, 1) else 2)
            elif what == "capacity":  # only ever the current value: other tests rely on it
                busy = any(live.values())
                assert lib.ft78ne_emu_set_private_capacity(cap if size % 2 else size) == (
                    2 if busy or not (size % 2 or 64 <= size <= 2**30) else 0)
                if not size % 2 and 64 <= size <= 2**30 and not busy:
                    assert lib.ft78ne_emu_set_private_capacity(cap) == 0
            elif what == "base":
                p = lib.ft78ne_emu_private_base(core)
                assert (p != ffi.NULL) == valid_core
    finally:
        for core, blocks in live.items():
            for a, _ in blocks:
                assert lib.ft78ne_emu_private_free(core, ffi.cast("void *", a)) == 0
        lib.ft78ne_emu_set_core(0)
        lib.ft78ne_emu_set_chip(MT7004)
    assert int(lib.ft78ne_emu_private_capacity()) == cap


def _int8_values(harness, c):
    """A valid call, a third of its int8 values from the ends of the range: the loss saturates, products reach 2^14."""
    assert run_counted(harness, c, "int8 values") == (INDEX if c.op == "nllf" and c.ints["batch"] and
                                                      not c.ints["classes"] else OK)


#: the categories above that reach an i8_ function (their bodies), with a valid call for the values: (body,
#: operators, memory forms, its other arguments)
INT8_CATEGORIES = {
    "int8 values": (_int8_values, OPS, ("s", "p"), {}),
    "null pointers": (test_null_in_any_position, OPS, ("s", "p"), {"data": st.data()}),
    "negative sizes": (test_negative_sizes, OPS, ("s", "p"), {"data": st.data()}),
    "huge sizes (_p)": (test_huge_sizes_in_private_memory, OPS, ("p",), {"data": st.data()}),
    "int-overflowing size products (_s)": (test_size_products_overflowing_int_in_shared_memory, ("nllf",), ("s",),
                                           {"data": st.data()}),
    "core masks": (test_core_masks, OPS, ("s",), {"mask": MASKS}),
    "private placement": (test_private_buffer_placement, OPS, ("p",), {"data": st.data()}),
    "overlapping buffers (_s)": (test_overlapping_buffers_in_shared_memory, OPS, ("s",), {"data": st.data()}),
    "reduction codes": (test_reduction_codes, ("nllf",), ("s", "p"), {"red": REDUCTION_CODES}),
    "class indices": (test_garbage_class_indices, ("nllf",), ("s", "p"), {"data": st.data()}),
    "chip": (test_chip, OPS, ("s", "p"), {"chip": st.sampled_from((FT78NE, MT7004))}),
}


@pytest.mark.parametrize("category", sorted(INT8_CATEGORIES))
@FUZZ_HALF
@given(data=st.data())
def test_int8_forms(harness, category, data):
    """The categories above once more on the i8_ functions alone (there each of the ~30 vendor functions gets
    one share of the budget: a few cases for an i8_ function): the same bodies, the same model and oracle."""
    body, ops, forms, extra = INT8_CATEGORIES[category]
    c = data.draw(calls(ops=ops, forms=forms, prefixes=("i8",)), label="call")
    body = body.hypothesis.inner_test if hasattr(body, "hypothesis") else body  # the body without its @given
    body(harness, c, **{k: data.draw(v, label=k) for k, v in extra.items()})


def test_every_category_ran():
    """The counts printed at the end; each category must have tried cases (none was filtered away)."""
    expected = {"null pointers", "negative sizes", "huge sizes (_p)", "int-overflowing size products (_s)",
                "core masks", "private placement", "FLCE accumulate garbage", "reduction codes", "alpha/gamma",
                "class indices", "chip", "helpers", "grad flags", "sparse geometry", "overlapping buffers (_s)",
                "int8 values"}
    assert expected <= set(COUNTS), expected - set(COUNTS)
    assert all(COUNTS[k] >= min(EXAMPLES, 10) // 2 for k in expected), dict(COUNTS)
    reached = {fn for fn, _ in INT8_CALLS}
    assert reached >= {"i8_sigmoidcrossentropywithlogits_s", "i8_sigmoidcrossentropywithlogits_p", "i8_nllloss_s"}, \
        reached
