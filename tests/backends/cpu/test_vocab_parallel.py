"""The cpu backend's vocabulary-parallel forward (online max/sum per shard, loss with max/sum)
against the float64 reference, with the conformance tolerance model
(:func:`xloss.conformance.descriptor.allowance`: half an output ulp, plus ``K_SLACK * eps_c``
times the magnitude of the terms combined).

Logit error model: a float32 (float64) accumulation over H, ``K_SLACK * eps_c * log2(H + 1) *
(|x| @ |w|.T)``, as the FLCE descriptor bounds its GEMMs (bfloat16 included: its products are
float32 ones, not the native bf16 GEMMs' ``hi + lo``). A statistic then gets its own rounding plus the logit errors it
inherits: the max the row's largest, the sum ``sum_j exp(z_j - m) * expm1(err_j + err_max)``,
the predicted logit the target's plus the max's.
"""

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
from xloss import reference
from xloss.conformance.descriptor import K_SLACK, allowance, compare

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}


def compute_name(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


@pytest.fixture(scope="module")
def tiled():
    """A tile budget of 1 KiB: 256-column chunks of one row, so every case crosses tiles."""
    return xloss.backend("cpu", flce_chunk_bytes=1024)


def logit_error(x, w, dtype):
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    h = x64.shape[1]
    eps_c = float(np.finfo(compute_name(dtype)).eps)
    with np.errstate(invalid="ignore", over="ignore"):
        mag = np.abs(x64) @ np.abs(w64).T
        err = K_SLACK * eps_c * math.log2(h + 1) * mag
    return np.where(np.isfinite(err), err, np.inf)


def check_online(x, w, target, start, end=None, backend=None, logits=True, mask_format="bitpacked"):
    """Run one shard and compare every output with the reference."""
    dtype = next(k for k, v in DTYPES.items() if np.dtype(v) == x.dtype)
    cname = compute_name(dtype)
    out = xloss.fused_linear_online_max_sum(x, w, target, start, end, return_logits=logits, mask_format=mask_format,
                                            backend=backend)
    with np.errstate(invalid="ignore", over="ignore"):  # (the special-value cases)
        ref = reference.fused_linear_online_max_sum(x, w, target, start, end)
    bt, v = ref.vocab_parallel_logits.shape
    masked = reference.mask_as_bool(ref.target_mask, bt)
    # the mask, the masked target: exact, in the caller's formats
    if mask_format == "bitpacked":
        np.testing.assert_array_equal(out.target_mask, ref.target_mask)
    else:
        assert out.target_mask.dtype == np.bool_
        np.testing.assert_array_equal(out.target_mask, masked)
    assert out.masked_target.dtype == target.dtype
    np.testing.assert_array_equal(out.masked_target, ref.masked_target)
    for o in out[:3]:
        assert o.dtype == np.dtype(cname) and o.shape == (bt,)
    if bt == 0:
        return out
    z = ref.vocab_parallel_logits
    zerr = logit_error(x, w, dtype)
    err_max = zerr.max(axis=1)
    m = ref.logits_max_local
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(z - m[:, None])
        s_extra = np.nansum(e * np.expm1(zerr + err_max[:, None]), axis=1)
        cols = np.arange(bt), ref.masked_target
        p_extra = np.where(masked, 0.0, zerr[cols] + err_max)
        p_scale = np.where(masked, 0.0, np.abs(z[cols]) + np.abs(m))
        results = [
            compare("logits_max", out.logits_max_local, m, allowance(m, 0.0, cname) + err_max, cname),
            compare("sum_exp_logits", out.sum_exp_logits_local, ref.sum_exp_logits_local,
                    allowance(ref.sum_exp_logits_local, math.log2(v + 1) * ref.sum_exp_logits_local, cname)
                    + s_extra, cname),
            compare("predicted_logits", out.predicted_logits_local, ref.predicted_logits_local,
                    allowance(ref.predicted_logits_local, p_scale, cname) + p_extra, cname),
        ]
        if logits:
            assert out.vocab_parallel_logits.dtype == x.dtype
            results.append(compare("vocab_parallel_logits", out.vocab_parallel_logits, z,
                                   allowance(z, 0.0, dtype) + zerr, dtype))
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail}" for r in bad)
    assert np.all(out.predicted_logits_local[masked] == 0)
    return out


