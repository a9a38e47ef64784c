"""Under CPU autocast the losses follow torch's own: float32 results (torch's autocast runs
``binary_cross_entropy(_with_logits)``, ``nll_loss`` and ``cross_entropy`` in float32, and torchvision's
focal formula is built on the first), gradients in the input's dtype. Compared with what torch's ops
return under the same autocast, and bit for bit with the same xloss call on float32 copies outside it
(the gradient then rounded once to the input's dtype)."""

import pytest
import torch
import torch.nn.functional as F

import xloss.torch as xt

LOW = [torch.bfloat16, torch.float16]


def _problem(kind, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "nll":
        x = torch.randn(37, 11, generator=g).log_softmax(-1).to(dtype)
        return x, torch.randint(0, 11, (37,), generator=g), torch.rand(11, generator=g).to(dtype)
    if kind == "bce":
        return torch.rand(301, generator=g).to(dtype), (torch.rand(301, generator=g) > 0.5).to(dtype), \
            torch.rand(301, generator=g).to(dtype)
    return (torch.randn(301, generator=g) * 3).to(dtype), (torch.rand(301, generator=g) > 0.8).to(dtype), \
        torch.rand(301, generator=g).to(dtype)


def _ours(kind, x, y, w):
    if kind == "nll":
        return xt.nll_loss(x, y, weight=w, reduction="mean", backend="cpu")
    if kind == "bce":
        return xt.binary_cross_entropy(x, y, weight=w, reduction="sum", backend="cpu")
    return xt.sigmoid_focal_loss(x, y, reduction="sum", weight=w, backend="cpu")


def _torchs(kind, x, y, w):
    if kind == "nll":
        return F.nll_loss(x, y, weight=w)
    if kind == "bce":
        return F.binary_cross_entropy(x, y, weight=w, reduction="sum")
    return F.binary_cross_entropy_with_logits(x, y, weight=w, reduction="sum")  # torchvision's first step


@pytest.mark.parametrize("kind", ["focal", "bce", "nll"])
@pytest.mark.parametrize("dtype", LOW)
def test_losses_are_float32_under_cpu_autocast_and_gradients_keep_the_inputs_dtype(kind, dtype):
    x, y, w = _problem(kind, dtype)
    xa = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        got = _ours(kind, xa, y, w)
        torch_dtype = _torchs(kind, x, y, w).dtype
    assert got.dtype == torch_dtype == torch.float32
    got.backward()
    assert xa.grad.dtype == dtype
    x32 = x.float().requires_grad_()
    y32 = y.float() if y.is_floating_point() else y
    want = _ours(kind, x32, y32, w.float())
    want.backward()
    assert torch.equal(got, want)
    assert torch.equal(xa.grad, x32.grad.to(dtype))


@pytest.mark.parametrize("kind", ["focal", "bce", "nll"])
def test_outside_autocast_16_bit_losses_stay_in_the_inputs_dtype(kind):
    x, y, w = _problem(kind, torch.bfloat16)
    assert _ours(kind, x, y, w).dtype == torch.bfloat16


def test_the_fused_linear_cross_entropy_is_float32_under_autocast_too():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(24, 16, generator=g).bfloat16(), torch.randn(40, 16, generator=g).bfloat16()
    t = torch.randint(0, 40, (24,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert xt.fused_linear_cross_entropy(x, w, t).dtype == F.cross_entropy(x @ w.T, t).dtype == torch.float32
