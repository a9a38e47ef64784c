"""The FT78NE's int8 sigmoidcrossentropywithlogits (the manual's i8_ forms) on the emulator and through the
adapter: the page's prototypes, the checks every entry point runs and the documented conversion (xloss's choice:
the page gives none). The oracle of the int8 check: tests/reference/test_sigmoid_ce_i8_reference.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.backends.ft78ne_shim import sigmoid_ce_i8 as i8
from xloss.errors import UnsupportedRequestError, XLossTypeError, XLossValueError
from xloss.reference import sigmoid_ce_i8 as oracle

from .conftest import FT78NE, MT7004

S, P = abi.SCE_LOGITS_I8 + "_s", abi.SCE_LOGITS_I8 + "_p"
SENTINEL = 99
#: the manual's page, verbatim
MANUAL_PROTOTYPES = (
    "void i8_sigmoidcrossentropywithlogits_s(int8_t *input0, int8_t *input1, int8_t *output, int length, "
    "int core_mask)",
    "void i8_sigmoidcrossentropywithlogits_p(int8_t *input0, int8_t *input1, int8_t *output, int length)",
)
EVERY = np.arange(-128, 128, dtype=np.int8)


def test_the_pages_header_holds_its_int8_prototypes_and_marks_the_conversion_as_ours():
    header = re.sub(r"\s+", " ", (abi.INCLUDE / f"{abi.SCE_LOGITS}.h").read_text().replace("\n * ", " "))
    for proto in MANUAL_PROTOTYPES:
        assert "FT78NE_API " + proto + ";" in header
    assert "XLOSS'S CHOICE, NOT THE VENDOR'S" in header


def _ptr(emu, arr):
    return emu.ffi.NULL if arr is None else emu.ffi.from_buffer("int8_t[]", arr)


def _grid():
    """Every (logit, label) pair of int8: labels 0 and 1 and every other value the page does not exclude."""
    x, y = np.meshgrid(EVERY, EVERY, indexing="ij")
    return x.reshape(-1).copy(), y.reshape(-1).copy()


def test_every_int8_pair_is_the_formula_rounded_to_nearest_even_and_saturated(emu):
    x, y = _grid()
    out = np.full(x.size, SENTINEL, np.int8)
    assert emu.call(S, _ptr(emu, x), _ptr(emu, y), _ptr(emu, out), x.size, 0xFF, chip=FT78NE)[0] == "FT78NE_OK"
    v = oracle.exact(x, y)
    want = np.clip(np.rint(v), -128, 127)  # np.rint: to nearest, ties to even
    assert (out == want).all(), np.flatnonzero(out != want)[:5]
    # the saturation and -128 edges, spelled out
    at = {(int(a), int(b)): int(q) for a, b, q in zip(x, y, out)}
    assert at[(-128, 1)] == 127 and at[(-128, 0)] == 0 and at[(127, 0)] == 127 and at[(0, 0)] == 1
    assert at[(127, 127)] == -128  # x (1 - y) = -16002: saturated, not wrapped


@pytest.mark.parametrize("mask", [0x01, 0x55, 0x81, 0xF0])
def test_every_core_mask_and_the_private_form_give_the_shared_calls_values(emu, mask):
    rng = np.random.default_rng(mask)
    n = 8 * 1024 + 5
    x, y = rng.integers(-128, 128, n).astype(np.int8), rng.integers(0, 2, n).astype(np.int8)
    full = np.full(n, SENTINEL, np.int8)
    assert emu.call(S, _ptr(emu, x), _ptr(emu, y), _ptr(emu, full), n, 0xFF, chip=FT78NE)[0] == "FT78NE_OK"
    part = np.full(n, SENTINEL, np.int8)
    assert emu.call(S, _ptr(emu, x), _ptr(emu, y), _ptr(emu, part), n, mask, chip=FT78NE)[0] == "FT78NE_OK"
    assert (part == full).all()
    views = [emu.private(1, a) for a in (x, y, np.full(n, SENTINEL, np.int8))]
    emu.lib.ft78ne_emu_set_core(1)
    st = emu.call(P, *(raw for _, raw in views), n, chip=FT78NE)
    got = views[2][0].copy()
    emu.release(1, *(raw for _, raw in views))
    assert st[0] == "FT78NE_OK", st
    assert (got == full).all()


@pytest.mark.parametrize("label, change, status", [
    ("negative length", dict(length=-1), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("null input0", dict(null=0), "FT78NE_ERR_NULL_POINTER"),
    ("null output", dict(null=2), "FT78NE_ERR_NULL_POINTER"),
    ("core mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK"),
    ("core mask past 8 cores", dict(mask=0x100), "FT78NE_ERR_CORE_MASK"),
    ("int8 on MT7004", dict(chip=MT7004), "FT78NE_ERR_UNSUPPORTED"),
    ("output overlapping an input off by one", dict(overlap=True), "FT78NE_ERR_INVALID_ARGUMENT"),
])
def test_refusals_leave_the_output_untouched(emu, label, change, status):
    x, y = EVERY[:64].copy(), np.ones(64, np.int8)
    buf = np.full(x.size + 1, SENTINEL, np.int8)
    out = buf[1:] if change.get("overlap") else np.full(x.size, SENTINEL, np.int8)
    if change.get("overlap"):
        buf[:-1] = x
        x = buf[:-1]
    ptrs = [_ptr(emu, x), _ptr(emu, y), _ptr(emu, out)]
    if "null" in change:
        ptrs[change["null"]] = emu.ffi.NULL
    st, msg = emu.call(S, *ptrs, change.get("length", x.size), change.get("mask", 0xFF),
                       chip=change.get("chip", FT78NE))
    assert st == status, (label, msg)
    assert S in msg
    if not change.get("overlap"):
        assert (out == SENTINEL).all()


def test_the_private_form_refuses_shared_buffers_and_in_place_is_fine(emu):
    x, y = EVERY.copy(), np.zeros(256, np.int8)
    out = np.full(256, SENTINEL, np.int8)
    emu.lib.ft78ne_emu_set_core(0)
    st, msg = emu.call(P, _ptr(emu, x), _ptr(emu, y), _ptr(emu, out), 256, chip=FT78NE)
    assert st == "FT78NE_ERR_NOT_PRIVATE" and "input0" in msg and (out == SENTINEL).all()
    want = np.clip(np.rint(oracle.exact(x, y)), -128, 127)
    assert emu.call(S, _ptr(emu, x), _ptr(emu, y), _ptr(emu, x), 256, 0x0F, chip=FT78NE)[0] == "FT78NE_OK"
    assert (x == want).all()  # output == input0: each element read before it is written
    assert emu.call(S, emu.ffi.NULL, emu.ffi.NULL, emu.ffi.NULL, 0, 0xFF, chip=FT78NE)[0] == "FT78NE_OK"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(x=hnp.arrays(np.int8, st.integers(0, 200)), data=st.data(),
       mask=st.integers(1, 0xFF), memory=st.sampled_from(["shared", "private"]))
def test_the_adapter_is_within_the_checks_unit(x, data, mask, memory):
    y = data.draw(hnp.arrays(np.int8, x.shape, elements=st.integers(0, 1)))
    q = i8.sigmoid_cross_entropy_with_logits_i8(xloss.backend("ft78ne", core_mask=mask, memory=memory), x, y)
    assert q.dtype == np.int8 and q.shape == x.shape
    assert oracle.accepted(q, x, y).all()


@pytest.mark.parametrize("options", [{}, {"memory": "private", "core_mask": 0x0F},
                                     {"memory": "private", "private_bytes": 4096}, {"guards": True}])
def test_the_check_passes_the_emulator(options):
    assert i8.check(xloss.backend("ft78ne", **options), examples=5) == []


def test_bad_arguments_are_refused_by_name():
    b = xloss.backend("ft78ne")
    x = np.zeros(4, np.int8)
    with pytest.raises(XLossTypeError, match="input0 must be int8"):
        i8.sigmoid_cross_entropy_with_logits_i8(b, x.astype(np.float32), x)
    with pytest.raises(XLossTypeError, match="input1 must be int8"):
        i8.sigmoid_cross_entropy_with_logits_i8(b, x, x.astype(np.int16))
    with pytest.raises(XLossValueError, match="input1 must have input0's shape"):
        i8.sigmoid_cross_entropy_with_logits_i8(b, x, x[:3])
    with pytest.raises(UnsupportedRequestError, match="FT78NE's"):
        i8.sigmoid_cross_entropy_with_logits_i8(xloss.backend("mt7004"), x, x)
    with pytest.raises(XLossTypeError, match="ft78ne backend"):
        i8.sigmoid_cross_entropy_with_logits_i8(xloss.backend("reference"), x, x)
    assert i8.sigmoid_cross_entropy_with_logits_i8(b, x.reshape(2, 2), x.reshape(2, 2)).shape == (2, 2)