def data(rng, bt, h, v, dtype, scale=1.0):
    x = (rng.standard_normal((bt, h)) * scale / math.sqrt(max(h, 1))).astype(DTYPES[dtype])
    w = (rng.standard_normal((v, h)) * 2).astype(DTYPES[dtype])
    return x, w


# -- online max/sum: properties -----------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_online_max_sum_matches_reference(tiled, cpu, data_):
    d = data_.draw
    dtype = d(st.sampled_from(sorted(DTYPES)))
    bt, h, v = d(st.integers(0, 24)), d(st.integers(0, 20)), d(st.integers(1, 600))
    start = d(st.integers(0, 50))
    end = d(st.integers(start, start + v))
    tdt = d(st.sampled_from([np.int32, np.int64]))
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    x, w = data(rng, bt, h, v, dtype, scale=d(st.sampled_from([1.0, 30.0])))
    target = rng.integers(-3, start + v + 3, bt).astype(tdt)
    check_online(x, w, target, start, end, backend=d(st.sampled_from([tiled, cpu])), logits=d(st.booleans()),
                 mask_format=d(st.sampled_from(["bitpacked", "bool"])))


# -- online max/sum: edge cases -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("logits", [False, True])
def test_online_max_sum_special_values(tiled, dtype, logits):
    """NaN, +-inf and huge logits, in a row that crosses several column tiles: the float64 formulas'
    NaN/inf (an all -inf row: max -inf, sum NaN; a NaN anywhere: NaN max and sum)."""
    rng = np.random.default_rng(1)
    x, w = data(rng, 8, 4, 700, dtype)
    w[:, 0] = np.abs(w[:, 0]).astype(w.dtype) + 1  # positive: x[i, 0] = +-inf makes the row +-inf
    x[0, 0] = -np.inf  # every logit -inf
    x[1, 1] = np.nan  # every logit NaN
    x[2, 0] = np.inf  # every logit +inf
    big = {"float16": 200.0, "bfloat16": 1e18, "float32": 1e18, "float64": 1e150}[dtype]
    x[3] = (x[3].astype(np.float64) * big).astype(x.dtype)  # huge (finite) logits
    target = np.array([5, 5, 5, 5, 690, 650, 10**6, -1], np.int64)
    check_online(x, w, target, 0, None, backend=tiled, logits=logits)
    x[:3, :2] = 1
    for col in (650, 3):  # a NaN column in the last tile, then in the first: NaN max and sum in every row
        w2 = w.copy()
        w2[col, 2] = np.nan
        check_online(x, w2, target, 0, None, backend=tiled, logits=logits)
    w[600:, 3] = np.inf  # +inf logits in the last tile only, where x[i, 3] > 0 (0 * inf: NaN)
    x[:, 3] = np.abs(x[:, 3])
    x[4, 3] = 0
    check_online(x, w, target, 0, None, backend=tiled, logits=logits)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_online_max_sum_shapes_and_bounds(cpu, tiled, dtype):
    rng = np.random.default_rng(2)
    # empty BT; V = 1; empty H (max 0, sum V, predicted 0)
    x, w = data(rng, 0, 8, 30, dtype)
    check_online(x, w, np.zeros(0, np.int64), 0, backend=cpu)
    x, w = data(rng, 9, 8, 1, dtype)
    check_online(x, w, np.array([0, 1, 2, -1, 0, 0, 3, 0, 7], np.int32), 2, 3, backend=tiled)
    check_online(x, w, np.array([0, 1, 2, -1, 0, 0, 3, 0, 7], np.int32), 2, 2, backend=tiled)  # empty range
    x, w = data(rng, 5, 0, 300, dtype)
    out = check_online(x, w, np.array([0, 1, 299, 300, 5]), 0, backend=tiled)
    np.testing.assert_array_equal(out.sum_exp_logits_local, 300)
    # vocab_end < vocab_start + V (rows past the end are masked); targets far outside, both dtypes
    x, w = data(rng, 11, 8, 520, dtype)
    far64 = np.array([100, 619, 620, 499, 2**62, -2**62, np.iinfo(np.int64).min, np.iinfo(np.int64).max, 101, 400,
                      0], np.int64)
    for mask_format in ("bitpacked", "bool"):
        check_online(x, w, far64, 100, 620, backend=tiled, mask_format=mask_format)
        check_online(x, w, far64, 100, 520, backend=tiled, mask_format=mask_format)
        far32 = np.clip(far64, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)
        check_online(x, w, far32, 100, 300, backend=cpu, mask_format=mask_format)


