"""The vocabulary-parallel forward on the ft78ne/mt7004 backends, through the public API: each kernel
against the float64 reference (every declared dtype, int32/int64 targets including values outside
int32, masked rows, logits and softmax on and off, empty BT), shared vs private memory and several
core masks bit for bit, checked mode, the refusals (naming the argument), and a sharded end to end:
per-shard forward + NumPy all-reduce + loss + the FLCE gradient with the forward's mask and masked
target equal F.cross_entropy and autograd on the full logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.backends.ft78ne_shim.vocab_parallel import dsp_targets
from xloss.reference import flce

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
CHIP_DTYPES = [("ft78ne", F32), ("mt7004", F32), ("mt7004", F16)]
ULP = {F16: 1e-3, F32: 1e-6}
INT_MAX = 2**31 - 1


def backend(chip, **opts):
    return xloss.backend(chip, lib=str(abi.EMULATOR), **opts)


def problem(seed, bt, h, v, dt, *, tdt=np.int64):
    """x (BT, H), w (V, H) in dt; targets over three shards' worth of rows plus ignore-like ones (-100)
    and, for int64, values outside int32."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(bt, h)) * 1.5).astype(dt)
    w = rng.normal(size=(v, h)).astype(dt)
    t = rng.integers(0, 3 * v, bt)
    t[::5] = -100
    if tdt == np.int64 and bt > 3:
        t[1], t[3] = 2**40, -(2**40)
    return x, w, t.astype(tdt)


def as_ref(got):
    """The API's bool mask as the reference's bit-packed one."""
    return got._replace(target_mask=flce.pack_target_mask(got.target_mask, True))  # (the padding is not read)


