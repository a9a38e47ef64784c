"""The cpu focal-loss kernels against the float64 reference, where their structure could break:
block and SIMD boundaries, weight walks, the three q**gamma forms, thread counts, half types,
output buffers, torch tensors, extreme logits."""

import math
import platform
import re

import ml_dtypes
import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import xloss
from xloss import reference as ref
from xloss.backends.cpu_onednn.focal import POW_CHAIN, POW_GENERAL, POW_SQUARE, pow_form
from xloss.backends.cpu_onednn.layout import BLOCK

DTYPES = ("float32", "float64", "bfloat16", "float16")
MODES = ("forward", "grad", "forward+grad")
# sizes that straddle SIMD widths, the 64-element partial sums and the fixed blocks
SIZES = (1, 7, 8, 63, 64, 65, 129, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 17)
GAMMAS = (0.0, 0.25, 0.5, 1.0, 1.7, 2.0, 2.5, 3.0, 15.5, 16.0)


def _shape(n: int, layout: str):
    """A shape of n elements suited to the weight layout (rows x cols, or rows x cols x k)."""
    if layout in ("none", "scalar", "full"):
        return (n,)
    if layout == "middle":
        return (max(n // 6, 1), 3, 2)
    cols = 13 if n > 13 else 1
    return (max(n // cols, 1), cols)


def _weight(layout: str, shape, rng):
    ws = {"none": lambda: None, "scalar": lambda: (1,) * len(shape), "full": lambda: shape,
          "row": lambda: (shape[0], 1), "col": lambda: (1, shape[1]), "col1d": lambda: (shape[1],),
          "middle": lambda: (1, shape[1], 1), "ends": lambda: (shape[0], 1, shape[2])}[layout]()
    return None if ws is None else rng.uniform(0.0, 2.0, ws)


@st.composite
def focal_cases(draw):
    layout = draw(st.sampled_from(("none", "scalar", "full", "row", "col", "col1d", "middle", "ends")))
    if layout == "ends":
        shape = (draw(st.integers(1, 40)), 3, draw(st.integers(1, 40)))
    else:
        shape = _shape(draw(st.sampled_from(SIZES)), layout)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = math.prod(shape)
    x = rng.standard_normal(n).reshape(shape) * draw(st.sampled_from((1.0, 4.0, 30.0)))
    y = (rng.random(shape) < 0.3).astype(float) if draw(st.booleans()) else rng.random(shape)
    return dict(shape=shape, layout=layout, x=x, y=y, weight=_weight(layout, shape, rng),
                gamma=draw(st.sampled_from(GAMMAS)), alpha=draw(st.sampled_from((0.25, -1.0, 0.0, 1.0))),
                reduction=draw(st.sampled_from(("none", "mean", "sum"))), dtype=draw(st.sampled_from(DTYPES)),
                mode=draw(st.sampled_from(MODES)), grad_array=draw(st.booleans()), rng=rng)


@given(c=focal_cases())
def test_matches_reference_across_blocks_weights_and_gamma_forms(cpu, check, cast, c):
    dt = c["dtype"]
    kw = dict(x=cast(c["x"], dt), y=cast(c["y"], dt), alpha=c["alpha"], gamma=c["gamma"], reduction=c["reduction"])
    if c["weight"] is not None:
        kw["weight"] = cast(c["weight"], dt)
    if c["mode"] != "forward":
        use_array = c["grad_array"] and c["reduction"] == "none"
        kw["grad"] = cast(c["rng"].uniform(-2, 2, c["shape"]), dt) if use_array else -1.5
    check("focal_loss", c["mode"], dt, cpu, **kw)


def test_pow_forms():
    assert pow_form(2.0) == (POW_SQUARE, 2, False)
    assert pow_form(3.0) == (POW_CHAIN, 3, False)
    assert pow_form(0.5) == (POW_CHAIN, 0, True)
    assert pow_form(15.5) == (POW_CHAIN, 15, True)
    assert pow_form(16.0)[0] == POW_GENERAL
    assert pow_form(1.7)[0] == POW_GENERAL


@pytest.mark.parametrize("gamma", (0.0, 0.3, 0.5, 0.99, 2.0))
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_extreme_logits_stay_finite(cpu, check, cast, gamma, dtype):
    x = np.array([-1e4, -5e3, -700.0, -104.0, -88.0, -30.0, -1e-30, 0.0, 1e-30, 30.0, 88.0, 104.0, 700.0, 5e3, 1e4])
    for y0 in (0.0, 1.0, 0.5, 1e-6):
        kw = dict(x=cast(x, dtype), y=cast(np.full(x.shape, y0), dtype), alpha=0.25, gamma=gamma, reduction="none",
                  grad=1.0)
        loss, dx = xloss.focal_loss_with_grad(**kw, backend=cpu)
        assert np.all(np.isfinite(loss)) and np.all(np.isfinite(dx)), (gamma, y0, loss, dx)
        check("focal_loss", "forward+grad", dtype, cpu, **kw)


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
def test_half_types_within_one_ulp_of_the_rounded_reference(cpu, dtype):
    """Binary targets (no cancellation): float32 compute, one rounding -> at most 1 ulp of the half type."""
    rng = np.random.default_rng(5)
    half = xloss.dtypes.FLOAT_DTYPES[dtype]
    x = (rng.standard_normal(5000) * 3).astype(half)
    y = (rng.random(5000) < 0.5).astype(half)
    loss, dx = xloss.focal_loss_with_grad(x, y, reduction="none", backend=cpu)
    for got, exact in ((loss, ref.sigmoid_focal_loss(x, y)), (dx, ref.sigmoid_focal_loss_grad(x, y, 1.0))):
        ulps = np.abs(got.astype(np.float64) - exact) / xloss.dtypes.ulp(exact, dtype)
        assert ulps.max() <= 1.0, (dtype, ulps.max())


def test_results_do_not_depend_on_the_thread_count(cpu):
    rng = np.random.default_rng(6)
    rows = (5 * BLOCK + 123) // 7
    x = (rng.standard_normal((rows, 7)) * 4).astype(np.float32)
    y = rng.random((rows, 7)).astype(np.float32)
    w = rng.random((rows, 1)).astype(np.float32)
    before = numba.get_num_threads()
    runs = []
    try:
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            runs.append([xloss.focal_loss_with_grad(x, y, weight=w, reduction=r, backend=cpu) for r in ("mean", "sum")])
    finally:
        numba.set_num_threads(before)
    for other in runs[1:]:
        for (l0, d0), (l1, d1) in zip(runs[0], other):
            assert l0.tobytes() == l1.tobytes() and d0.tobytes() == d1.tobytes()


def test_threads_option_runs_and_restores_the_setting():
    b = xloss.backend("cpu", threads=1)
    before = numba.get_num_threads()
    x = np.linspace(-5, 5, 3 * BLOCK, dtype=np.float32)
    got = xloss.focal_loss(x, (x > 0).astype(np.float32), reduction="sum", backend=b)
    assert numba.get_num_threads() == before
    np.testing.assert_allclose(got, ref.sigmoid_focal_loss(x, (x > 0), reduction="sum"), rtol=1e-6)


def test_out_buffers_are_filled_in_place(cpu):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 9)).astype(np.float32)
    y = (rng.random((40, 9)) < 0.2).astype(np.float32)
    out = np.full_like(x, np.nan)
    res = xloss.focal_loss(x, y, backend=cpu, out=out)
    assert res is out and np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref.sigmoid_focal_loss(x, y), rtol=2e-6, atol=1e-30)
    scalar = np.full((), np.nan, np.float32)
    xloss.focal_loss(x, y, reduction="mean", backend=cpu, out=scalar)
    np.testing.assert_allclose(scalar, ref.sigmoid_focal_loss(x, y, reduction="mean"), rtol=2e-6)
    gout = np.full_like(x, np.nan)
    assert xloss.focal_loss_grad(x, y, 0.5, reduction="sum", backend=cpu, out=gout) is gout
    np.testing.assert_allclose(gout, ref.sigmoid_focal_loss_grad(x, y, 0.5, reduction="sum"), rtol=4e-6, atol=1e-30)


def test_empty_and_reduced_empty(cpu):
    e = np.zeros((0, 3), np.float32)
    assert np.isnan(xloss.focal_loss(e, e, reduction="mean", backend=cpu))
    assert xloss.focal_loss(e, e, reduction="sum", backend=cpu) == 0.0
    loss, dx = xloss.focal_loss_with_grad(e, e, reduction="none", backend=cpu)
    assert loss.shape == (0, 3) and dx.shape == (0, 3)


def test_read_only_inputs_work(cpu):
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    y = (x > 0).astype(np.float32)
    x.flags.writeable = False
    y.flags.writeable = False
    np.testing.assert_allclose(xloss.focal_loss(x, y, backend=cpu), ref.sigmoid_focal_loss(x, y), rtol=2e-6)


def test_torch_tensors_round_trip_including_bfloat16(cpu):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = torch.from_numpy((rng.standard_normal((64, 5)) * 3).astype(np.float32))
    y = (torch.rand(64, 5, generator=torch.Generator().manual_seed(0)) < 0.4).float()
    for dt, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        loss, dx = xloss.focal_loss_with_grad(x.to(dt), y.to(dt), reduction="none", backend=cpu)
        assert isinstance(loss, torch.Tensor) and loss.dtype == dt and dx.dtype == dt
        exact = ref.sigmoid_focal_loss_grad(x.to(dt).float().numpy(), y.to(dt).float().numpy(), 1.0)
        ulps = np.abs(dx.float().numpy() - exact) / xloss.dtypes.ulp(exact, name)
        assert ulps.max() <= (1.0 if name != "float32" else 16.0), (name, ulps.max())
    # zero-copy in: the numpy side sees the tensor's memory
    assert xloss.focal_loss(x, y, reduction="sum", backend=cpu).shape == ()


def test_cpu_is_the_default_backend_and_declares_every_dtype(cpu):
    from xloss import registry
    from xloss.validation import focal_args

    x = np.zeros(3, ml_dtypes.bfloat16)
    a = focal_args(x, x, None, alpha=0.25, gamma=2.0, weight=None, reduction="none", mode="forward")
    assert registry.resolve(None, a.request()).name == "cpu"
    caps = cpu.capabilities()
    for kernel in ("focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad"):
        assert set(caps[kernel].dtypes) == set(DTYPES)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 SIMD instructions")
@pytest.mark.parametrize("form", [POW_SQUARE, POW_CHAIN, POW_GENERAL])
@pytest.mark.parametrize("store_loss", [True, False], ids=["none", "sum"])
def test_the_focal_loop_vectorizes_for_every_pow_form(form, store_loss):
    """Parameters at run time, as in the kernels, and ``store_loss`` a constant, as each kernel
    (``focal_forward``/``_total``, ``focal_both``/``_total``) has it: LLVM must still emit packed
    divisions (the sigmoid's and r's; the general form's float64 log too). With ``store_loss`` a
    run-time flag the sum-only copy stayed scalar, 3-4x slower than ``reduction="none"``, while a
    packed division elsewhere hid it."""
    from numba import njit

    from xloss.backends.cpu_onednn import focal

    if store_loss:
        @njit(error_model="numpy")
        def run(x, y, ones, loss, dx, gamma, nint, half, alpha, gk):
            return focal._run(x, y, 0, x.size, ones, 0, np.float32(1.0), ones, 0, np.float32(gk), alpha, gamma,
                              nint, half, form, loss, True, dx, True, True)
    else:
        @njit(error_model="numpy")
        def run(x, y, ones, loss, dx, gamma, nint, half, alpha, gk):
            return focal._run(x, y, 0, x.size, ones, 0, np.float32(1.0), ones, 0, np.float32(gk), alpha, gamma,
                              nint, half, form, loss, False, dx, True, True)

    x = np.linspace(-5, 5, 256, dtype=np.float32)
    ones = np.ones(256, np.float32)
    run(x, (x > 0).astype(np.float32), ones, np.empty_like(x), np.empty_like(x), 2.1, 2, False, 0.25, 1.0)
    asm = run.inspect_asm(run.signatures[0])
    assert re.search(r"vdivps\s+%[yz]mm", asm), "the float32 body did not vectorize"
    if form == POW_GENERAL:
        assert re.search(r"vdivpd\s+%[yz]mm", asm), "the float64 power did not vectorize"
