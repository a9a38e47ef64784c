"""The cpu backend's fused cross entropy (``cross_entropy_loss_with_grad``: loss and gradient from one pass
over the logits) against the float64 reference, within the row's conformance allowance: drawn problems in
every dtype, extreme logits, ignored rows, empty input, a bench-sized row (the scratch); the gradient rounded
once (closer to float64 than the vendor pair's, which goes through 16-bit log-probabilities); the same bits
whatever the thread count."""

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
from xloss.conformance.descriptor import Case
from xloss.dtypes import FLOAT_DTYPES
from xloss.kernels.cross_entropy.conformance import WITH_GRAD_DESCRIPTOR as D
from xloss.reference import cross_entropy_loss as ref

DTYPES = ("float16", "bfloat16", "float32", "float64")


def _run_and_check(x, t, dtype, grad=1.0, **kw):
    """Run the cpu kernel and the reference on the same (rounded) inputs; every output within the allowance,
    NaN exactly where the reference has NaN. Returns (loss, dx) of the kernel."""
    dt = FLOAT_DTYPES[dtype]
    cdt = np.float64 if dtype == "float64" else np.float32
    kwargs = dict(input=np.asarray(x, np.float64).astype(np.float32).astype(dt) if dtype != "float64" else
                  np.asarray(x, np.float64), target=np.asarray(t), grad=grad, **kw)
    if kwargs.get("weight") is not None:
        kwargs["weight"] = np.asarray(kwargs["weight"]).astype(cdt)
    case = Case(D.spec.name, None, dtype, kwargs)
    got = D.call(case, xloss.backend("cpu"))
    want = D.oracle(case)
    for name, o, e, tol in zip(("loss", "dx"), got, want, D.allowed(case, want)):
        o64, e64 = np.asarray(o, np.float64), np.asarray(e, np.float64)
        assert o.dtype == dt and o64.shape == np.shape(e64), name
        assert np.array_equal(np.isnan(o64), np.isnan(e64)), name
        with np.errstate(invalid="ignore"):
            err = np.where(np.isnan(e64), 0.0, np.abs(o64 - e64))
        assert (err <= tol).all(), (name, float(np.max(err - tol)))
    return got


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(0, 40), st.sampled_from([1, 2, 7, 64, 513, 1537]),
       st.sampled_from(["none", "mean", "sum"]), st.sampled_from([0.0, 0.1, 1.0]), st.booleans(),
       st.sampled_from([1.0, 4.0, 30.0]), st.integers(0, 2**31))
def test_drawn_problems_match_the_reference(dtype, n, c, reduction, ls, weighted, spread, seed):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, c, n)
    t[rng.random(n) < 0.25] = -100
    grad = rng.uniform(-2, 2, n).astype(FLOAT_DTYPES[dtype]) if reduction == "none" else float(rng.uniform(-2, 2))
    _run_and_check(rng.normal(0, spread, (n, c)), t, dtype, grad, reduction=reduction, label_smoothing=ls,
                   weight=rng.uniform(0.1, 2.0, c) if weighted else None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_logits_ignored_rows_and_empty_input(dtype):
    big = 3e4 if dtype == "float16" else 1e4  # a float16 loss of 2 big stays finite
    x = np.array([[big, -big, 0.0, 1.0], [-big, -big, -big, -big], [big, big, -big, 3.0], [88.8, -88.8, 745.0, 0.0],
                  [1e-30, -1e-30, 0.0, -0.0]])
    t = np.array([1, 2, -100, 3, 0])
    for red in ("none", "mean", "sum"):
        loss, dx = _run_and_check(x, t, dtype, 0.5 if red != "none" else np.full(5, -1.5, FLOAT_DTYPES[dtype]),
                                  reduction=red, label_smoothing=0.1, weight=[0.5, 1.0, 2.0, 0.25])
        assert np.isfinite(np.asarray(dx, np.float64)).all() and not np.asarray(dx[2], np.float64).any()
        loss, dx = _run_and_check(np.zeros((0, 4)), np.zeros(0, np.int64), dtype, reduction=red)
        assert dx.shape == (0, 4)
    loss, dx = _run_and_check(x, np.full(5, -100), dtype, reduction="mean")  # every row ignored: 0/0, as torch
    assert np.isnan(np.asarray(loss, np.float64)) and not np.asarray(dx, np.float64).any()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_bench_sized_row(dtype):
    """C = 32003: a row and its exponentials fill most of L2; three rows a block, rows of every kind."""
    rng = np.random.default_rng(11)
    _run_and_check(rng.normal(0, 2, (7, 32003)), np.array([0, 32002, -100, 5, 16000, 1, 9]), dtype, reduction="mean",
                   label_smoothing=0.05)


def test_16_bit_gradients_are_rounded_once():
    """bf16 logits: each gradient is the float64 value of the (exact) bf16 logits rounded once, but for
    float32 arithmetic; the vendor pair's goes through bf16 log-probabilities and is farther off."""
    rng = np.random.default_rng(2)
    x = (rng.normal(0, 3, (64, 300)).astype(np.float32)).astype(FLOAT_DTYPES["bfloat16"])
    t = rng.integers(0, 300, 64)
    _, dx = xloss.cross_entropy_loss_with_grad(x, t, reduction="sum", backend="cpu")
    _, exact = ref.cross_entropy_loss_with_grad(x, t, reduction="sum")
    lp = xloss.cross_entropy_loss(x, t, reduction="sum", backend="cpu").log_prob
    pair = xloss.cross_entropy_loss_grad(1.0, lp, t, reduction="sum", backend="cpu")
    rounded = exact.astype(np.float32).astype(x.dtype).astype(np.float64)
    ours, theirs = dx.astype(np.float64), pair.astype(np.float64)
    assert np.mean(ours == rounded) > 0.99  # float32 arithmetic rarely moves a bf16 rounding
    assert np.abs(ours - exact).sum() < 0.5 * np.abs(theirs - exact).sum()


def test_the_same_bits_whatever_the_thread_count():
    rng = np.random.default_rng(4)
    x = rng.normal(0, 3, (37, 700)).astype(np.float32)
    t = rng.integers(0, 700, 37)
    results = []
    for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
        b = xloss.backend("cpu", threads=threads)
        results.append(xloss.cross_entropy_loss_with_grad(x, t, 0.3, reduction="sum", label_smoothing=0.1,
                                                           backend=b))
    for loss, dx in results[1:]:
        assert loss == results[0][0] and np.array_equal(dx, results[0][1])
