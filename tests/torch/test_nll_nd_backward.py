"""xloss.torch.nll_loss's backward on (N, C, d1, ..., dk) input against F.nll_loss's autograd gradient: on the
backends' N-d backward kernels, and as rows on a backend that declares the backward for (C) and (N, C) only."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import xloss
import xloss.torch as xt
from xloss.backend import KernelCaps
from xloss.backends.numpy_reference import ReferenceBackend

F64 = torch.float64


class _RowsOnlyBackward(ReferenceBackend):
    """The reference backend with the NLL backward declared for (C) and (N, C) input only."""

    calls: list

    def capabilities(self):
        caps = super().capabilities()
        caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=("float32", "float64"), input=("C", "NC"))
        return caps

    def run(self, args):
        self.calls.append((args.request().kernel, np.shape(args.out)))
        return super().run(args)


def _case(shape, reduction, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=F64, generator=g).log_softmax(1)
    t = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g)
    t.view(-1)[::5] = -100
    w = torch.rand(shape[1], dtype=F64, generator=g) + 0.5
    up = torch.randn(t.shape if reduction == "none" else (), dtype=F64, generator=g)
    return x, t, w, up


@pytest.mark.parametrize("backend", ["reference", "cpu", "ascend", "ft78ne"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nd_backward_matches_autograd(backend, reduction):
    dt = F64 if backend in ("reference", "cpu") else torch.float32
    x, t, w, up = _case((2, 4, 3, 5), reduction, 1)
    x, w, up = x.to(dt), w.to(dt), up.to(dt)
    xa = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(xt.nll_loss(xa, t, w, reduction=reduction, backend=backend), xa, up)
    xb = x.to(F64).requires_grad_()
    (want,) = torch.autograd.grad(F.nll_loss(xb, t, w.to(F64), reduction=reduction), xb, up.to(F64))
    assert got.shape == x.shape and got.dtype == dt
    tol = 1e-14 if dt == F64 else 2e-7
    torch.testing.assert_close(got.to(F64), want, rtol=tol, atol=tol * float(want.abs().max()))


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_a_backend_without_the_nd_backward_gets_rows(reduction):
    b = _RowsOnlyBackward()
    b.calls = []
    x, t, w, up = _case((2, 3, 4, 2, 3), reduction, 2)
    with pytest.raises(xloss.UnsupportedRequestError, match="input of layout NCd"):
        xloss.nll_loss_grad(1.0, x.detach().numpy(), t.numpy(), backend=b)
    xa = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(xt.nll_loss(xa, t, w, reduction=reduction, backend=b), xa, up)
    xb = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(F.nll_loss(xb, t, w, reduction=reduction), xb, up)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-15)
    assert ("nll_loss_grad", (2 * 4 * 2 * 3, 3)) in b.calls  # the positions as rows
