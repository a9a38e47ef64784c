"""The vocabulary-parallel forward on the ascend backend, through the public API: each kernel against
the float64 reference (every declared dtype, int32/int64 targets, masked rows, logits and softmax on
and off, empty BT, strided and checked layouts), the refusals (naming the argument), and a sharded
end to end: per-shard forward + NumPy all-reduce + loss + the FLCE gradient with the forward's mask
and masked target equal F.cross_entropy and autograd on the full logits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import xloss
from xloss.backends.ascend_aclnn import runtime
from xloss.reference import flce

BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = (np.dtype(np.float16), BF16)
#: relative tolerance of a value rounded once to the dtype
ULP = {np.dtype(np.float16): 1e-3, BF16: 8e-3, np.dtype(np.float32): 1e-6}


def problem(seed, bt, h, v, dt, *, vocab=None, tdt=np.int64):
    """x (BT, H), w (V, H) in dt; targets over a vocabulary of ``vocab`` rows (default 3 V) and a few
    ignore-like ones (-100), so a shard sees rows inside and outside it."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(bt, h)) * 1.5).astype(dt)
    w = rng.normal(size=(v, h)).astype(dt)
    t = rng.integers(0, vocab or 3 * v, bt)
    t[::5] = -100
    return x, w, t.astype(tdt)


