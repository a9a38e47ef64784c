"""xloss.torch.cross_entropy on xloss's fused row: the forward saves the gradient for upstream gradient 1
(one (N, C) buffer, no log-probabilities), the backward hands it on for the scalar 1, scales it in place
otherwise, and recomputes it for a retained graph's later backward; traced backwards multiply out of place."""

import pytest
import torch
import torch.nn.functional as F

import xloss
import xloss.torch as xt


def _problem(dtype=torch.float32, n=12, c=30):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(n, c, generator=g) * 3).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    t[::4] = -100
    return x, t


def _exact(x, t, upstream, **kw):
    xd = x.detach().double().requires_grad_()
    F.cross_entropy(xd, t, **kw).backward(upstream.double() if isinstance(upstream, torch.Tensor) else
                                          torch.tensor(upstream, dtype=torch.float64))
    return xd.grad


def test_the_graph_holds_the_fused_gradient_and_no_log_probabilities():
    x, t = _problem()
    xg = x.clone().requires_grad_()
    loss = xt.cross_entropy(xg, t, label_smoothing=0.2, backend="cpu")
    saved = [s for s in loss.grad_fn.saved_tensors if s is not None and s.shape == x.shape]
    assert len(saved) == 2 and saved[1] is xg  # the gradient, and a reference to the logits (no copy)
    _, dx = xloss.cross_entropy_loss_with_grad(x, t, label_smoothing=0.2, backend="cpu")
    assert torch.equal(saved[0], dx)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_upstream_other_than_one_scales_in_place_and_a_retained_graph_recomputes(reduction, dtype):
    x, t = _problem(dtype)
    xg = x.clone().requires_grad_()
    loss = xt.cross_entropy(xg, t, reduction=reduction, backend="cpu")
    up = torch.linspace(-2, 2, loss.numel(), dtype=loss.dtype).reshape(loss.shape) if loss.ndim else \
        torch.tensor(-0.75, dtype=loss.dtype)
    want = _exact(x, t, up, reduction=reduction)
    tol = dict(rtol=2e-2, atol=1e-4) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-7)
    loss.backward(up, retain_graph=True)
    first = xg.grad.clone()
    torch.testing.assert_close(first.double(), want, **tol)
    loss.backward(up, retain_graph=True)  # the saved gradient was scaled: recomputed, then scaled again
    assert torch.equal(xg.grad - first, first)
    xg.grad = None
    loss.backward(torch.ones_like(up))  # the scalar (or expanded) 1 after a scaled pass
    torch.testing.assert_close(xg.grad.double(), _exact(x, t, torch.ones_like(up), reduction=reduction), **tol)


def test_an_expanded_scalar_upstream_takes_the_scalar_route():
    x, t = _problem()
    xg = x.clone().requires_grad_()
    xt.cross_entropy(xg, t, reduction="none", backend="cpu").sum().backward()  # upstream: 1 expanded to (N)
    _, dx = xloss.cross_entropy_loss_with_grad(x, t, reduction="none", backend="cpu")
    assert torch.equal(xg.grad, dx)


def test_compiled_fullgraph_with_a_per_row_upstream():
    x, t = _problem()
    f = torch.compile(lambda a, b: xt.cross_entropy(a, b, reduction="none", label_smoothing=0.1), backend="eager",
                      fullgraph=True)
    xg = x.clone().requires_grad_()
    up = torch.linspace(-1, 1, t.numel())
    f(xg, t).backward(up)
    torch.testing.assert_close(xg.grad.double(), _exact(x, t, up, reduction="none", label_smoothing=0.1),
                               rtol=1e-5, atol=1e-7)


def test_a_backend_without_the_fused_row_runs_its_vendor_pair():
    """ft78ne declares the forward and the gradient rows (no weight, no smoothing) but not the fused one: the
    drop-in runs the pair there, as it did before the fused row."""
    x, t = _problem()
    xg = x.clone().requires_grad_()
    loss = xt.cross_entropy(xg, t, backend="ft78ne")
    loss.backward(torch.tensor(0.5))
    torch.testing.assert_close(loss.double(), F.cross_entropy(x.double(), t), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xg.grad.double(), _exact(x, t, 0.5), rtol=1e-5, atol=1e-7)