def test_bitpacked_mask_padding_bits(cpu):
    x, w = data(np.random.default_rng(3), 5, 4, 6, "float32")
    out = xloss.fused_linear_online_max_sum(x, w, np.array([0, 7, 1, 2, 9]), 0, backend=cpu)
    assert out.target_mask.tolist() == [0b00010010]  # tokens 1 and 4 masked; padding bits 5..7: mask(0), clear
    out = xloss.fused_linear_online_max_sum(x, w, np.array([0, 7, 1, 2, 9]), 1, backend=cpu)
    assert out.target_mask.tolist() == [0b11110011]  # a shard not holding target 0: padding bits set


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("budget", [1024, 40000, None])
def test_online_max_sum_tile_boundaries(dtype, budget):
    """Column chunks and row tiles of every shape the plan makes (one row; some rows; every row)."""
    b = xloss.backend("cpu", flce_chunk_bytes=budget)
    rng = np.random.default_rng(4)
    x, w = data(rng, 67, 24, 1031, dtype)
    target = rng.integers(0, 1031, 67)
    for logits in (False, True):
        check_online(x, w, target, 0, backend=b, logits=logits)


def test_online_max_sum_at_a_real_tiling(cpu):
    """The default tile budget at a size where it tiles the vocabulary (two column chunks)."""
    rng = np.random.default_rng(5)
    x, w = data(rng, 512, 128, 32000, "float32")
    check_online(x, w, rng.integers(0, 32000, 512), 0, backend=cpu, logits=False)


def test_online_max_sum_numpy_blas(dtype="bfloat16"):
    """The NumPy BLAS provider (no native bf16: widened float32 products)."""
    b = xloss.backend("cpu", blas="numpy", flce_chunk_bytes=1024)
    x, w = data(np.random.default_rng(6), 13, 8, 600, dtype)
    for logits in (False, True):
        check_online(x, w, np.arange(13) * 40, 0, backend=b, logits=logits)


# -- loss with max/sum ------------------------------------------------------------------------