def check_stats(got, ref, dt, scale):
    """The forward's outputs against the float64 reference: statistics within float32 accumulation,
    mask and masked target exact, logits within one rounding to the dtype."""
    tol = 1e-5 * scale
    np.testing.assert_allclose(got.logits_max_local, ref.logits_max_local, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(got.sum_exp_logits_local, ref.sum_exp_logits_local, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.predicted_logits_local, ref.predicted_logits_local, rtol=1e-5, atol=tol)
    np.testing.assert_array_equal(got.target_mask, ref.target_mask)
    np.testing.assert_array_equal(got.masked_target, ref.masked_target)
    assert got.masked_target.dtype == ref.masked_target.dtype or got.masked_target.dtype.kind == "i"
    if got.vocab_parallel_logits is not None:
        assert got.vocab_parallel_logits.dtype == dt
        np.testing.assert_allclose(got.vocab_parallel_logits.astype(np.float64), ref.vocab_parallel_logits,
                                   rtol=ULP[dt], atol=tol)


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("tdt", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("logits", [False, True], ids=["stats", "logits"])
def test_online_max_sum_matches_reference(emu, dt, tdt, logits):
    x, w, t = problem(1, 19, 24, 11, dt, tdt=tdt)
    for start, end in ((0, None), (11, 22), (7, 15)):  # whole shard, a middle one, one shorter than V
        got = xloss.fused_linear_online_max_sum(x, w, t, start, end, return_logits=logits, backend=emu)
        ref = flce.fused_linear_online_max_sum(x, w, t, start, end)
        assert got.masked_target.dtype == tdt and got.target_mask.dtype == np.uint8
        assert got.target_mask.shape == (3,) and (got.vocab_parallel_logits is not None) == logits
        scale = float(np.abs(ref.vocab_parallel_logits).max())
        check_stats(got, ref, dt, scale)


@pytest.mark.parametrize("dt", [np.dtype(np.float32), *HALVES], ids=lambda d: d.name)
@pytest.mark.parametrize("softmax", [False, True], ids=["loss", "softmax"])
def test_loss_with_max_sum_matches_reference(emu, dt, softmax):
    rng = np.random.default_rng(2)
    logits = (rng.normal(size=(13, 9)) * 3).astype(dt)
    m = logits.astype(np.float64).max(axis=1) + rng.uniform(0, 1, 13)  # a global max above this shard's
    s = np.exp(logits.astype(np.float64) - m[:, None]).sum(axis=1) * rng.uniform(1, 4, 13)
    p = rng.uniform(-3, 0, 13)
    m32, s32, p32 = (a.astype(np.float32) for a in (m, s, p))  # FLOAT statistics, as CANN takes them
    got = xloss.fused_cross_entropy_loss_with_max_sum(m32, s32, p32,
                                                      vocab_parallel_logits=logits if softmax else None, backend=emu)
    loss, sm = flce.fused_cross_entropy_loss_with_max_sum(m32, s32, p32, vocab_parallel_logits=logits if softmax
                                                          else None)
    assert got.loss.dtype == np.float32
    np.testing.assert_allclose(got.loss, loss, rtol=1e-6, atol=1e-6)
    if softmax:
        assert got.softmax.dtype == np.float32 and got.softmax.shape == logits.shape
        np.testing.assert_allclose(got.softmax, sm, rtol=1e-6, atol=1e-7)
    else:
        assert got.softmax is None


def test_empty_bt(emu):
    x, w, t = problem(3, 0, 8, 5, np.float16)
    got = xloss.fused_linear_online_max_sum(x, w, t, 4, return_logits=True, backend=emu)
    assert [a.shape for a in got] == [(0,), (0,), (0,), (0,), (0,), (0, 5)]
    loss = xloss.fused_cross_entropy_loss_with_max_sum(got[0], got[1], got[2],
                                                       vocab_parallel_logits=got.vocab_parallel_logits, backend=emu)
    assert loss.loss.shape == (0,) and loss.softmax.shape == (0, 5)


def test_strided_and_checked_give_the_same_bits(emu, monkeypatch):
    x, w, t = problem(4, 17, 16, 9, BF16, tdt=np.int32)
    base = xloss.fused_linear_online_max_sum(x, w, t, 9, 16, return_logits=True, backend=emu)
    base_loss = xloss.fused_cross_entropy_loss_with_max_sum(*base[:3], vocab_parallel_logits=base[5], backend=emu)
    poisoned = []
    original = runtime.Session.poison

    def spy(self, buf):
        poisoned.append(buf.nbytes)
        original(self, buf)

    monkeypatch.setattr(runtime.Session, "poison", spy)
    for b in (emu.checked(), xloss.backend("ascend", lib=emu.options["lib"], layout="strided")):
        poisoned.clear()
        got = xloss.fused_linear_online_max_sum(x, w, t, 9, 16, return_logits=True, backend=b)
        loss = xloss.fused_cross_entropy_loss_with_max_sum(*got[:3], vocab_parallel_logits=got[5], backend=b)
        for g, e in zip([*got, *loss], [*base, *base_loss]):
            np.testing.assert_array_equal(g, e)
        if b.is_checked:  # every output of both operators was poisoned before its operator ran
            assert poisoned == [17 * 4] * 3 + [3, 17 * 4, 17 * 9 * 2] + [17 * 4, 17 * 9 * 4]


def test_refusals_name_the_argument(emu):
    x, w, t = problem(5, 4, 8, 5, np.float16)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float32 .*float16 or bfloat16"):
        xloss.fused_linear_online_max_sum(x.astype(np.float32), w.astype(np.float32), t, 0, backend=emu)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"mask='bool' \(supported: bitpacked\)"):
        xloss.fused_linear_online_max_sum(x, w, t, 0, mask_format="bool", backend=emu)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float64"):
        xloss.fused_cross_entropy_loss_with_max_sum(np.zeros(2), np.ones(2), np.zeros(2),
                                                    vocab_parallel_logits=np.zeros((2, 3)), backend=emu)
    # CANN's hidden-size limit, declared: refused before any device work, naming input
    with pytest.raises(xloss.UnsupportedRequestError, match=r"input with hidden size H=65535 \(at most 65534\)"):
        xloss.fused_linear_online_max_sum(np.zeros((1, 65535), np.float16), np.zeros((1, 65535), np.float16),
                                          np.zeros(1, np.int64), 0, backend=emu)
    got = xloss.fused_linear_online_max_sum(np.zeros((1, 65534), np.float16), np.zeros((1, 65534), np.float16),
                                            np.zeros(1, np.int64), 0, backend=emu)
    assert got.sum_exp_logits_local[0] == 1 and got.target_mask[0] == 0  # in the shard; padding bits mask(0) = 0


def test_declarations(emu):
    caps = emu.capabilities()
    ms, ce = caps["fused_linear_online_max_sum"], caps["fused_cross_entropy_loss_with_max_sum"]
    assert ms.dtypes == {"float16", "bfloat16"} and ms.variants["mask"] == {"bitpacked"}
    assert ms.variants["target_dtype"] == {"int32", "int64"} and ms.variants["logits"] == {False, True}
    assert ce.dtypes == {"float32", "float16", "bfloat16"} and ce.variants["softmax"] == {False, True}


# ---- sharded end to end ----------------------------------------------------------------------------


def sharded_step(b, x, w, t, shards, mode, mask_format="bitpacked"):
    """Per-shard forward on ``b``, the all-reduce in NumPy, the loss on ``b``, and each shard's FLCE
    gradient on ``b`` from the forward's mask and masked target (``mode``: "recompute" from the
    reduced statistics, "softmax" from the loss kernel's softmax). Returns (loss, input grad,
    weight grad, upstream gradient)."""
    bt = x.shape[0]
    g = np.random.default_rng(9).uniform(0.5, 1.5, bt).astype(np.float32)
    outs = [xloss.fused_linear_online_max_sum(x, w[lo:hi], t, lo, return_logits=mode == "softmax",
                                              mask_format=mask_format, backend=b) for lo, hi in shards]
    # MAX, rescaled SUM, SUM (in float64), held in float32 as a device all-reduce would
    gm, gs, gp = (a.astype(np.float32) for a in flce.all_reduce_online_max_sum(outs))
    loss = xloss.fused_cross_entropy_loss_with_max_sum(gm, gs, gp, backend=b).loss
    ig = np.zeros(x.shape, np.float64)
    wg = []
    for (lo, hi), o in zip(shards, outs):
        kw = {}
        if mode == "softmax":
            kw["softmax"] = xloss.fused_cross_entropy_loss_with_max_sum(
                gm, gs, gp, vocab_parallel_logits=o.vocab_parallel_logits, backend=b).softmax
        else:
            kw.update(logits_max=gm, sum_exp_logits=gs)
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


@pytest.mark.parametrize("dt, tdt", [(np.dtype(np.float16), np.int64), (BF16, np.int32)], ids=["fp16", "bf16"])
@pytest.mark.parametrize("nshards", [1, 3])
@pytest.mark.parametrize("mode", ["recompute", "softmax"])
def test_sharded_forward_loss_and_gradient_equal_torch(emu, dt, tdt, nshards, mode):
    v = 23
    x, w, _ = problem(6, 21, 16, v, dt)
    t = np.random.default_rng(7).integers(0, v, 21).astype(tdt)
    loss, ig, wg, g = sharded_step(emu, x, w, t, flce.vocab_shards(v, nshards), mode)
    ref_loss, ref_ig, ref_wg = torch_truth(x, w, t, g)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    # the gradients are rounded to the 16-bit dtype once per shard; the softmax mode's G also comes from
    # the logits CANN returns in the input dtype (each rounded once: a relative error of ULP * |logit| on p)
    rel = 2 * ULP[dt] + (ULP[dt] * np.abs(x.astype(np.float64) @ w.astype(np.float64).T).max() if mode == "softmax"
                         else 0)
    for got, ref in ((ig, ref_ig), (wg, ref_wg)):
        np.testing.assert_allclose(got, ref, rtol=rel, atol=rel * np.abs(ref).max())
