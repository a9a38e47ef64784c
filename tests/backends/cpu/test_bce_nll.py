"""The cpu BCE-gradient and NLL-backward kernels against the float64 reference: weight walks,
block boundaries, both epsilon forms, output buffers, ignored rows, total weight 0, and
NLL values that must equal the reference rounded once (same float64 operations)."""

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import xloss
from xloss import reference as ref
from xloss.backends.cpu_onednn.layout import BLOCK

DTYPES = ("float32", "float64", "bfloat16", "float16")


@st.composite
def bce_cases(draw):
    rows = draw(st.sampled_from((1, 3, 64, BLOCK // 13 + 1, 2 * BLOCK // 13 + 5)))
    cols = draw(st.sampled_from((1, 13, 40)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.uniform(0, 1, (rows, cols))
    x[rng.random(x.shape) < 0.05] = draw(st.sampled_from((0.0, 1.0, 1e-7, 1 - 1e-7)))
    layout = draw(st.sampled_from(("none", "full", "row", "col", "scalar")))
    wshape = {"none": None, "full": (rows, cols), "row": (rows, 1), "col": (cols,), "scalar": (1, 1)}[layout]
    return dict(x=x, y=(rng.random(x.shape) < 0.5) * 1.0 if draw(st.booleans()) else rng.random(x.shape),
                weight=None if wshape is None else rng.uniform(0, 2, wshape), rng=rng,
                reduction=draw(st.sampled_from(("none", "mean", "sum"))),
                eps_mode=draw(st.sampled_from(("clamp", "add"))),
                eps=draw(st.sampled_from((1e-12, 0.0, 1e-3))), dtype=draw(st.sampled_from(DTYPES)),
                grad_array=draw(st.booleans()))


@given(c=bce_cases())
def test_bce_grad_matches_reference(cpu, check, cast, c):
    dt = c["dtype"]
    kw = dict(x=cast(c["x"], dt), y=cast(c["y"], dt), reduction=c["reduction"], eps=c["eps"], eps_mode=c["eps_mode"])
    if c["weight"] is not None:
        kw["weight"] = cast(c["weight"], dt)
    kw["grad"] = cast(c["rng"].uniform(-2, 2, c["x"].shape), dt) if c["grad_array"] and c["reduction"] == "none" \
        else 0.75
    check("bce_grad", c["eps_mode"], dt, cpu, **kw)


def test_bce_grad_out_buffer_and_empty(cpu):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.01, 0.99, 3 * BLOCK + 5).astype(np.float32)
    y = (rng.random(x.size) < 0.5).astype(np.float32)
    out = np.full_like(x, np.nan)
    assert xloss.bce_grad(x, y, backend=cpu, out=out) is out
    np.testing.assert_allclose(out, ref.bce_grad(x, y), rtol=4e-7)
    e = np.zeros(0, np.float32)
    assert xloss.bce_grad(e, e, backend=cpu).shape == (0,)


def test_bce_grad_is_thread_count_independent(cpu):
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (700, 37)).astype(np.float32)
    y = rng.random(x.shape).astype(np.float32)
    w = rng.random((700, 1)).astype(np.float32)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = xloss.bce_grad(x, y, weight=w, backend=cpu)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        b = xloss.bce_grad(x, y, weight=w, backend=cpu)
    finally:
        numba.set_num_threads(before)
    assert a.tobytes() == b.tobytes()


def _nll_exact(grad, s, t, out_dtype, **kw):
    """The reference rounded once to the output dtype: the cpu kernel does the same float64 ops."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return ref.nll_loss_grad(grad, s, t, **kw).astype(out_dtype)


@st.composite
def nll_cases(draw):
    n = draw(st.sampled_from((1, 2, 17, 65, 300)))
    c = draw(st.sampled_from((1, 3, 257, 1000)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = rng.integers(0, c, n)
    t[rng.random(n) < draw(st.sampled_from((0.0, 0.2, 1.0)))] = -100
    return dict(n=n, c=c, t=t.astype(draw(st.sampled_from((np.int64, np.int32)))), rng=rng,
                weight=rng.uniform(0, 2, c) if draw(st.booleans()) else None,
                reduction=draw(st.sampled_from(("none", "mean", "sum"))), dtype=draw(st.sampled_from(DTYPES)),
                total_weight=draw(st.sampled_from((None, None, 0.0, 3.5))), one_d=draw(st.booleans()))


@given(c=nll_cases())
def test_nll_grad_equals_the_reference_rounded_once(cpu, check, cast, c):
    dt = c["dtype"]
    s = cast(-c["rng"].random((c["n"], c["c"])), dt)
    t = c["t"]
    if c["one_d"]:
        s, t = s[0], t[0]
    w = None if c["weight"] is None else cast(c["weight"], dt)
    grad = cast(c["rng"].uniform(-2, 2, c["n"]), dt) if c["reduction"] == "none" and not c["one_d"] else 1.25
    kw = dict(weight=w, reduction=c["reduction"], total_weight=c["total_weight"])
    got = xloss.nll_loss_grad(grad, s, t, backend=cpu, **kw)
    want = _nll_exact(grad, s, t, s.dtype, **kw)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit, NaN included
    check("nll_loss_grad", None, dt, cpu, grad=grad, self=s, target=t, **{k: v for k, v in kw.items() if v is not None})


def test_nll_out_buffer_is_fully_rewritten(cpu):
    rng = np.random.default_rng(3)
    s = -rng.random((513, 77)).astype(np.float32)
    t = rng.integers(0, 77, 513)
    t[::5] = -100
    out = np.full_like(s, np.nan)
    assert xloss.nll_loss_grad(1.0, s, t, backend=cpu, out=out) is out
    np.testing.assert_array_equal(out, _nll_exact(1.0, s, t, np.float32))


def test_nll_all_ignored_and_zero_total_weight(cpu):
    s = np.zeros((6, 4), np.float32)
    ignored = np.full(6, -100)
    assert not xloss.nll_loss_grad(1.0, s, ignored, backend=cpu).any()
    t = np.array([0, 1, 2, 3, -100, 1])
    got = xloss.nll_loss_grad(1.0, s, t, total_weight=0.0, backend=cpu)
    assert np.isinf(got[[0, 1, 2, 3, 5], t[[0, 1, 2, 3, 5]]]).all() and not got[4].any()
    w = np.array([0.0, 1.0, 1.0, 1.0], np.float32)
    got = xloss.nll_loss_grad(1.0, s, np.array([0, 0, -100, 0, 0, 0]), weight=w, backend=cpu)
    assert np.isnan(got[:, 0][[0, 1, 3, 4, 5]]).all()  # 0 * (-1/0): NaN, as PyTorch


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_nll_uint8_targets_and_wide_rows(cpu, cast, dtype):
    s = cast(-np.random.default_rng(4).random((9, 300)), dtype)
    t = np.array([0, 255, 17, 3, 200, 9, 1, 2, 299 % 256], np.uint8)
    got = xloss.nll_loss_grad(2.0, s, t, reduction="sum", backend=cpu)
    np.testing.assert_array_equal(got.view(np.uint8), _nll_exact(2.0, s, t, s.dtype, reduction="sum").view(np.uint8))