def check_loss(m, s, p, logits=None, backend=None):
    dtype = "float64" if m.dtype == np.float64 else "float32"
    ldt = dtype if logits is None else next(k for k, v in DTYPES.items() if np.dtype(v) == logits.dtype)
    out = xloss.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits, backend=backend)
    loss, sm = reference.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=logits)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        results = [compare("loss", out.loss, loss, allowance(loss, np.abs(np.log(s)) + np.abs(p), dtype), dtype)]
        if logits is not None:
            z = np.asarray(logits, np.float64)
            scale = sm * (np.abs(z) + np.abs(m.astype(np.float64))[:, None] + 1)
            assert out.softmax.dtype == np.dtype(compute_name(ldt))
            results.append(compare("softmax", out.softmax, sm, allowance(sm, scale, compute_name(ldt)),
                                   compute_name(ldt)))
        else:
            assert out.softmax is None
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail}" for r in bad)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_loss_with_max_sum_matches_reference(cpu, data_):
    d = data_.draw
    dtype = d(st.sampled_from(sorted(DTYPES)))
    cdt = np.float64 if dtype == "float64" else np.float32
    bt, v = d(st.integers(0, 30)), d(st.integers(1, 300))
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    z = (rng.standard_normal((bt, v)) * d(st.sampled_from([1.0, 20.0]))).astype(DTYPES[dtype])
    z64 = z.astype(np.float64)
    m = (z64.max(axis=1) if bt else np.zeros(0)) + rng.uniform(0, 2, bt)  # a global max >= the shard's
    s = np.exp(z64 - m[:, None]).sum(axis=1) + rng.uniform(0, 5, bt)
    p = z64[np.arange(bt), rng.integers(0, v, bt)] - m
    check_loss(m.astype(cdt), s.astype(cdt), p.astype(cdt), z if d(st.booleans()) else None, cpu)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_loss_with_max_sum_special_values(cpu, dtype):
    cdt = np.float64 if dtype == "float64" else np.float32
    inf, nan = np.inf, np.nan
    m = np.array([0.0, -inf, inf, nan, 1.0, 2.0, 0.0, 5.0], cdt)
    s = np.array([1.0, nan, 2.0, 1.0, 0.0, inf, nan, 3.0], cdt)
    p = np.array([0.0, 0.0, -inf, 0.0, -1.0, 0.0, 1.0, nan], cdt)
    z = np.array([[0.0, -inf, 3.0], [-inf, -inf, -inf], [inf, 1.0, nan], [1.0, 2.0, 3.0], [1.0, 0.0, -inf],
                  [2.0, 1.0, 0.0], [0.0, 0.0, 0.0], [100.0, -100.0, 4.0]]).astype(DTYPES[dtype])
    check_loss(m, s, p, z, cpu)
    check_loss(m, s, p, None, cpu)
    check_loss(m[:0], s[:0], p[:0], z[:0], cpu)  # empty BT


# -- end to end: shards, the caller's all-reduce, the loss = F.cross_entropy -----------------------------


@pytest.mark.parametrize("shards", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sharded_forward_matches_cross_entropy(tiled, shards, dtype):
    rng = np.random.default_rng(10 + shards)
    bt, h, v = 40, 16, 1000
    x, w = data(rng, bt, h, v, dtype, scale=4.0)
    target = rng.integers(0, v, bt).astype(np.int32 if shards == 3 else np.int64)
    outs, softmax_parts = [], []
    for start, end in reference.vocab_shards(v, shards):
        outs.append(xloss.fused_linear_online_max_sum(x, w[start:end], target, start, return_logits=True,
                                                      backend=tiled))
    # the caller's all-reduce (MAX; SUM of rescaled sums; SUM of predicted logits moved to the global max)
    maxes = np.stack([o.logits_max_local for o in outs])
    gmax = maxes.max(axis=0)
    gsum = sum(o.sum_exp_logits_local * np.exp(o.logits_max_local - gmax) for o in outs)
    here = [~reference.mask_as_bool(o.target_mask, bt) for o in outs]
    gpred = sum(np.where(hh, o.predicted_logits_local + o.logits_max_local - gmax, 0) for o, hh in zip(outs, here))
    for o in outs:
        softmax_parts.append(xloss.fused_cross_entropy_loss_with_max_sum(
            gmax, gsum, gpred, vocab_parallel_logits=o.vocab_parallel_logits, backend=tiled).softmax)
    loss = xloss.fused_cross_entropy_loss_with_max_sum(gmax, gsum, gpred, backend=tiled).loss
    logits = torch.from_numpy(x.astype(np.float64)) @ torch.from_numpy(w.astype(np.float64)).T
    want = torch.nn.functional.cross_entropy(logits, torch.from_numpy(target.astype(np.int64)), reduction="none")
    tol = 2e-5 if dtype == "float32" else 2e-3  # bf16: logits to ~16 bits of |z| <= ~30
    np.testing.assert_allclose(loss, want.numpy(), rtol=tol, atol=tol)
    # the softmax of the shards' logits (rounded to the dtype) against the exact max and sum
    returned = np.concatenate([np.asarray(o.vocab_parallel_logits, np.float64) for o in outs], axis=1)
    exact = logits.numpy()
    want_sm = np.exp(returned - exact.max(axis=1)[:, None]) / np.exp(exact - exact.max(axis=1)[:, None]).sum(axis=1)[
        :, None]
    np.testing.assert_allclose(np.concatenate(softmax_parts, axis=1), want_sm, rtol=tol, atol=1e-7)
