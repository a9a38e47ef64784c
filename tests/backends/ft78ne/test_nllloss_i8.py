"""The FT78NE's int8 nllloss (the manual's i8_nllloss_s) on the emulator and through the adapter: the page's
prototype, the checks the entry point runs and the integer rules (xloss's choice: the page gives none). The oracle
of the int8 check: tests/reference/test_nllloss_i8_reference.py."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.backends.ft78ne_shim import nllloss_i8 as i8
from xloss.errors import UnsupportedRequestError, XLossTypeError, XLossValueError
from xloss.reference import nllloss_i8 as oracle

from .conftest import FT78NE, MT7004

S = abi.NLLLOSS_I8_S
SENTINEL = 0x5A5A5A5A
CODES = {"none": 0, "sum": 1, "mean": 2}  # the page's reduction_type
#: the manual's page, verbatim (its only int8 prototype: the page shows no _p form)
MANUAL_PROTOTYPE = ("void i8_nllloss_s(const int8_t *log_probs, const int *labels, const int8_t *weight, "
                    "int32_t *loss, int32_t *total_weight, int batch_size, int class_num, int reduction_type, "
                    "int core_mask)")


def test_the_pages_header_holds_its_int8_prototype_and_marks_the_rules_as_ours(emu):
    header = re.sub(r"\s+", " ", (abi.INCLUDE / "nllloss.h").read_text().replace("\n * ", " "))
    assert "FT78NE_API " + MANUAL_PROTOTYPE + ";" in header
    assert "XLOSS'S CHOICE, NOT THE VENDOR'S" in header
    assert "i8_nllloss_p" not in header and not hasattr(emu.lib, "i8_nllloss_p")


def _call(emu, x, t, w, reduction, mask=0xFF, chip=FT78NE, batch=None, classes=None):
    """(status, message, loss, total_weight) of one raw call; outputs start as SENTINEL."""
    n, k = x.shape
    loss = np.full(max(n, 1) if reduction == "none" else 1, SENTINEL, np.int32)
    tw = np.full(1, SENTINEL, np.int32)
    p = emu.ffi.from_buffer
    st_, msg = emu.call(S, p("int8_t[]", x) if x.size else emu.ffi.NULL, p("int[]", t) if t.size else emu.ffi.NULL,
                        emu.ffi.NULL if w is None else p("int8_t[]", w), p("int32_t[]", loss), p("int32_t[]", tw),
                        n if batch is None else batch, k if classes is None else classes,
                        CODES.get(reduction, reduction), mask, chip=chip)
    return st_, msg, loss, tw


def _toward_zero(num: int, den: int) -> int:
    """num / den truncated toward zero, exactly."""
    return math.trunc(Fraction(num, den))


def _drawn(rng, n, k):
    return (rng.integers(-128, 128, (n, k)).astype(np.int8), rng.integers(0, k, n).astype(np.intc),
            rng.integers(-128, 128, k).astype(np.int8))


def test_none_and_sum_are_exact_and_the_mean_truncates_toward_zero(emu):
    rng = np.random.default_rng(1)
    x, t, w = _drawn(rng, 2500, 7)
    st_, _, rows, tw = _call(emu, x, t, w, "none")
    assert st_ == "FT78NE_OK" and (rows[:2500] == oracle.row_losses(x, t, w)).all()
    total, weights = oracle.exact_sums(x, t, w)
    assert int(tw[0]) == weights
    assert _call(emu, x, t, w, "sum")[2][0] == total
    q = _call(emu, x, t, w, "mean")[2][0]
    assert q == _toward_zero(total, weights)  # C's division
    # spelled out: -28 / 5 = -5.6 truncates to -5 (floor and nearest would give -6), 28 / 5 to 5
    x2, t2, w2 = np.array([[7, 3], [5, -1], [2, 9]], np.int8), np.array([0, 1, 0], np.intc), np.array([3, -1], np.int8)
    assert _call(emu, x2, t2, w2, "mean")[2][0] == -5 and _call(emu, -x2, t2, w2, "mean")[2][0] == 5


def test_sums_saturate_at_int32_and_a_mean_over_no_weight_is_zero(emu):
    n = 2**31 // 16256 + 5  # rows of -16384 (-128 * -128, negated) or 16256 (-128 * 127, negated): past int32
    x, t = np.full((n, 1), -128, np.int8), np.zeros(n, np.intc)
    st_, _, loss, tw = _call(emu, x, t, np.array([-128], np.int8), "sum")
    assert st_ == "FT78NE_OK" and loss[0] == -(2**31) and tw[0] == -128 * n  # -16384 n: clamped
    loss = _call(emu, x, t, np.array([127], np.int8), "sum")[2]
    assert loss[0] == 2**31 - 1
    st_, _, loss, tw = _call(emu, x[:4], t[:4], np.array([0], np.int8), "mean")
    assert st_ == "FT78NE_OK" and loss[0] == 0 and tw[0] == 0  # xloss's choice: the page gives no value
    st_, _, loss, tw = _call(emu, np.array([[-5, 0], [0, -6]], np.int8), np.array([0, 1], np.intc),
                             np.array([3, -3], np.int8), "mean")
    assert st_ == "FT78NE_OK" and loss[0] == 0 and tw[0] == 0  # weights that cancel: a zero sum too


@pytest.mark.parametrize("mask", [0x01, 0x55, 0x81, 0xF0])
def test_every_core_mask_gives_the_full_masks_values(emu, mask):
    rng = np.random.default_rng(mask)
    x, t, w = _drawn(rng, 8 * 1024 + 5, 5)
    for r in CODES:
        full, part = _call(emu, x, t, w, r), _call(emu, x, t, w, r, mask=mask)
        assert full[0] == part[0] == "FT78NE_OK"
        assert (full[2] == part[2]).all() and full[3] == part[3]


@pytest.mark.parametrize("label, change, status", [
    ("negative batch", dict(batch=-1), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("negative class_num", dict(classes=-1), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("reduction 3", dict(reduction=3), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("null weight", dict(weight=None), "FT78NE_ERR_NULL_POINTER"),
    ("label past class_num", dict(label=4), "FT78NE_ERR_INDEX"),
    ("negative label", dict(label=-1), "FT78NE_ERR_INDEX"),
    ("core mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK"),
    ("core mask past 8 cores", dict(mask=0x100), "FT78NE_ERR_CORE_MASK"),
    ("int8 on MT7004", dict(chip=MT7004), "FT78NE_ERR_UNSUPPORTED"),
])
def test_refusals_leave_the_outputs_untouched(emu, label, change, status):
    x, t, w = np.full((6, 4), -3, np.int8), np.arange(6, dtype=np.intc) % 4, np.ones(4, np.int8)
    if "label" in change:
        t[5] = change["label"]  # the last row: every label is checked before any write
    st_, msg, loss, tw = _call(emu, x, t, change.get("weight", w), change.get("reduction", "none"),
                               mask=change.get("mask", 0xFF), chip=change.get("chip", FT78NE),
                               batch=change.get("batch"), classes=change.get("classes"))
    assert st_ == status, (label, msg)
    assert S in msg
    assert (loss == SENTINEL).all() and tw[0] == SENTINEL


def test_the_empty_batch_writes_zero_sums(emu):
    x, t = np.zeros((0, 3), np.int8), np.zeros(0, np.intc)
    for r in ("none", "sum"):
        st_, _, loss, tw = _call(emu, x, t, None, r)  # no row reads the weight: NULL is fine
        assert st_ == "FT78NE_OK" and tw[0] == 0 and (r == "none" or loss[0] == 0)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(x=hnp.arrays(np.int8, st.tuples(st.integers(0, 60), st.integers(1, 9))), data=st.data(),
       mask=st.integers(1, 0xFF), reduction=st.sampled_from(sorted(CODES)))
def test_the_adapter_agrees_with_the_oracle(x, data, mask, reduction):
    n, k = x.shape
    t = data.draw(hnp.arrays(np.int64, n, elements=st.integers(0, k - 1)))
    w = data.draw(hnp.arrays(np.int8, k))
    total, weights = oracle.exact_sums(x, t, w)
    if reduction == "mean" and weights == 0 and n:
        w = np.ones(k, np.int8)
        total, weights = oracle.exact_sums(x, t, w)
    loss, tw = i8.nll_loss_i8(xloss.backend("ft78ne", core_mask=mask), x, t, w, reduction)
    assert loss.dtype == np.int32 and int(tw) == weights
    if reduction == "none":
        assert loss.shape == (n,) and (loss == oracle.row_losses(x, t, w)).all()
    elif reduction == "sum":
        assert loss.shape == () and int(loss) == total
    else:  # C's division, toward zero; 0 over a zero weight sum (the empty batch): xloss's choices
        assert int(loss) == (_toward_zero(total, weights) if weights else 0)


@pytest.mark.parametrize("options", [{}, {"core_mask": 0x0F}, {"guards": True}])
def test_the_check_passes_the_emulator(options):
    assert i8.check(xloss.backend("ft78ne", **options), examples=6) == []


def test_the_check_catches_a_wrong_emulator_result(monkeypatch):
    """The check is not vacuous: an adapter whose mean is one off fails it, naming the case."""
    real = i8.nll_loss_i8

    def off_by_one(b, x, t, w=None, r="mean"):
        loss, tw = real(b, x, t, w, r)
        return (loss + 2 if r == "mean" else loss), tw

    monkeypatch.setattr(i8, "nll_loss_i8", off_by_one)
    failures = i8.check(xloss.backend("ft78ne"), examples=3)
    assert failures and all("rounded either way" in f for f in failures)  # the means only


def test_bad_arguments_are_refused_by_name():
    b = xloss.backend("ft78ne")
    x, t, w = np.zeros((2, 3), np.int8), np.array([0, 2]), np.ones(3, np.int8)
    with pytest.raises(XLossTypeError, match="log_probs must be int8"):
        i8.nll_loss_i8(b, x.astype(np.float32), t, w)
    with pytest.raises(XLossValueError, match="log_probs must be 2-D"):
        i8.nll_loss_i8(b, x.reshape(-1), t, w)
    with pytest.raises(XLossTypeError, match="labels must be integers"):
        i8.nll_loss_i8(b, x, t.astype(float), w)
    with pytest.raises(XLossValueError, match=r"labels must have shape \(2,\)"):
        i8.nll_loss_i8(b, x, t[:1], w)
    with pytest.raises(XLossValueError, match=r"labels\[1\] = 3"):
        i8.nll_loss_i8(b, x, np.array([0, 3]), w)
    with pytest.raises(XLossTypeError, match="weight must be int8"):
        i8.nll_loss_i8(b, x, t, w.astype(np.int16))
    with pytest.raises(XLossValueError, match=r"weight must have shape \(3,\)"):
        i8.nll_loss_i8(b, x, t, w[:2])
    with pytest.raises(XLossValueError, match="reduction must be one of"):
        i8.nll_loss_i8(b, x, t, w, "batchmean")
    with pytest.raises(UnsupportedRequestError, match="FT78NE's"):
        i8.nll_loss_i8(xloss.backend("mt7004"), x, t, w)
    with pytest.raises(UnsupportedRequestError, match="no _p"):
        i8.nll_loss_i8(xloss.backend("ft78ne", memory="private"), x, t, w)
    with pytest.raises(XLossTypeError, match="ft78ne backend"):
        i8.nll_loss_i8(xloss.backend("reference"), x, t, w)
    loss, tw = i8.nll_loss_i8(b, np.array([[-3, 0, 0], [0, 0, -5]], np.int8), t)  # weight None: all ones
    assert int(loss) == 4 and int(tw) == 2  # (3 + 5) / 2