def check_stats(got, ref, dt):
    scale = float(np.abs(ref.vocab_parallel_logits).max()) if ref.vocab_parallel_logits.size else 1.0
    tol = 1e-5 * scale
    np.testing.assert_allclose(got.logits_max_local, ref.logits_max_local, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(got.sum_exp_logits_local, ref.sum_exp_logits_local, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.predicted_logits_local, ref.predicted_logits_local, rtol=1e-5, atol=tol)
    assert got.target_mask.dtype == np.bool_
    np.testing.assert_array_equal(got.target_mask, flce.unpack_mask(ref.target_mask, got.target_mask.size))
    np.testing.assert_array_equal(got.masked_target, ref.masked_target)
    if got.vocab_parallel_logits is not None:
        assert got.vocab_parallel_logits.dtype == dt
        np.testing.assert_allclose(got.vocab_parallel_logits.astype(np.float64), ref.vocab_parallel_logits,
                                   rtol=ULP[dt], atol=tol)


def run_both(b, x, w, t, start, end=None, logits=True):
    """The forward and, from its statistics and logits, the loss kernel (a shard's own all-reduce)."""
    ms = xloss.fused_linear_online_max_sum(x, w, t, start, end, return_logits=logits, mask_format="bool", backend=b)
    loss = xloss.fused_cross_entropy_loss_with_max_sum(*ms[:3], vocab_parallel_logits=ms.vocab_parallel_logits,
                                                       backend=b)
    return [*ms, *loss]


@pytest.mark.parametrize("chip, dt", CHIP_DTYPES, ids=lambda p: getattr(p, "name", p))
@pytest.mark.parametrize("tdt", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("logits", [False, True], ids=["stats", "logits"])
def test_online_max_sum_matches_reference(chip, dt, tdt, logits):
    b = backend(chip)
    x, w, t = problem(1, 19, 24, 11, dt, tdt=tdt)
    for start, end in ((0, None), (11, 22), (7, 15)):  # whole shard, a middle one, one shorter than V
        got = xloss.fused_linear_online_max_sum(x, w, t, start, end, return_logits=logits, mask_format="bool",
                                                backend=b)
        assert got.masked_target.dtype == tdt and (got.vocab_parallel_logits is not None) == logits
        check_stats(got, flce.fused_linear_online_max_sum(x, w, t, start, end), dt)


def test_int64_targets_outside_int32_stay_outside_every_shard():
    # the clipping: lossless inside int32, and a value beyond it lands at -1 or INT_MAX, outside any shard
    t = np.array([-(2**40), -1, 0, 5, INT_MAX - 1, INT_MAX, 2**31, 2**40], np.int64)
    np.testing.assert_array_equal(dsp_targets(t), [-1, -1, 0, 5, INT_MAX - 1, INT_MAX, INT_MAX, INT_MAX])
    assert dsp_targets(t.astype(np.int32)).dtype == np.int32
    # a shard ending at INT_MAX (the largest a C int can say): INT_MAX - 1 is in it, INT_MAX and 2**40 are not
    x, w, _ = problem(2, 8, 4, 3, F32)
    b = backend("ft78ne")
    for start in (INT_MAX - 3, 0):
        got = xloss.fused_linear_online_max_sum(x, w, t, start, return_logits=True, mask_format="bool", backend=b)
        ref = flce.fused_linear_online_max_sum(x, w, t, start)
        check_stats(got, ref, F32)
    assert list(got.target_mask) == [True, True, False, True, True, True, True, True]


@pytest.mark.parametrize("chip, dt", [*CHIP_DTYPES, ("ft78ne", None)], ids=lambda p: getattr(p, "name", str(p)))
def test_loss_with_max_sum_matches_reference(chip, dt):
    rng = np.random.default_rng(3)
    logits = None if dt is None else (rng.normal(size=(13, 9)) * 3).astype(dt)
    base = np.zeros((13, 9)) if logits is None else logits.astype(np.float64)
    m = (base.max(axis=1) + rng.uniform(0, 1, 13)).astype(np.float32)  # a global max above this shard's
    s = (np.exp(base - m[:, None]).sum(axis=1) * rng.uniform(1, 4, 13)).astype(np.float32)
    p = rng.uniform(-3, 0, 13).astype(np.float32)
    got = xloss.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits, backend=backend(chip))
    loss, sm = flce.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits)
    assert got.loss.dtype == np.float32
    np.testing.assert_allclose(got.loss, loss, rtol=1e-6, atol=1e-6)
    if logits is None:
        assert got.softmax is None
    else:
        assert got.softmax.dtype == np.float32
        np.testing.assert_allclose(got.softmax, sm, rtol=1e-6, atol=1e-7)


def test_empty_bt():
    x, w, t = problem(4, 0, 8, 5, F32)
    for opts in ({}, {"memory": "private"}, {"guards": True}):
        got = run_both(backend("ft78ne", **opts), x, w, t, 4)
        assert [a.shape for a in got] == [(0,), (0,), (0,), (0,), (0,), (0, 5), (0,), (0, 5)]


#: (label, options): core masks in shared memory; private memory whole, in several token tiles, and
#: in token x vocabulary tiles (private_bytes small enough that a shard's weight does not fit)
CONFIGS = [("mask 0x01", {"core_mask": 0x01}), ("mask 0x55", {"core_mask": 0x55}), ("mask 0xF0", {"core_mask": 0xF0}),
           ("private", {"memory": "private"}), ("private 0x81", {"memory": "private", "core_mask": 0x81}),
           ("private tokens", {"memory": "private", "private_bytes": 8192, "core_mask": 0x0F}),
           ("private vocab", {"memory": "private", "private_bytes": 2048, "core_mask": 0x33})]


