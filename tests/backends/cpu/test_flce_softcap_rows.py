"""The soft-capped FLCE's row passes (``backends/cpu_onednn/flce_softcap_rows.py``): the cap against float64
tanh at every magnitude, and the fused loss and gradients through them (float32 and bfloat16 operands, no
bias, so G takes the row pass) against autograd through materialised float64 logits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import xloss.torch as xt
from xloss.backends.cpu_onednn import flce_softcap_rows as rows

F64 = torch.float64


@pytest.mark.parametrize("cap", [0.5, 30.0])
def test_cap_is_float64_tanh_rounded_once(cap):
    rng = np.random.default_rng(0)
    mags = np.concatenate([[0.0, 1e-45, 1e-38, 1e-8, 1e-5, 9.9e-5 * cap, 1.01e-4 * cap, 0.3, 1.0, 20.0, 1e3, 3.4e38],
                           10.0 ** rng.uniform(-12, 3, 4000)])
    z = np.concatenate([mags, -mags, [np.inf, -np.inf, np.nan, -0.0]]).astype(np.float32)
    got = z.reshape(2, -1).copy()
    rows.softcap_in_place(got, cap)
    with np.errstate(invalid="ignore"):
        exact = cap * np.tanh(z.astype(np.float64) / cap)
    want = exact.astype(np.float32)
    got = got.reshape(-1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(z))
    ok = ~np.isnan(z)
    ulp = np.spacing(np.abs(want[ok]).astype(np.float32))
    assert np.all(np.abs(got[ok].astype(np.float64) - exact[ok]) <= np.maximum(ulp, 1e-45))  # within 1 ulp
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0 stays -0
    assert np.all(np.abs(got[ok]) <= cap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_soft_capped_loss_and_gradients_through_the_row_passes(dtype, weighted, reduction):
    g = torch.Generator().manual_seed(3)
    bt, h, v, cap = 70, 16, 1100, 3.0  # V > the pass's 512-column block; logits well past the cap
    x = torch.randn(bt, h, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.8).to(dtype).requires_grad_()
    t = torch.randint(0, v, (bt,), generator=g)
    t[::9] = -100
    cw = torch.rand(v, generator=g) + 0.2 if weighted else None
    loss = xt.fused_linear_cross_entropy(x, w, t, reduction=reduction, softcap=cap, class_weight=cw, chunk_size=32,
                                         backend="cpu", label_smoothing=0.1)
    up = torch.rand(loss.shape, generator=g) + 0.5
    gx, gw = torch.autograd.grad(loss, (x, w), up)
    xd, wd = (a.detach().to(F64).requires_grad_() for a in (x, w))
    z = cap * torch.tanh(xd @ wd.T / cap)
    ref = F.cross_entropy(z, t, weight=None if cw is None else cw.to(F64), reduction=reduction, label_smoothing=0.1)
    rx, rw = torch.autograd.grad(ref, (xd, wd), up.to(F64))
    torch.testing.assert_close(loss.to(F64), ref.detach(), rtol=2e-6, atol=2e-6)
    # float32: float32 sums; bfloat16: G rounded once to bf16 and the gradients once more (2**-8 each)
    tol = 2e-5 if dtype == torch.float32 else 2**-6
    for got, exp in ((gx, rx), (gw, rw)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.to(F64), exp, rtol=tol, atol=tol * exp.abs().max().item())
