"""The cpu FLCE gradients against the float64 reference: tiling (column chunks and row tiles),
both BLAS providers, both modes and mask formats, label smoothing, half types, empty shapes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import xloss
from xloss.backends.cpu_onednn import flce
from xloss.conformance import DESCRIPTORS
from xloss.conformance.flce import shard_case

DTYPES = ("float32", "float64", "bfloat16", "float16")
PROVIDERS = ("numpy", "torch")


def _backend(blas, chunk_bytes):
    if blas == "torch":
        pytest.importorskip("torch")
    return xloss.backend("cpu", blas=blas, flce_chunk_bytes=chunk_bytes)


def _assert_ok(case, backend):
    bad = [r for r in DESCRIPTORS[case.kernel].check(case, backend) if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail}" for r in bad) + "\n" + case.describe()


@st.composite
def flce_cases(draw):
    bt = draw(st.sampled_from((1, 7, 33, 70)))
    h = draw(st.sampled_from((1, 5, 16)))
    k = draw(st.sampled_from((3, 300, 700)))
    start = draw(st.integers(0, k - 1))
    v = draw(st.integers(1, k - start))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    target = rng.integers(0, k, bt)
    target[rng.random(bt) < 0.2] = -100
    return dict(bt=bt, h=h, k=k, start=start, v=v, rng=rng, target=target,
                scale=draw(st.sampled_from((0.5, 4.0))), dtype=draw(st.sampled_from(DTYPES)),
                mode=draw(st.sampled_from(("softmax", "recompute"))), mask=draw(st.sampled_from(("bool", "bitpacked"))),
                smoothing=draw(st.sampled_from((0.0, 0.0, 0.1))),
                # the tile budget: tiny (many row tiles of 256 columns), medium, the default
                chunk=draw(st.sampled_from((4 * 256 * 8, 64 << 10, None))),
                blas=draw(st.sampled_from(PROVIDERS)))


@given(c=flce_cases())
def test_matches_reference_with_any_tiling_and_blas(c):
    rng = c["rng"]
    x = rng.uniform(-1, 1, (c["bt"], c["h"])) * c["scale"]
    w = rng.uniform(-1, 1, (c["k"], c["h"]))
    grad = np.where(c["target"] == -100, 0.0, rng.uniform(-1, 1, c["bt"]))
    case = shard_case(c["dtype"], c["mode"], x=x, w_global=w, target=c["target"], start=c["start"], v=c["v"],
                      grad=grad, mask_format=c["mask"], label_smoothing=c["smoothing"])
    _assert_ok(case, _backend(c["blas"], c["chunk"]))


@pytest.mark.parametrize("blas", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_many_chunks_and_row_tiles(blas, dtype):
    """BT=90 rows in tiles of 8, V=1000 columns in chunks of 256 (the last one partial)."""
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (90, 12)) * 3
    w = rng.uniform(-1, 1, (1300, 12))
    t = rng.integers(0, 1300, 90)
    b = _backend(blas, 4 * 256 * 8)
    assert flce.plan(90, 1000, 4, 4 * 256 * 8) == (8, 256)
    for mode in ("softmax", "recompute"):
        case = shard_case(dtype, mode, x=x, w_global=w, target=t, start=150, v=1000, grad=rng.uniform(-1, 1, 90),
                          mask_format="bitpacked", label_smoothing=0.05)
        _assert_ok(case, b)


def test_plan_bounds_the_tile():
    for bt, v, budget in ((2048, 32000, 16 << 20), (100000, 32000, 16 << 20), (5, 7, 1 << 20), (3000, 50000, 1 << 20)):
        rows, cols = flce.plan(bt, v, 4, budget)
        assert 1 <= rows <= bt and 1 <= cols <= v
        assert rows * cols * 4 <= max(budget, 256 * 4)
    assert flce.plan(2048, 32000, 4, 16 << 20) == (2048, 2048)
    assert flce.plan(2048, 32000, 4, flce.DEFAULT_CHUNK_BYTES) == (2048, 4096)


@pytest.mark.parametrize("shape", [(0, 4, 5), (0, 4, 0), (3, 0, 5)])
def test_empty_dimensions(cpu, shape):
    bt, h, v = shape
    ig, wg = xloss.fused_linear_cross_entropy_grad(
        np.ones(bt, np.float32), np.ones((bt, h), np.float32), np.ones((v, h), np.float32), np.zeros(bt, bool),
        np.zeros(bt, np.int64), logits_max=np.zeros(bt, np.float32), sum_exp_logits=np.ones(bt, np.float32),
        backend=cpu)
    assert ig.shape == (bt, h) and wg.shape == (v, h) and not ig.any() and not wg.any()


def test_torch_tensors_in_and_out(cpu):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    x = rng.uniform(-1, 1, (9, 8))
    w = rng.uniform(-1, 1, (40, 8))
    case = shard_case("bfloat16", "recompute", x=x, w_global=w, target=rng.integers(0, 40, 9), start=0, v=40,
                      grad=rng.uniform(-1, 1, 9))
    kw = dict(case.kwargs)
    kw["input"] = torch.from_numpy(kw["input"].view(np.int16)).view(torch.bfloat16)
    kw["weight"] = torch.from_numpy(np.ascontiguousarray(kw["weight"]).view(np.int16)).view(torch.bfloat16)
    ig, wg = xloss.fused_linear_cross_entropy_grad(**kw, backend=cpu)
    assert ig.dtype == torch.bfloat16 and wg.dtype == torch.bfloat16 and ig.shape == (9, 8)


# -- bf16 on native bf16 GEMMs; caller's buffers and interrupts -------------------------------

from xloss.backends.cpu_onednn import flce_native16  # noqa: E402
from xloss.dtypes import BFLOAT16  # noqa: E402


def _g_reference(case, dtype):
    """G in float64 from the case's float64 logits, rounded once to ``dtype``, with the products
    of the rounded G, each rounded once: the documented native-bf16 numerics."""
    kw = case.kwargs
    x, w = kw["input"].astype(np.float64), kw["weight"].astype(np.float64)
    z = x @ w.T
    p = np.exp(z - kw["logits_max"][:, None].astype(np.float64)) / kw["sum_exp_logits"][:, None].astype(np.float64)
    hit = ~np.asarray(kw["target_mask"], bool)
    p[np.flatnonzero(hit), kw["masked_target"][hit]] -= 1.0
    g = (p * kw["grad"][:, None].astype(np.float64)).astype(dtype).astype(np.float64)
    # one element of G computed in float32 may round to the neighbouring bf16 near a tie: that
    # moves a product entry by up to ulp(G) * |operand|
    tie = 2.0**-8 * np.abs(g).max() * max(np.abs(x).max(), np.abs(w).max())
    return (g @ w).astype(dtype), (g.T @ x).astype(dtype), tie


def _within_one_ulp(actual, expected, what, tie, bits=8, share=1e-3):
    """Every entry within 1 ulp, but for a few (<= ``share``) moved by a G element rounded the other way at a
    tie (``bits``: significant bits of the dtype; bf16 8, float16 11)."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(e), 1e-30))) - (bits - 1))
    err = np.abs(a - e) - ulp - np.abs(e).max() * 2.0**-14  # (and entries that cancel towards 0)
    assert (err <= tie).all() and (err > 0).mean() <= share, \
        f"{what}: {(err > 0).sum()} of {err.size} entries beyond 1 ulp; worst {np.abs(a - e).max():.3g}"


