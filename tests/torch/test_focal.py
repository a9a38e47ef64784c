"""xloss.torch.sigmoid_focal_loss / SigmoidFocalLoss against the paper's appendix A.1 code
(torchvision's sigmoid_focal_loss) under PyTorch autograd, in float64; gradcheck; every backend."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import xloss
import xloss.torch as xt
from xloss.conformance import backends_declaring as backends_for
from xloss.torch.paper import paper_focal_loss as appendix_a1

F64 = torch.float64


def oracle(x, y, upstream, *, alpha, gamma, reduction, weight=None):
    """Loss and d loss/d x (times upstream) from autograd through appendix A.1, float64."""
    x64 = x.detach().to(F64).requires_grad_()
    per = appendix_a1(x64, y.to(F64), alpha, gamma, "none", dtype=F64)
    if weight is not None:
        per = per * weight.to(F64)
    loss = {"none": lambda t: t, "mean": torch.mean, "sum": torch.sum}[reduction](per)
    (dx,) = torch.autograd.grad(loss, x64, upstream.to(F64))
    return loss.detach(), dx


def ours(x, y, upstream, *, alpha, gamma, reduction, weight=None, backend="reference"):
    xg = x.detach().clone().requires_grad_()
    loss = xt.sigmoid_focal_loss(xg, y, alpha, gamma, reduction, weight=weight, backend=backend)
    loss.backward(upstream)
    return loss.detach(), xg.grad


def close(actual, expected, rel, what, atol=0.0):
    actual, expected = actual.to(F64), expected.to(F64)
    scale = expected.abs().max().item() if expected.numel() else 0.0
    err = (actual - expected).abs().max().item() if expected.numel() else 0.0
    assert err <= rel * scale + atol + 1e-300, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


@st.composite
def focal_case(draw):
    n = draw(st.integers(0, 40))
    x = draw(st.lists(st.floats(-30, 30, allow_nan=False), min_size=n, max_size=n))
    soft = draw(st.booleans())
    y = draw(st.lists(st.floats(0, 1) if soft else st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    alpha = draw(st.sampled_from([0.25, -1.0, 0.0, 1.0]) | st.floats(0, 1))
    gamma = draw(st.sampled_from([0.0, 1.0, 2.0, 3.0]) | st.floats(1, 5))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]))
    shape = draw(st.sampled_from([(n,), (1, n)]))
    up = draw(st.lists(st.floats(-3, 3), min_size=n, max_size=n)) if reduction == "none" else [draw(st.floats(-3, 3))]
    weighted = draw(st.booleans())
    return x, y, alpha, gamma, reduction, shape, up, weighted


@given(focal_case())
def test_matches_appendix_a1_autograd_in_float64(case):
    x, y, alpha, gamma, reduction, shape, up, weighted = case
    x = torch.tensor(x, dtype=F64).reshape(shape)
    y = torch.tensor(y, dtype=F64).reshape(shape)
    upstream = torch.tensor(up, dtype=F64).reshape(shape) if reduction == "none" else torch.tensor(up[0], dtype=F64)
    weight = torch.linspace(0.5, 1.5, x.shape[-1], dtype=F64) if weighted else None
    kw = dict(alpha=alpha, gamma=gamma, reduction=reduction, weight=weight)
    exp_loss, exp_dx = oracle(x, y, upstream, **kw)
    got_loss, got_dx = ours(x, y, upstream, **kw)
    assert got_loss.shape == exp_loss.shape and got_dx.shape == x.shape
    if reduction == "mean" and x.numel() == 0:
        assert math.isnan(got_loss.item()) and math.isnan(exp_loss.item())
        return
    # A.1's BCE-with-logits forms log(1 + e^-|x|) with log, not log1p: an absolute error of
    # about eps * (1 + |x|) per element, which a relative tolerance cannot absorb for tiny losses
    n = x.numel() if reduction == "sum" else 1
    big = lambda t: t.abs().max().item() if t.numel() else 0.0
    atol = 4e-16 * (1 + big(x)) * n * max(1.0, big(upstream))
    close(got_loss, exp_loss, 1e-12, "loss", atol)
    close(got_dx, exp_dx, 1e-11, "dx", atol)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0])
def test_gradcheck_float64(reduction, gamma):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 5, generator=g, dtype=F64) * 2).requires_grad_()
    y = (torch.rand(3, 5, generator=g, dtype=F64) > 0.5).to(F64)
    y[0] = torch.rand(5, generator=g, dtype=F64)  # soft targets too
    w = torch.rand(1, 5, generator=g, dtype=F64) + 0.5
    fn = lambda x: xt.sigmoid_focal_loss(x, y, 0.25, gamma, reduction, weight=w, backend="reference")
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", backends_for("focal_loss", "float64", mode="forward+grad"))
def test_gradcheck_float64_every_backend(backend):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(17, generator=g, dtype=F64).requires_grad_()
    y = (torch.rand(17, generator=g, dtype=F64) > 0.7).to(F64)
    assert torch.autograd.gradcheck(lambda x: xt.sigmoid_focal_loss(x, y, 0.25, 2.0, "sum", backend=backend), (x,))


CASES = [(dt, b) for dt in ("float32", "float16", "bfloat16")
         for b in backends_for("focal_loss", dt, mode="forward+grad")]
TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dtype,backend", CASES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_every_backend_and_dtype_against_float64_oracle(dtype, backend, reduction):
    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(6, 33, generator=g, dtype=F64) * 4).to(tdt)
    y = (torch.rand(6, 33, generator=g, dtype=F64) < 0.2).to(tdt)
    up = (torch.rand(6, 33, generator=g, dtype=F64) + 0.5) if reduction == "none" else torch.tensor(1.5, dtype=F64)
    loss, dx = ours(x, y, up.to(tdt), alpha=0.25, gamma=2.0, reduction=reduction, backend=backend)
    assert loss.dtype == tdt and dx.dtype == tdt
    # the oracle sees exactly the rounded inputs (and upstream) the backend saw
    exp_loss, exp_dx = oracle(x, y, up.to(tdt), alpha=0.25, gamma=2.0, reduction=reduction)
    close(loss, exp_loss, TOL[dtype], "loss")
    close(dx, exp_dx, TOL[dtype], "dx")


def test_module_matches_function_and_float32_appendix_code():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 100, generator=g, dtype=torch.float32).requires_grad_()
    y = (torch.rand(4, 100, generator=g, dtype=torch.float32) < 0.1).float()
    mod = xt.SigmoidFocalLoss(alpha=0.25, gamma=2.0, reduction="mean", backend="reference")
    loss = mod(x, y)
    loss.backward()
    x2 = x.detach().clone().requires_grad_()
    ref = appendix_a1(x2, y, 0.25, 2, "mean")  # A.1 as written: float32 autograd
    ref.backward()
    assert torch.allclose(loss, ref, rtol=1e-5) and torch.allclose(x.grad, x2.grad, rtol=1e-4, atol=1e-9)
    assert "gamma=2.0" in repr(mod) and "reference" in repr(mod)


def test_forward_saves_only_dx_and_scales_it():
    x = torch.randn(50, dtype=F64).requires_grad_()
    y = (torch.rand(50, dtype=F64) < 0.5).to(F64)
    loss = xt.sigmoid_focal_loss(x, y, reduction="sum", backend="reference")
    saved = loss.grad_fn.saved_tensors
    assert len(saved) == 1 and saved[0].shape == x.shape
    (loss * 3.0).backward()
    _, dx = oracle(x, y, torch.tensor(3.0, dtype=F64), alpha=0.25, gamma=2.0, reduction="sum")
    close(x.grad, dx, 1e-13, "dx scaled by 3")


def test_expanded_and_explicit_upstream_agree_for_none():
    x = torch.randn(7, 9, dtype=F64).requires_grad_()
    y = (torch.rand(7, 9, dtype=F64) < 0.5).to(F64)
    xt.sigmoid_focal_loss(x, y, backend="reference").sum().backward()  # upstream: an expanded 1
    a = x.grad.clone()
    x.grad = None
    xt.sigmoid_focal_loss(x, y, backend="reference").backward(torch.ones(7, 9, dtype=F64))
    assert torch.equal(a, x.grad)
    x.grad = None
    up = torch.rand(7, 9, dtype=F64)
    xt.sigmoid_focal_loss(x, y, backend="reference").backward(up)
    close(x.grad, oracle(x, y, up, alpha=0.25, gamma=2.0, reduction="none")[1], 1e-12, "dx")


def test_no_grad_forward_keeps_nothing_and_matches():
    x = torch.randn(20, dtype=F64)
    y = (torch.rand(20, dtype=F64) < 0.5).to(F64)
    out = xt.sigmoid_focal_loss(x, y, reduction="mean", backend="reference")
    assert out.grad_fn is None
    close(out, appendix_a1(x, y, reduction="mean", dtype=F64), 1e-13, "loss")


def test_finite_for_huge_logits_and_gamma_below_one():
    x = torch.tensor([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=torch.float32).requires_grad_()
    y = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0])
    for gamma in (0.0, 0.3, 2.0):
        loss = xt.sigmoid_focal_loss(x, y, 0.25, gamma, "sum", backend="reference")
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(x.grad).all()
        x.grad = None


def test_errors_name_the_argument():
    x = torch.randn(4)
    with pytest.raises(xloss.XLossValueError, match="targets"):
        xt.sigmoid_focal_loss(x, torch.zeros(5))
    with pytest.raises(ValueError, match="Invalid"):  # torchvision's tests match on this word
        xt.sigmoid_focal_loss(x, torch.zeros(4), reduction="avg")
    with pytest.raises(xloss.XLossValueError, match="reduction"):
        xt.sigmoid_focal_loss(x, torch.zeros(4), reduction="avg")
    with pytest.raises(xloss.XLossValueError, match="gamma"):
        xt.sigmoid_focal_loss(x, torch.zeros(4), gamma=-1.0, backend="reference")
    with pytest.raises(xloss.XLossTypeError, match="inputs"):
        xt.sigmoid_focal_loss([0.0], torch.zeros(1))
    with pytest.raises(xloss.XLossTypeError, match="inputs"):
        xt.sigmoid_focal_loss(torch.zeros(3, dtype=torch.int64), torch.zeros(3))
    with pytest.raises(xloss.BackendNotFoundError):
        xt.sigmoid_focal_loss(x, torch.zeros(4), backend="no-such-backend")


# -- targets that require grad (torchvision differentiates w.r.t. them too) -------------------


@given(st.integers(1, 12), st.sampled_from([0.0, 1.0, 1.5, 2.0]), st.sampled_from([-1.0, 0.0, 0.3, 1.0]),
       st.sampled_from(["none", "mean", "sum"]), st.booleans(), st.integers(0, 2**16))
def test_targets_gradient_matches_torchvision_formula_float64(n, gamma, alpha, reduction, weighted, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=g, dtype=F64) * 3).requires_grad_()
    y = torch.rand(n, generator=g, dtype=F64).requires_grad_()  # soft targets, e.g. from a teacher
    w = torch.rand(n, generator=g, dtype=F64) if weighted else None
    up = torch.rand(n, generator=g, dtype=F64) if reduction == "none" else torch.tensor(0.7, dtype=F64)
    loss = xt.sigmoid_focal_loss(x, y, alpha, gamma, reduction, weight=w, backend="reference")
    gx, gy = torch.autograd.grad(loss, (x, y), up)
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    ref = appendix_a1(x2, y2, alpha, gamma, "none", dtype=F64)
    ref = ref * w if weighted else ref
    ref = {"none": ref, "mean": ref.mean(), "sum": ref.sum()}[reduction]
    ex, ey = torch.autograd.grad(ref, (x2, y2), up)
    close(loss, ref, 1e-12, "loss")
    close(gx, ex, 1e-10, "d/dinputs")
    close(gy, ey, 1e-10, "d/dtargets")


def test_targets_requiring_grad_alone_get_their_gradient():
    x = torch.randn(6, dtype=F64)
    y = torch.rand(6, dtype=F64, requires_grad=True)
    xt.sigmoid_focal_loss(x, y, reduction="sum", backend="reference").backward()
    y2 = y.detach().clone().requires_grad_()
    appendix_a1(x, y2, 0.25, 2.0, "sum", dtype=F64).backward()
    close(y.grad, y2.grad, 1e-12, "d/dtargets")