@pytest.mark.parametrize("chip, dt", [("ft78ne", F32), ("mt7004", F16)], ids=["ft78ne", "mt7004-fp16"])
def test_private_memory_and_core_masks_give_the_shared_bits(chip, dt):
    x, w, t = problem(5, 29, 16, 37, dt)
    base = run_both(backend(chip), x, w, t, 37, 70)
    for label, opts in CONFIGS:
        for guards in (False, True):
            if guards and "private_bytes" in opts:
                opts = dict(opts, private_bytes=opts["private_bytes"] + 9 * 128)  # room for 9 buffers' guards
            got = run_both(backend(chip, guards=guards, **opts), x, w, t, 37, 70)
            what = f"{label} guards={guards}"
            if label == "private vocab":
                # vocabulary tiles: statistics combined in float64 and rounded once (close, not the same
                # bits); mask, masked target, logits and the loss kernel's softmax are element-wise: the same
                for k in (1, 2):
                    np.testing.assert_allclose(got[k], base[k], rtol=1e-6, atol=1e-6, err_msg=what)
                for k in (0, 3, 4, 5):
                    np.testing.assert_array_equal(got[k], base[k], err_msg=what)
                continue
            for k, (g, e) in enumerate(zip(got, base)):
                np.testing.assert_array_equal(g, e, err_msg=f"{what} output {k}")


def test_private_vocabulary_tiles_feed_the_loss_kernel_the_same_bits():
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(23, 41)).astype(np.float32)
    m, s, p = (rng.uniform(1, 3, 23).astype(np.float32) for _ in range(3))
    base = xloss.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits,
                                                       backend=backend("ft78ne"))
    for guards in (False, True):  # 512 bytes (and 6 buffers' guards): one token, at most 32 columns per tile
        small = backend("ft78ne", memory="private", private_bytes=512 + 6 * 128 * guards, core_mask=0x0F,
                        guards=guards)
        got = xloss.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits, backend=small)
        for g, e in zip(got, base):
            np.testing.assert_array_equal(g, e)


def test_refusals_name_the_argument():
    x, w, t = problem(7, 4, 8, 5, F32)
    b, mt = backend("ft78ne"), backend("mt7004")
    with pytest.raises(xloss.UnsupportedRequestError, match=r"mask='bitpacked' \(supported: bool\)"):
        xloss.fused_linear_online_max_sum(x, w, t, 0, backend=b)  # the default mask format is CANN's
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float16"):
        xloss.fused_linear_online_max_sum(x.astype(F16), w.astype(F16), t, 0, mask_format="bool", backend=b)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float64"):
        xloss.fused_linear_online_max_sum(x.astype(np.float64), w.astype(np.float64), t, 0, mask_format="bool",
                                          backend=mt)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float16"):
        stats = (np.zeros(2, np.float32), np.ones(2, np.float32), np.zeros(2, np.float32))
        xloss.fused_cross_entropy_loss_with_max_sum(*stats, vocab_parallel_logits=np.zeros((2, 3), F16), backend=b)
    # the shard's end must fit the signature's C int
    with pytest.raises(xloss.XLossValueError, match=r"vocab_end=2147483649 does not fit the C int"):
        xloss.fused_linear_online_max_sum(x, w, t, INT_MAX - 3, mask_format="bool", backend=b)


def test_declarations():
    for chip, dtypes in (("ft78ne", {"float32"}), ("mt7004", {"float32", "float16"})):
        for memory in ("shared", "private"):
            caps = backend(chip, memory=memory).capabilities()
            ms, ce = caps["fused_linear_online_max_sum"], caps["fused_cross_entropy_loss_with_max_sum"]
            assert ms.dtypes == dtypes and ce.dtypes == dtypes
            assert ms.variants["mask"] == {"bool"} and ms.variants["target_dtype"] == {"int32", "int64"}
            assert ms.variants["logits"] == {False, True} and ce.variants["softmax"] == {False, True}
            assert f"{memory} memory" in ms.notes


# ---- sharded end to end ----------------------------------------------------------------------------


