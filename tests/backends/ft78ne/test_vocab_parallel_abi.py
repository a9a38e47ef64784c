"""OURS: fusedlinearonlinemaxsum and fusedcrossentropylosswithmaxsum (the vocabulary-parallel forward in the
DSP convention) through cffi: sharded forward + all-reduce in NumPy + loss equal F.cross_entropy on the full
logits; results independent of the core mask and of the memory form; each check's status with the outputs
untouched; the headers, the cffi declarations and the exports agree."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xloss.backends.ft78ne_shim import abi
from xloss.reference import flce

FT78NE, MT7004 = abi.CHIPS["ft78ne"], abi.CHIPS["mt7004"]
SENTINEL = 7.0
PRE = {"float32": "fp", "float16": "hp"}
MASKS = (0xFF, 0x01, 0x5A, 0x80)
INCLUDE = abi.EMULATOR.parent / "include"


def _problem(seed, bt, h, v, dt):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(bt, h)) * 1.5).astype(dt)
    w = rng.normal(size=(v, h)).astype(dt)
    return x, w, rng.integers(0, v, bt).astype(np.int32)


def ms_arrays(x, w, t, logits=True):
    bt, v = x.shape[0], w.shape[0]
    return dict(x=x, w=w, t=np.asarray(t, np.int32), lmax=np.full(bt, SENTINEL, np.float32),
                sexp=np.full(bt, SENTINEL, np.float32), pred=np.full(bt, SENTINEL, np.float32),
                tmask=np.full(bt, 9, np.uint8), mt=np.full(bt, 9, np.int32),
                logits=np.full((bt, v), SENTINEL, x.dtype) if logits else None)


MS_OUTS = ("lmax", "sexp", "pred", "tmask", "mt", "logits")


def ms_call(emu, a, start, end, form="s", mask=0xFF, chip=MT7004, logits_defined=None, **over):
    p = {k: emu.p(v) if isinstance(v, np.ndarray) or v is None else v for k, v in a.items()}
    p.update(over)
    bt, h = a["x"].shape
    v = over.get("vocab", a["w"].shape[0])
    defined = int(a["logits"] is not None) if logits_defined is None else logits_defined
    args = [bt, h, v, p["x"], p["w"], p["t"], start, end, p["lmax"], p["sexp"], p["pred"], p["tmask"], p["mt"],
            p["logits"], defined] + ([mask] if form == "s" else [])
    return emu.call(f"{PRE[a['x'].dtype.name]}_fusedlinearonlinemaxsum_{form}", *args, chip=chip)


def ce_arrays(m, se, p, vpl=None):
    bt = len(m)
    return dict(m=np.asarray(m, np.float32), se=np.asarray(se, np.float32), p=np.asarray(p, np.float32),
                vpl=vpl, loss=np.full(bt, SENTINEL, np.float32),
                sm=None if vpl is None else np.full(vpl.shape, SENTINEL, np.float32))


def ce_call(emu, a, dt, form="s", mask=0xFF, chip=MT7004, **over):
    p = {k: emu.p(v) for k, v in a.items()}
    p.update(over)
    v = a["vpl"].shape[1] if a["vpl"] is not None else 0
    args = [len(a["m"]), v, p["m"], p["se"], p["p"], p["vpl"], p["loss"], p["sm"], int(a["vpl"] is not None)]
    return emu.call(f"{PRE[np.dtype(dt).name]}_fusedcrossentropylosswithmaxsum_{form}", *args,
                    *([mask] if form == "s" else []), chip=chip)


def _as_ref(a):
    return flce.OnlineMaxSumOut(a["lmax"], a["sexp"], a["pred"], flce.pack_target_mask(a["tmask"].astype(bool), True),
                                a["mt"], a["logits"])


@pytest.mark.parametrize("dt, chip", [(np.float32, FT78NE), (np.float16, MT7004), (np.float32, MT7004)])
@pytest.mark.parametrize("shards", [1, 2, 3, 4])
def test_sharded_forward_equals_cross_entropy_for_every_core_mask(emu, dt, chip, shards):
    bt, h, v = 21, 19, 29
    x, w, t = _problem(shards, bt, h, v, dt)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    outs = []
    for a_, b_ in flce.vocab_shards(v, shards):
        runs = []
        for mask in MASKS:
            a = ms_arrays(x, w[a_:b_], t)
            assert ms_call(emu, a, a_, b_, mask=mask, chip=chip) == ("FT78NE_OK", "")
            runs.append(a)
        for other in runs[1:]:  # bit for bit whatever cores ran it
            for k in MS_OUTS:
                np.testing.assert_array_equal(other[k], runs[0][k], err_msg=k)
        got, want = runs[0], flce.fused_linear_online_max_sum(x64, w64[a_:b_], t, a_, b_)
        np.testing.assert_allclose(got["lmax"], want.logits_max_local, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["sexp"], want.sum_exp_logits_local, rtol=1e-5)
        np.testing.assert_allclose(got["pred"], want.predicted_logits_local, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(flce.pack_target_mask(got["tmask"].astype(bool), flce.padding_bit(a_, b_)),
                                      want.target_mask)
        assert set(np.unique(got["tmask"])) <= {0, 1}
        np.testing.assert_array_equal(got["mt"], want.masked_target)
        np.testing.assert_allclose(got["logits"].astype(np.float64), want.vocab_parallel_logits,
                                   rtol=2.0**-11 if dt == np.float16 else 1e-6, atol=1e-4)
        outs.append(got)
    m, se, p = flce.all_reduce_online_max_sum([_as_ref(o) for o in outs])
    losses = []
    for mask in MASKS[:2]:
        c = ce_arrays(m, se, p)
        assert ce_call(emu, c, dt, mask=mask, chip=chip) == ("FT78NE_OK", "")
        losses.append(c["loss"])
    np.testing.assert_array_equal(losses[0], losses[1])
    want = F.cross_entropy(torch.from_numpy(x64 @ w64.T), torch.from_numpy(t.astype(np.int64)), reduction="none")
    np.testing.assert_allclose(losses[0], want.numpy(), rtol=1e-5, atol=1e-5)
    for o in outs:  # each shard's softmax against the global statistics
        c = ce_arrays(m, se, p, vpl=o["logits"])
        assert ce_call(emu, c, dt, mask=0x3C, chip=chip) == ("FT78NE_OK", "")
        _, want_sm = flce.fused_cross_entropy_loss_with_max_sum(m, se, p, vocab_parallel_logits=o["logits"])
        np.testing.assert_allclose(c["sm"], want_sm, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(c["loss"], losses[0])


def test_forward_outputs_feed_fusedlinearcrossentropylossgrad(emu):
    """target_mask (one byte per token) and masked_target of each shard, with the all-reduced max and sum, are
    fusedlinearcrossentropylossgrad's recompute inputs: its gradients equal autograd's of F.cross_entropy."""
    bt, h, v = 10, 6, 17
    x, w, t = _problem(4, bt, h, v, np.float32)
    shards = flce.vocab_shards(v, 3)
    outs = []
    for a_, b_ in shards:
        a = ms_arrays(x, w[a_:b_], t, logits=False)
        assert ms_call(emu, a, a_, b_, chip=FT78NE)[0] == "FT78NE_OK"
        outs.append(a)
    m, se, _ = flce.all_reduce_online_max_sum([_as_ref(o) for o in outs])
    m, se, grad = m.astype(np.float32), se.astype(np.float32), np.ones(bt, np.float32)
    dx, dw = np.zeros((bt, h)), []
    for (a_, b_), o in zip(shards, outs):
        ig, wg = np.zeros((bt, h), np.float32), np.zeros((b_ - a_, h), np.float32)
        wsh = np.ascontiguousarray(w[a_:b_])
        st = emu.call("fp_fusedlinearcrossentropylossgrad_s", bt, h, b_ - a_, emu.p(grad), emu.p(x), emu.p(wsh),
                      emu.p(o["tmask"]), emu.p(o["mt"]), emu.p(m), emu.p(se), emu.ffi.NULL, emu.p(ig), emu.p(wg), 0,
                      0xFF, chip=FT78NE)
        assert st[0] == "FT78NE_OK", st
        dx += ig
        dw.append(wg)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    wt = torch.tensor(w.astype(np.float64), requires_grad=True)
    F.cross_entropy(xt @ wt.T, torch.from_numpy(t.astype(np.int64)), reduction="sum").backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(dw), wt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_logits_not_defined_gives_the_same_statistics_and_is_not_accessed(emu):
    x, w, t = _problem(5, 9, 7, 10, np.float32)
    a = ms_arrays(x, w, t)
    assert ms_call(emu, a, 2, 10, chip=FT78NE)[0] == "FT78NE_OK"
    b = ms_arrays(x, w, t, logits=False)  # NULL logits pointer: fine when not defined
    assert ms_call(emu, b, 2, 10, chip=FT78NE)[0] == "FT78NE_OK"
    for k in MS_OUTS[:-1]:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_private_form_matches_shared_bits(emu, dt):
    x, w, t = _problem(8, 6, 5, 9, dt)
    shared = ms_arrays(x, w, t)
    assert ms_call(emu, shared, 3, 9)[0] == "FT78NE_OK"
    core = 2
    emu.lib.ft78ne_emu_set_core(core)
    staged, raws = {}, []
    try:
        for k, v in ms_arrays(x, w, t).items():
            staged[k], raw = emu.private(core, v)
            raws.append(raw)
        assert ms_call(emu, staged, 3, 9, form="p") == ("FT78NE_OK", "")
        for k in MS_OUTS:
            np.testing.assert_array_equal(staged[k], shared[k], err_msg=k)
        c = ce_arrays(shared["lmax"], shared["sexp"], shared["pred"], vpl=shared["logits"])
        assert ce_call(emu, c, dt)[0] == "FT78NE_OK"
        pc = {}
        for k, v in ce_arrays(shared["lmax"], shared["sexp"], shared["pred"], vpl=shared["logits"]).items():
            pc[k], raw = emu.private(core, v)
            raws.append(raw)
        assert ce_call(emu, pc, dt, form="p") == ("FT78NE_OK", "")
        np.testing.assert_array_equal(pc["loss"], c["loss"])
        np.testing.assert_array_equal(pc["sm"], c["sm"])
        # a shared-memory buffer in a _p call is refused, the outputs untouched
        bad = dict(staged, lmax=np.full(6, SENTINEL, np.float32))
        for k in MS_OUTS[1:]:
            bad[k][...] = 9 if k in ("tmask", "mt") else SENTINEL
        assert ms_call(emu, bad, 3, 9, form="p")[0] == "FT78NE_ERR_NOT_PRIVATE"
        assert (bad["lmax"] == SENTINEL).all() and (bad["sexp"] == SENTINEL).all() and (bad["mt"] == 9).all()
    finally:
        emu.release(core, *raws)
        emu.lib.ft78ne_emu_set_core(0)


def _untouched(a, names):
    return all((a[k] == (9 if k in ("tmask", "mt") else SENTINEL)).all() for k in names if a[k] is not None)


@pytest.mark.parametrize("what, kw, status", [
    ("hp_ on FT78NE", dict(chip=FT78NE), "FT78NE_ERR_UNSUPPORTED"),
    ("core_mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK"),
    ("core_mask past core 7", dict(mask=0x100), "FT78NE_ERR_CORE_MASK"),
    ("vocab 0", dict(vocab=0), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("start < 0", dict(start=-1), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("end < start", dict(start=3, end=2), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("end - start > vocab", dict(end=7), "FT78NE_ERR_INVALID_ARGUMENT"),
    ("NULL target", dict(null="t"), "FT78NE_ERR_NULL_POINTER"),
    ("NULL input", dict(null="x"), "FT78NE_ERR_NULL_POINTER"),
    ("NULL target_mask", dict(null="tmask"), "FT78NE_ERR_NULL_POINTER"),
    ("NULL logits though defined", dict(null="logits"), "FT78NE_ERR_NULL_POINTER"),
    ("output over the input", dict(alias=True), "FT78NE_ERR_INVALID_ARGUMENT"),
])
def test_max_sum_checks_leave_outputs_untouched(emu, what, kw, status):
    x, w, t = _problem(1, 5, 4, 6, np.float16)
    a = ms_arrays(x, w, t)
    kw = dict(kw)
    start, end = kw.pop("start", 0), kw.pop("end", 6)
    over = {}
    if "null" in kw:
        over[kw.pop("null")] = emu.ffi.NULL
    if kw.pop("alias", False):
        over["lmax"] = emu.ffi.cast("float *", emu.p(a["x"]))  # logits_max_local inside input
    if "vocab" in kw:
        over["vocab"] = kw.pop("vocab")
    st, msg = ms_call(emu, a, start, end, **kw, **over)
    assert st == status, (what, msg)
    assert msg.startswith("hp_fusedlinearonlinemaxsum_s"), msg
    assert _untouched(a, MS_OUTS), what


@pytest.mark.parametrize("what, kw, status", [
    ("hp_ on FT78NE", dict(chip=FT78NE), "FT78NE_ERR_UNSUPPORTED"),
    ("core_mask 0", dict(mask=0), "FT78NE_ERR_CORE_MASK"),
    ("NULL sum_exp_logits", dict(null="se"), "FT78NE_ERR_NULL_POINTER"),
    ("NULL softmax though defined", dict(null="sm"), "FT78NE_ERR_NULL_POINTER"),
    ("loss over logits_max", dict(alias=True), "FT78NE_ERR_INVALID_ARGUMENT"),
])
def test_loss_checks_leave_outputs_untouched(emu, what, kw, status):
    c = ce_arrays(np.zeros(4), np.ones(4), np.zeros(4), vpl=np.zeros((4, 3), np.float16))
    kw = dict(kw)
    over = {}
    if "null" in kw:
        over[kw.pop("null")] = emu.ffi.NULL
    if kw.pop("alias", False):
        over["loss"] = emu.p(c["m"])
    st, msg = ce_call(emu, c, np.float16, **kw, **over)
    assert st == status, (what, msg)
    assert (c["loss"] == SENTINEL).all() and (c["sm"] == SENTINEL).all(), what
    # negative sizes
    st, _ = emu.call("fp_fusedcrossentropylosswithmaxsum_s", -1, 0, emu.ffi.NULL, emu.ffi.NULL, emu.ffi.NULL,
                     emu.ffi.NULL, emu.ffi.NULL, emu.ffi.NULL, 0, 0xFF)
    assert st == "FT78NE_ERR_INVALID_ARGUMENT"


def test_empty_batch_and_empty_hidden(emu):
    x, w = np.zeros((3, 0), np.float32), np.zeros((4, 0), np.float32)
    a = ms_arrays(x, w, np.array([0, 3, 8]))
    assert ms_call(emu, a, 0, 4, chip=FT78NE)[0] == "FT78NE_OK"
    np.testing.assert_array_equal(a["lmax"], 0)
    np.testing.assert_array_equal(a["sexp"], 4)
    np.testing.assert_array_equal(a["tmask"], [0, 0, 1])
    a = ms_arrays(np.zeros((0, 2), np.float32), np.ones((4, 2), np.float32), np.zeros(0))
    assert ms_call(emu, a, 0, 4, chip=FT78NE)[0] == "FT78NE_OK"


# -- the ABI ---------------------------------------------------------------------------------------------


def _prototypes(text, pattern):
    return {m.group(1): re.sub(r"\s+", " ", m.group(2)).strip() for m in re.finditer(pattern, text, re.S)}


def test_headers_cffi_and_marks_agree():
    header = "".join((INCLUDE / f"{op}.h").read_text() for op in abi.VOCAB_PARALLEL_OPS)
    declared = _prototypes(header, r"FT78NE_API void (\w+)\((.*?)\);")
    assert declared == _prototypes(abi.VOCAB_PARALLEL_CDEF, r"void (\w+)\((.*?)\);")
    assert set(declared) == {f"{p}_{op}_{f}" for p in ("fp", "hp") for op in abi.VOCAB_PARALLEL_OPS
                             for f in ("s", "p")}
    for line in header.splitlines():
        if "FT78NE_API" in line:
            assert line.startswith("/* OURS */ FT78NE_API"), line
    assert set(abi.VOCAB_PARALLEL_OPS) <= set(abi.OURS_OPS) and not set(abi.VOCAB_PARALLEL_OPS) & set(abi.OPS)
    assert "fusedlinearonlinemaxsum" not in (INCLUDE / "ft78ne.h").read_text()  # the vendor header is unchanged


def test_emulator_exports_them(emu):
    for name in _prototypes(abi.VOCAB_PARALLEL_CDEF, r"void (\w+)\((.*?)\);"):
        assert emu.lib.has(name), name
