"""xloss.torch.binary_cross_entropy and nll_loss against PyTorch's own F.binary_cross_entropy /
F.nll_loss (forward and autograd backward) in float64, gradcheck, and every backend."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import xloss
import xloss.torch as xt
from xloss.conformance import backends_declaring as backends_for

F64 = torch.float64
REDUCTIONS = ["none", "mean", "sum"]


def run(fn, x, *args, upstream=None, **kw):
    xg = x.detach().clone().requires_grad_()
    loss = fn(xg, *args, **kw)
    loss.backward(torch.ones_like(loss) if upstream is None else upstream)
    return loss.detach(), xg.grad


def close(actual, expected, rel, what):
    actual, expected = actual.to(F64), expected.to(F64)
    if expected.numel() == 0:
        assert actual.numel() == 0
        return
    both_nan = torch.isnan(actual) & torch.isnan(expected)
    a, e = actual[~both_nan], expected[~both_nan]
    scale = e.abs().max().item() if e.numel() else 0.0
    err = (a - e).abs().max().item() if e.numel() else 0.0
    assert err <= rel * scale + 1e-300, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


# -- binary cross entropy ------------------------------------------------------------------


@st.composite
def bce_case(draw):
    n = draw(st.integers(0, 30))
    x = draw(st.lists(st.floats(0, 1) | st.sampled_from([0.0, 1.0, 1e-13, 1 - 1e-13]), min_size=n, max_size=n))
    y = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    reduction = draw(st.sampled_from(REDUCTIONS))
    weighted = draw(st.booleans())
    up = draw(st.lists(st.floats(-2, 2), min_size=n, max_size=n)) if reduction == "none" else [draw(st.floats(-2, 2))]
    return x, y, reduction, weighted, up


@given(bce_case())
def test_bce_matches_pytorch_float64(case):
    x, y, reduction, weighted, up = case
    x, y = torch.tensor(x, dtype=F64), torch.tensor(y, dtype=F64)
    w = torch.linspace(0.2, 2.0, x.numel(), dtype=F64) if weighted else None
    upstream = torch.tensor(up, dtype=F64) if reduction == "none" else torch.tensor(up[0], dtype=F64)
    got = run(xt.binary_cross_entropy, x, y, w, reduction, upstream=upstream, backend="reference")
    exp = run(F.binary_cross_entropy, x, y, w, reduction=reduction, upstream=upstream)
    close(got[0], exp[0], 1e-13, "loss")
    # PyTorch's clamp constant is float32(1e-12) = 9.99999996e-13 even for float64; xloss uses 1e-12
    clamped = x * (1 - x) < 1e-12
    close(got[1][~clamped], exp[1][~clamped], 1e-13, "dx")
    close(got[1][clamped], exp[1][clamped], 1e-8, "dx where the denominator is clamped")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_gradcheck_float64(reduction):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(4, 6, generator=g, dtype=F64) * 0.8 + 0.1).requires_grad_()
    y = torch.rand(4, 6, generator=g, dtype=F64)
    w = torch.rand(6, generator=g, dtype=F64) + 0.5
    assert torch.autograd.gradcheck(lambda x: xt.binary_cross_entropy(x, y, w, reduction, backend="reference"), (x,))


BCE_CASES = [(dt, b) for dt in ("float32", "float16", "bfloat16")
             for b in backends_for("bce_grad", dt, eps_mode="clamp")]
TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dtype,backend", BCE_CASES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_every_backend_and_dtype(dtype, backend, reduction):
    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(5, 40, generator=g, dtype=F64) * 0.98 + 0.01).to(tdt)
    y = (torch.rand(5, 40, generator=g, dtype=F64) < 0.3).to(tdt)
    got = run(xt.binary_cross_entropy, x, y, None, reduction, backend=backend)
    exp = run(F.binary_cross_entropy, x.to(F64), y.to(F64), reduction=reduction)
    assert got[0].dtype == tdt and got[1].dtype == tdt
    close(got[0], exp[0], TOL[dtype], "loss")
    close(got[1], exp[1], TOL[dtype], "dx")


@pytest.mark.parametrize("backend", backends_for("bce_grad", "float32", eps_mode="add"))
def test_bce_additive_epsilon_backends(backend):
    # FT78NE/MT7004 implement the manual's x(1-x) + eps; the result must be that formula
    x = torch.tensor([1e-7, 0.3, 0.5, 0.9, 1.0], dtype=torch.float32)
    y = torch.tensor([0.0, 1.0, 0.5, 0.0, 1.0], dtype=torch.float32)
    loss, dx = run(xt.binary_cross_entropy, x, y, None, "sum", eps_mode="add", backend=backend)
    x64, y64 = x.to(F64), y.to(F64)
    close(dx, (x64 - y64) / (x64 * (1 - x64) + 1e-12), 2e-6, "dx")
    close(loss, F.binary_cross_entropy(x64, y64, reduction="sum"), 2e-6, "loss")


def test_bce_errors_name_the_argument():
    x = torch.full((3,), 0.5)
    with pytest.raises(xloss.XLossValueError, match="input must hold probabilities"):
        xt.binary_cross_entropy(torch.tensor([0.5, 1.5, 0.2]), torch.zeros(3))
    with pytest.raises(xloss.XLossValueError, match="target"):
        xt.binary_cross_entropy(x, torch.zeros(4))
    with pytest.raises(xloss.XLossValueError, match="weight"):
        xt.binary_cross_entropy(x, torch.zeros(3), torch.ones(2))
    with pytest.raises(xloss.XLossValueError, match="eps_mode"):
        xt.binary_cross_entropy(x, torch.zeros(3), eps_mode="mul")
    with pytest.raises(xloss.XLossValueError, match="eps"):
        xt.binary_cross_entropy(x, torch.zeros(3), eps=-1.0)


def test_bce_module():
    x = torch.rand(10, dtype=F64).requires_grad_()
    y = torch.rand(10, dtype=F64)
    loss = xt.BCELoss(reduction="sum", backend="reference")(x, y)
    close(loss.detach(), F.binary_cross_entropy(x.detach(), y, reduction="sum"), 1e-14, "loss")


# -- NLL -------------------------------------------------------------------------------------


@st.composite
def nll_case(draw):
    n, c = draw(st.integers(0, 12)), draw(st.integers(1, 9))
    ignore = draw(st.sampled_from([-100, 0, c - 1]))
    t = draw(st.lists(st.integers(0, c - 1) | st.just(ignore), min_size=n, max_size=n))
    reduction = draw(st.sampled_from(REDUCTIONS))
    weighted = draw(st.booleans())
    index_dtypes = [torch.int64, torch.int32] + ([torch.uint8] if ignore >= 0 else [])
    tdtype = draw(st.sampled_from(index_dtypes))
    one_d = n == 1 and draw(st.booleans())
    return n, c, ignore, t, reduction, weighted, tdtype, one_d


@given(nll_case())
def test_nll_matches_pytorch_float64(case):
    n, c, ignore, t, reduction, weighted, tdtype, one_d = case
    g = torch.Generator().manual_seed(n * 31 + c)
    x = torch.log_softmax(torch.randn(n, c, generator=g, dtype=F64), 1)
    target = torch.tensor(t, dtype=tdtype)
    if one_d:
        x, target = x[0], target[0]
    w = torch.rand(c, generator=g, dtype=F64) + 0.1 if weighted else None
    out_shape = target.shape if reduction == "none" else ()
    upstream = torch.rand(out_shape, generator=g, dtype=F64) + 0.5
    got = run(xt.nll_loss, x, target, w, ignore, reduction, upstream=upstream, backend="reference")
    exp = run(F.nll_loss, x, target.long(), w, ignore_index=ignore, reduction=reduction, upstream=upstream)
    assert got[0].shape == exp[0].shape
    close(got[0], exp[0], 1e-14, "loss")
    close(got[1], exp[1], 1e-14, "dx")


def test_nll_every_row_ignored_follows_pytorch():
    x = torch.log_softmax(torch.randn(4, 5, dtype=F64), 1)
    t = torch.full((4,), -100)
    got = run(xt.nll_loss, x, t, backend="reference")
    exp = run(F.nll_loss, x, t)
    assert math.isnan(got[0].item()) and math.isnan(exp[0].item())
    assert torch.equal(got[1], exp[1]) and not got[1].any()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_gradcheck_float64(reduction):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 4, generator=g, dtype=F64).requires_grad_()
    t = torch.tensor([0, 3, -100, 1, 2, 3])
    w = torch.rand(4, generator=g, dtype=F64) + 0.5
    assert torch.autograd.gradcheck(lambda x: xt.nll_loss(x, t, w, -100, reduction, backend="reference"), (x,))


NLL_CASES = [(dt, b) for dt in ("float32", "float16", "bfloat16") for b in backends_for("nll_loss_grad", dt)]


@pytest.mark.parametrize("dtype,backend", NLL_CASES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_every_backend_and_dtype(dtype, backend, reduction):
    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(3)
    x = torch.log_softmax(torch.randn(16, 7, generator=g, dtype=F64), 1).to(tdt)
    t = torch.randint(0, 7, (16,), generator=g)
    t[::5] = -100
    w = (torch.rand(7, generator=g, dtype=F64) + 0.5).to(tdt)
    got = run(xt.nll_loss, x, t, w, -100, reduction, backend=backend)
    exp = run(F.nll_loss, x.to(F64), t, w.to(F64), reduction=reduction)
    close(got[0], exp[0], TOL[dtype], "loss")
    close(got[1], exp[1], TOL[dtype], "dx")


def test_nll_errors_name_the_argument():
    x = torch.randn(3, 4)
    with pytest.raises(xloss.XLossIndexError, match=r"target\[1\] = 4"):
        xt.nll_loss(x, torch.tensor([0, 4, 1]))
    with pytest.raises(xloss.XLossTypeError, match="target"):
        xt.nll_loss(x, torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(xloss.XLossValueError, match="target must have shape"):
        xt.nll_loss(x, torch.tensor([0, 1]))
    with pytest.raises(xloss.XLossValueError, match="weight"):
        xt.nll_loss(x, torch.tensor([0, 1, 2]), torch.ones(3))
    with pytest.raises(xloss.XLossValueError, match="input"):
        xt.nll_loss(torch.randn(2, 3, 4), torch.zeros(2, dtype=torch.int64))


def test_nll_module():
    x = torch.log_softmax(torch.randn(5, 3, dtype=F64), 1)
    t = torch.tensor([0, 2, 1, -100, 2])
    loss = xt.NLLLoss(reduction="mean", backend="reference")(x, t)
    close(loss, F.nll_loss(x, t), 1e-15, "loss")


# -- N-d input (N, C, d1, ..., dk), as PyTorch ------------------------------------------------


@st.composite
def nll_nd_case(draw):
    n, c = draw(st.integers(0, 3)), draw(st.integers(1, 4))
    spatial = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2**16))
    return n, c, spatial, seed, draw(st.sampled_from(REDUCTIONS)), draw(st.booleans()), draw(st.booleans())


@given(nll_nd_case())
def test_nll_nd_matches_pytorch_float64(case):
    n, c, spatial, seed, reduction, weighted, ignore = case
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, c) + spatial, generator=g, dtype=F64)
    t = torch.randint(0, c, (n,) + spatial, generator=g)
    if ignore and t.numel():
        t.view(-1)[:: 3] = -100
    w = torch.rand(c, generator=g, dtype=F64) + 0.1 if weighted else None
    upstream = torch.rand(t.shape, generator=g, dtype=F64) if reduction == "none" else torch.tensor(1.5, dtype=F64)
    got = run(xt.nll_loss, x, t, w, -100, reduction, upstream=upstream, backend="reference")
    exp = run(F.nll_loss, x, t, w, ignore_index=-100, reduction=reduction, upstream=upstream)
    assert got[0].shape == exp[0].shape and got[1].shape == x.shape
    close(got[0], exp[0], 1e-13, "loss")
    close(got[1], exp[1], 1e-13, "grad")


def test_nll_nd_shape_errors_name_the_argument():
    with pytest.raises(xloss.XLossValueError, match=r"target must have shape \(2, 4, 5\)"):
        xt.nll_loss(torch.randn(2, 3, 4, 5), torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(xloss.XLossIndexError, match="out of range"):
        xt.nll_loss(torch.randn(2, 3, 4), torch.full((2, 4), 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bce_refuses_exactly_the_inputs_outside_zero_one(dtype):
    """The [0, 1] check (one aminmax pass) against NumPy's elementwise test: NaN, infinities and the nearest
    values outside the interval are refused, -0, 0 and 1 are taken."""
    eps = float(torch.finfo(dtype).eps)
    for edge in [-0.0, 0.0, 1.0, float("nan"), float("inf"), float("-inf"), -1e-30, 1 + eps, -eps]:
        x = torch.tensor([0.25, edge, 0.75]).to(dtype)
        inside = bool(((x.double().numpy() >= 0) & (x.double().numpy() <= 1)).all())
        if inside:
            assert torch.isfinite(xt.binary_cross_entropy(x, torch.zeros(3, dtype=dtype)))
        else:
            with pytest.raises(xloss.XLossValueError, match="input must hold probabilities"):
                xt.binary_cross_entropy(x, torch.zeros(3, dtype=dtype))