def sharded_step(b, x, w, t, shards, mode):
    """Per-shard forward on ``b``, the all-reduce in NumPy, the loss on ``b``, and each shard's FLCE
    gradient on ``b`` from the forward's mask and masked target (``mode``: "recompute" from the
    reduced statistics, "softmax" from the loss kernel's softmax). Returns (loss, input grad,
    weight grad, upstream gradient)."""
    g = np.random.default_rng(9).uniform(0.5, 1.5, x.shape[0]).astype(np.float32)
    outs = [xloss.fused_linear_online_max_sum(x, w[lo:hi], t, lo, return_logits=mode == "softmax",
                                              mask_format="bool", backend=b) for lo, hi in shards]
    # MAX, rescaled SUM, SUM (in float64), held in float32 as a device all-reduce would
    gm, gs, gp = (a.astype(np.float32) for a in flce.all_reduce_online_max_sum(outs))
    loss = xloss.fused_cross_entropy_loss_with_max_sum(gm, gs, gp, backend=b).loss
    ig = np.zeros(x.shape, np.float64)
    wg = []
    for (lo, hi), o in zip(shards, outs):
        if mode == "softmax":
            kw = {"softmax": xloss.fused_cross_entropy_loss_with_max_sum(
                gm, gs, gp, vocab_parallel_logits=o.vocab_parallel_logits, backend=b).softmax}
        else:
            kw = {"logits_max": gm, "sum_exp_logits": gs}
        i, wgrad = xloss.fused_linear_cross_entropy_grad(g, x, w[lo:hi], o.target_mask, o.masked_target, **kw,
                                                         backend=b)
        ig += i.astype(np.float64)
        wg.append(wgrad.astype(np.float64))
    return loss, ig, np.concatenate(wg), g


def torch_truth(x, w, t, g):
    """F.cross_entropy per token on the full logits (float64) and autograd's gradients."""
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    wt = torch.tensor(w.astype(np.float64), requires_grad=True)
    loss = F.cross_entropy(xt @ wt.T, torch.tensor(t.astype(np.int64)), reduction="none")
    loss.backward(torch.tensor(g.astype(np.float64)))
    return loss.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


@pytest.mark.parametrize("chip, dt, tdt, memory", [("ft78ne", F32, np.int64, "shared"),
                                                   ("ft78ne", F32, np.int32, "private"),
                                                   ("mt7004", F16, np.int64, "shared")],
                         ids=["ft78ne", "ft78ne-private", "mt7004-fp16"])
@pytest.mark.parametrize("nshards", [1, 3])
@pytest.mark.parametrize("mode", ["recompute", "softmax"])
def test_sharded_forward_loss_and_gradient_equal_torch(chip, dt, tdt, memory, nshards, mode):
    v = 23
    x, w, _ = problem(8, 21, 16, v, dt)
    t = np.random.default_rng(7).integers(0, v, 21).astype(tdt)
    b = backend(chip, memory=memory)
    loss, ig, wg, g = sharded_step(b, x, w, t, flce.vocab_shards(v, nshards), mode)
    ref_loss, ref_ig, ref_wg = torch_truth(x, w, t, g)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    # float32: accumulation only; float16: the gradients are rounded once per shard, and the softmax
    # mode's G comes from the logits returned in float16 (a relative error of ULP * |logit| on p)
    rel = 1e-5 if dt == F32 else 2 * ULP[dt] + (ULP[dt] * np.abs(x.astype(np.float64) @ w.astype(np.float64).T).max()
                                              if mode == "softmax" else 0)
    for got, ref in ((ig, ref_ig), (wg, ref_wg)):
        np.testing.assert_allclose(got, ref, rtol=rel, atol=rel * np.abs(ref).max())


def test_an_external_library_writes_into_scratch_with_the_same_results(tmp_path):
    # a copy of the emulator at another path is an external library to the adapter: its outputs go to
    # scratch (int outputs poisoned with all-ones bytes) and reach the caller's arrays after the call
    lib = tmp_path / "libport_ft78ne.so"
    lib.write_bytes(abi.EMULATOR.read_bytes())
    ext = xloss.backend("mt7004", lib=str(lib))
    assert ext.info()["library kind"].startswith("external")
    for dt, tdt in ((F32, np.int64), (F16, np.int32)):
        x, w, t = problem(10, 17, 8, 9, dt, tdt=tdt)
        for g, e in zip(run_both(ext, x, w, t, 9), run_both(backend("mt7004"), x, w, t, 9)):
            np.testing.assert_array_equal(g, e)