@pytest.mark.parametrize("chunk", [4 * 256 * 8, 64 << 10, None])
def test_bf16_native_products_round_g_and_each_result_once(chunk):
    torch = pytest.importorskip("torch")
    b = _backend("torch", chunk)
    if not b.gemm().native_bf16():
        pytest.skip("no native bf16 GEMMs on this CPU")
    rng = np.random.default_rng(11)
    bt, h, v = 40, 24, 700
    x, w = rng.uniform(-1, 1, (bt, h)) * 2, rng.uniform(-1, 1, (v, h))
    t = rng.integers(0, v, bt)
    t[::7] = -100
    case = shard_case("bfloat16", "recompute", x=x, w_global=w, target=t, start=0, v=v,
                      grad=np.where(t == -100, 0.0, rng.uniform(0.2, 1.0, bt)))
    kw = dict(case.kwargs)
    args = xloss.validation.flce_args(**{k: kw[k] for k in ("grad", "input", "weight", "target_mask", "masked_target")},
                                      logits_max=kw["logits_max"], sum_exp_logits=kw["sum_exp_logits"], softmax=None,
                                      label_smoothing=0.0, vocab_size=None)
    assert flce_native16.applies(args, b.gemm())
    ig, wg = xloss.fused_linear_cross_entropy_grad(**kw, backend=b)
    exp_ig, exp_wg, tie = _g_reference(case, BFLOAT16)
    _within_one_ulp(ig, exp_ig, "input grad", tie)
    _within_one_ulp(wg, exp_wg, "weight grad", tie)
    del torch


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sixteen_bit_logits_are_float32_at_issue_29s_scale(dtype):
    # logits up to ~20 (issue #29): rounded to bf16 before the softmax they would move p by up to 4 %,
    # far more than one rounding of G; the products of 16-bit operands are taken in float32
    np_dt = BFLOAT16 if dtype == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(29)
    bt, h, v = 64, 256, 1000
    x, w = rng.standard_normal((bt, h)), rng.standard_normal((v, h)) * 0.2
    t = rng.integers(0, v, bt)
    case = shard_case(dtype, "recompute", x=x, w_global=w, target=t, start=0, v=v, grad=rng.uniform(0.2, 1.0, bt))
    z = case.kwargs["input"].astype(np.float64) @ case.kwargs["weight"].astype(np.float64).T
    assert np.abs(z).max() > 10
    ig, wg = xloss.fused_linear_cross_entropy_grad(**case.kwargs, backend=_backend("torch", None))
    exp_ig, exp_wg, tie = _g_reference(case, np_dt)
    bits = 8 if dtype == "bfloat16" else 11
    # (each input-gradient entry sums 1000 elements of G, so more of them meet a G element at a tie)
    _within_one_ulp(ig, exp_ig, "input grad", tie, bits=bits, share=1e-2)
    _within_one_ulp(wg, exp_wg, "weight grad", tie, bits=bits, share=1e-2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("stop_after", [1, 3])
def test_interrupt_leaves_the_callers_outputs_untouched(monkeypatch, dtype, stop_after):
    """A KeyboardInterrupt injected into the (stop_after)-th tile pass: the caller's buffers keep
    their contents; a later call completes them."""
    rng = np.random.default_rng(12)
    x, w = rng.uniform(-1, 1, (30, 8)), rng.uniform(-1, 1, (1000, 8))
    case = shard_case(dtype, "recompute", x=x, w_global=w, target=rng.integers(0, 1000, 30), start=0, v=1000,
                      grad=rng.uniform(-1, 1, 30))
    kw = case.kwargs
    np_dt = kw["input"].dtype
    ig_out, wg_out = np.full((30, 8), 7, np_dt), np.full((1000, 8), 7, np_dt)
    real, calls = flce.recompute_pass, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == stop_after:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(flce, "recompute_pass", interrupted)
    b = _backend("torch" if dtype == "bfloat16" else "numpy", 4 * 256 * 8)  # 4 column chunks: 4 passes
    with pytest.raises(KeyboardInterrupt):
        xloss.fused_linear_cross_entropy_grad(**kw, backend=b, input_grad_out=ig_out, weight_grad_out=wg_out)
    assert (ig_out.astype(np.float64) == 7).all() and (wg_out.astype(np.float64) == 7).all()
    monkeypatch.setattr(flce, "recompute_pass", real)
    xloss.fused_linear_cross_entropy_grad(**kw, backend=b, input_grad_out=ig_out, weight_grad_out=wg_out)
    ig, wg = xloss.fused_linear_cross_entropy_grad(**kw, backend=b)
    assert np.array_equal(ig_out, ig) and np.array_equal(wg_out, wg)


def test_sigint_is_held_back_during_the_copies():
    import os
    import signal

    done = []
    with pytest.raises(KeyboardInterrupt):
        with flce._sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # give the handler bytecodes to run on
                pass
            done.append(True)
    assert done == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
