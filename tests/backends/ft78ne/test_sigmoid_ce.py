"""The manual's sigmoidcrossentropywithlogits and sigmoidcrossentropywithlogitsgrad on the emulator:
the header holds the pages' prototypes, every entry point runs the documented checks in order and
leaves its output untouched when it refuses, and the values are the float64 reference's."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xloss.backends.ft78ne_shim import abi
from xloss.reference import bce_logits

from .conftest import FT78NE, MT7004

FWD, GRAD = abi.SCE_LOGITS, abi.SCE_LOGITS_GRAD
SENTINEL = 7.0
#: the manual's pages (the forward page's i8_ forms: test_sigmoid_ce_i8.py; its hp_ _p form is cut off in the
#: stored copy and assumed)
MANUAL_PROTOTYPES = (
    "void fp_sigmoidcrossentropywithlogits_s(float *input0, float *input1, float *output, int length, int core_mask)",
    "void hp_sigmoidcrossentropywithlogits_s(half *input0, half *input1, half *output, int length, int core_mask)",
    "void fp_sigmoidcrossentropywithlogits_p(float *input0, float *input1, float *output, int length)",
    "void fp_sigmoidcrossentropywithlogitsgrad_s(float *Input0, float *Input1, float *output, int length, "
    "int core_mask)",
    "void hp_sigmoidcrossentropywithlogitsgrad_s(half *Input0, half *Input1, half *output, int length, int core_mask)",
    "void fp_sigmoidcrossentropywithlogitsgrad_p(float *Input0, float *Input1, float *output, int length)",
    "void hp_sigmoidcrossentropywithlogitsgrad_p(half *Input0, half *Input1, half *output, int length)",
)


def test_the_header_holds_the_manuals_prototypes():
    header = re.sub(r"\s+", " ", (abi.INCLUDE / "ft78ne.h").read_text())
    for proto in MANUAL_PROTOTYPES:
        assert "FT78NE_API " + proto + ";" in header
    assert "hp_sigmoidcrossentropywithlogits_p is ASSUMED" in header.replace(" * ", " ")


def _inputs(dt, n=5003, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 6, n)
    x[:8] = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0, 1e-6, -17.0]
    return x.astype(dt), rng.random(n).astype(dt)


@pytest.mark.parametrize("dt", ["float32", "float16"])
@pytest.mark.parametrize("op", [FWD, GRAD])
@pytest.mark.parametrize("form", ["s", "p"])
def test_values_are_the_references(emu, dt, op, form):
    x, y = _inputs(dt)
    out = np.full(x.size, SENTINEL, dt)
    fname = f"{'fp' if dt == 'float32' else 'hp'}_{op}_{form}"
    if form == "s":
        st = emu.call(fname, emu.p(x), emu.p(y), emu.p(out), x.size, 0x0F)
    else:
        views = [emu.private(0, a) for a in (x, y, out)]
        emu.lib.ft78ne_emu_set_core(0)
        st = emu.call(fname, *(raw for _, raw in views), x.size)
        out[...] = views[2][0]
        emu.release(0, *(raw for _, raw in views))
    assert st[0] == "FT78NE_OK", st
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = (bce_logits.bce_with_logits_loss(x64, y64, reduction="none") if op == FWD
            else bce_logits.bce_with_logits_grad(x64, y64, reduction="none"))
    # one rounding to the dtype after float32 arithmetic: a few float32 ulps of the terms (the loss:
    # |x| + 1; the gradient: (1-y) sigmoid(x) + y sigmoid(-x))
    p, s = 1.0 / (1.0 + np.exp(-x64)), 1.0 / (1.0 + np.exp(x64))
    terms = np.abs(x64) + 1.0 if op == FWD else (1.0 - y64) * p + y64 * s
    tol = np.finfo(dt).eps / 2 * np.abs(want) + 16 * np.finfo(np.float32).eps * terms
    assert (np.abs(out.astype(np.float64) - want) <= tol).all()


@pytest.mark.parametrize("op", [FWD, GRAD])
@pytest.mark.parametrize("label, change, status", [
    ("negative length", dict(length=-1), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("null input", dict(null=0), "FT78NE_ERR_NULL_POINTER"),
    ("null output", dict(null=2), "FT78NE_ERR_NULL_POINTER"),
    ("core mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK"),
    ("core mask past 8 cores", dict(mask=0x100), "FT78NE_ERR_CORE_MASK"),
    ("half on FT78NE", dict(dt="float16", chip=FT78NE), "FT78NE_ERR_UNSUPPORTED"),
    ("output overlapping an input off by one", dict(overlap=True), "FT78NE_ERR_INVALID_ARGUMENT"),
])
def test_refusals_leave_the_output_untouched(emu, op, label, change, status):
    dt = change.get("dt", "float32")
    x, y = _inputs(dt, n=64)
    buf = np.full(x.size + 1, SENTINEL, dt)
    out = buf[1:] if change.get("overlap") else np.full(x.size, SENTINEL, dt)
    if change.get("overlap"):
        buf[:-1] = x
        x = buf[:-1]
    ptrs = [emu.p(x), emu.p(y), emu.p(out)]
    if "null" in change:
        ptrs[change["null"]] = emu.ffi.NULL
    fname = f"{'fp' if dt == 'float32' else 'hp'}_{op}_s"
    st, msg = emu.call(fname, *ptrs, change.get("length", x.size), change.get("mask", 0xFF),
                       chip=change.get("chip", MT7004))
    assert st == status, (label, msg)
    assert fname in msg
    if not change.get("overlap"):
        assert (out == SENTINEL).all()


def test_empty_input_is_fine_with_null_pointers(emu):
    for op in (FWD, GRAD):
        st = emu.call(f"fp_{op}_s", emu.ffi.NULL, emu.ffi.NULL, emu.ffi.NULL, 0, 0xFF)
        assert st[0] == "FT78NE_OK", st
