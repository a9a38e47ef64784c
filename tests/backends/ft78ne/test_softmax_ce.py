"""The manual's softmax_cross_entropy_with_logits and sparse_softmax_cross_entropy_with_logits on the emulator:
the headers hold the pages' prototypes, the values are the float64 reference's whatever the core mask or memory
form, and every refusal names its argument and leaves the outputs untouched."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.errors import XLossError
from xloss.reference import cross_entropy_loss as ref

from .conftest import FT78NE, MT7004

DENSE, SPARSE = abi.SOFTMAX_CE, abi.SPARSE_SOFTMAX_CE
SENTINEL = 7.0
#: the pages' _s prototypes, verbatim but for the element type (the page writes float16, the header half) and
#: the sparse page's tail after number_of_classes (cut off in the stored copy: its parameter list's order)
MANUAL_PROTOTYPES = {
    DENSE: ("void fp_softmax_cross_entropy_with_logits_s(float *logits, float *labels, float *probs, float *grads, "
            "float *output, float *sum_data, int batch_size, int num_of_classes, int need_grads, int core_mask)",
            "void hp_softmax_cross_entropy_with_logits_s(half *logits, half *labels, half *probs, half *grads, "
            "half *output, half *sum_data, int batch_size, int num_of_classes, int need_grads, int core_mask)"),
    SPARSE: ("void fp_sparse_softmax_cross_entropy_with_logits_s(float *input, float *losses, float *sum_data, "
             "uint64_t inner_size, uint64_t outter_size, uint64_t axis_size, int *labels, uint64_t is_grad, "
             "float *output, uint64_t batch_size, uint64_t number_of_classes, float *partial_losses, int core_mask)",
             "void hp_sparse_softmax_cross_entropy_with_logits_s(half *input, half *losses, half *sum_data, "
             "uint64_t inner_size, uint64_t outter_size, uint64_t axis_size, int *labels, uint64_t is_grad, "
             "half *output, uint64_t batch_size, uint64_t number_of_classes, half *partial_losses, int core_mask)"),
}


@pytest.mark.parametrize("op", [DENSE, SPARSE])
def test_the_headers_hold_the_manuals_prototypes(op):
    header = re.sub(r"\s+", " ", (abi.INCLUDE / f"{op}.h").read_text())
    for proto in MANUAL_PROTOTYPES[op]:
        assert "FT78NE_API " + proto + ";" in header
        # the _p form: the same list without core_mask, marked assumed
        assert "FT78NE_API " + proto.replace("_s(", "_p(").replace(", int core_mask)", ")") + ";" in header
    assert "ASSUMED" in header


def _problem(dt, n=37, c=29, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 4, (n, c))
    x[0, :3] = [80.0, -80.0, 0.0]  # a far-off class: its log-probability must not come from ln(softmax)
    y = rng.random((n, c))
    y /= y.sum(axis=1, keepdims=True)
    return x.astype(dt), y.astype(dt), rng.integers(0, c, n).astype(np.int32)


def _call(emu, op, dt, form, x, y, mask=0xFF, **over):
    """Run one entry point; (status, message, {output name: array})."""
    n, c = x.shape
    pre = "fp" if dt == "float32" else "hp"
    outs = {k: np.full(shape, SENTINEL, dt) for k, shape in
            (("loss", n), ("grad", (n, c)), ("probs", (n, c)), ("sums", n), ("partial", n))}
    if op == DENSE:
        order = [("x", x), ("y", y), ("probs", None), ("grad", None), ("loss", None), ("sums", None)]
        scalars = [over.get("batch", n), over.get("classes", c), over.get("flag", 1)]
    else:
        order = [("x", x), ("loss", None), ("sums", None)]
        scalars = None
    arrays = {k: (v if v is not None else outs[k]) for k, v in order}
    if form == "p":
        views = {k: emu.private(0, a) for k, a in arrays.items()} | (
            {"y": emu.private(0, y), "grad": emu.private(0, outs["grad"]), "partial": emu.private(0, outs["partial"])}
            if op == SPARSE else {})
        emu.lib.ft78ne_emu_set_core(0)
        ptr = {k: raw for k, (_, raw) in views.items()}
    else:
        ptr = {k: emu.p(a) for k, a in arrays.items()}
        if op == SPARSE:
            ptr.update(y=emu.p(y), grad=emu.p(outs["grad"]), partial=emu.p(outs["partial"]))
    for k in over.get("null", ()):
        ptr[k] = emu.ffi.NULL
    tail = [mask] if form == "s" else []
    if op == DENSE:
        args = [ptr[k] for k, _ in order] + scalars
    else:
        args = [ptr["x"], ptr["loss"], ptr["sums"], over.get("inner", 1), over.get("outer", n), c, ptr["y"],
                over.get("flag", 1), ptr["grad"], n, over.get("classes", c), ptr["partial"]]
    st, msg = emu.call(f"{pre}_{op}_{form}", *args, *tail, chip=over.get("chip", MT7004))
    if form == "p":
        for k in outs.keys() & views.keys():
            outs[k][...] = views[k][0]
        emu.release(0, *(raw for _, raw in views.values()))
    return st, msg, outs


@pytest.mark.parametrize("dt", ["float32", "float16"])
@pytest.mark.parametrize("op", [DENSE, SPARSE])
def test_values_are_the_references_under_every_mask_and_form(emu, dt, op):
    x, y, t = _problem(dt)
    labels = y if op == DENSE else t
    x64 = x.astype(np.float64)
    if op == DENSE:
        want_loss, want_grad = ref.softmax_cross_entropy_with_logits(x64, y.astype(np.float64))
    else:
        r = ref.cross_entropy_loss(x64, t.astype(np.int64), reduction="none")
        want_loss = r.loss
        want_grad = np.exp(r.log_prob) - np.eye(x.shape[1])[t]
    lse_scale = np.abs(x64).max(axis=1) + np.log2(x.shape[1] + 1) + 2.0
    tol_loss = np.finfo(dt).eps / 2 * np.abs(want_loss) + 16 * np.finfo(np.float32).eps * lse_scale
    # one rounding to the dtype (down to its subnormals) after float32 arithmetic
    tol_grad = np.finfo(dt).eps / 2 * np.abs(want_grad) + np.finfo(dt).smallest_subnormal + 16 * np.finfo(
        np.float32).eps * np.abs(want_grad) * lse_scale[:, None]
    first = None
    for mask, form in ((0x01, "s"), (0x81, "s"), (0xFF, "s"), (0, "p")):
        st, msg, out = _call(emu, op, dt, form, x, labels, mask)
        assert st == "FT78NE_OK", msg
        assert (np.abs(out["loss"].astype(np.float64) - want_loss) <= tol_loss).all(), (mask, form)
        assert (np.abs(out["grad"].astype(np.float64) - want_grad) <= tol_grad).all(), (mask, form)
        bits = (out["loss"].tobytes(), out["grad"].tobytes())
        assert first is None or bits == first, (mask, form)  # no result depends on the split or the form
        first = bits


@pytest.mark.parametrize("op", [DENSE, SPARSE])
@pytest.mark.parametrize("label, change, status, word", [
    ("flag 2", dict(flag=2), "FT78NE_ERR_INVALID_ARGUMENT", "grad"),
    ("null logits", dict(null=("x",)), "FT78NE_ERR_NULL_POINTER", ""),
    ("null loss", dict(null=("loss",)), "FT78NE_ERR_NULL_POINTER", ""),
    ("core mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK", "core_mask"),
    ("half on FT78NE", dict(dt="float16", chip=FT78NE), "FT78NE_ERR_UNSUPPORTED", ""),
])
def test_refusals_leave_the_outputs_untouched(emu, op, label, change, status, word):
    change = dict(change)  # the parameters are shared by both operators
    dt = change.pop("dt", "float32")
    x, y, t = _problem(dt, n=5, c=4)
    st, msg, out = _call(emu, op, dt, "s", x, y if op == DENSE else t, change.pop("mask", 0xFF), **change)
    assert st == status, (label, msg)
    assert f"_{op}_s" in msg and word in msg
    assert all((a == SENTINEL).all() for a in out.values())


@pytest.mark.parametrize("change, word", [
    (dict(inner=2), "inner_size"), (dict(outer=4), "outter_size"), (dict(classes=3), "number_of_classes")])
def test_sparse_shape_arguments_must_agree(emu, change, word):
    x, _, t = _problem("float32", n=5, c=4)
    st, msg, out = _call(emu, SPARSE, "float32", "s", x, t, **change)
    assert st == "FT78NE_ERR_INVALID_ARGUMENT" and word in msg
    assert all((a == SENTINEL).all() for a in out.values())


def test_sparse_label_out_of_range_is_refused_before_any_write(emu):
    x, _, t = _problem("float32", n=5, c=4)
    t[3] = 4
    st, msg, out = _call(emu, SPARSE, "float32", "s", x, t)
    assert st == "FT78NE_ERR_INDEX" and "labels[3] = 4" in msg
    assert all((a == SENTINEL).all() for a in out.values())


@pytest.mark.parametrize("kw", [dict(weight=np.ones(4, np.float32)), dict(label_smoothing=0.1),
                                dict(lse_square_scale_for_zloss=1e-3)])
def test_what_the_sparse_page_cannot_express_is_refused(kw):
    x, _, t = _problem("float32", n=5, c=4)
    with pytest.raises(XLossError):
        xloss.cross_entropy_loss(x, t.astype(np.int64), backend="mt7004", **kw)


def test_the_loss_reading_option_is_validated_and_shown():
    with pytest.raises(XLossError, match="softmax_ce_losses must be 'rows'"):
        xloss.backend("mt7004", softmax_ce_losses="scalar")
    b = xloss.backend("mt7004", softmax_ce_losses="one")
    assert "softmax_ce_losses" in repr(b) or b.options.get("softmax_ce_losses") == "one"
