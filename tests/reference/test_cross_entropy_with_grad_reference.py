"""The fused row's float64 reference (``cross_entropy_loss_with_grad``) against PyTorch autograd of
``F.cross_entropy`` in float64: the loss and the gradient times an upstream gradient."""

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from xloss.reference import cross_entropy_loss as ref


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 6), st.integers(1, 9), st.sampled_from(["none", "mean", "sum"]), st.sampled_from([0.0, 0.2, 1.0]),
       st.booleans(), st.integers(0, 2**31))
def test_loss_and_gradient_match_torch_autograd(n, c, reduction, ls, weighted, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 8, (n, c))
    t = rng.integers(0, c, n)
    t[rng.random(n) < 0.3] = -100
    w = rng.uniform(0.1, 3, c) if weighted else None
    g = rng.uniform(-2, 2, n) if reduction == "none" else np.float64(rng.uniform(-2, 2))
    loss, dx = ref.cross_entropy_loss_with_grad(x, t, g, weight=w, reduction=reduction, label_smoothing=ls)
    xt = torch.tensor(x, requires_grad=True)
    want = F.cross_entropy(xt, torch.tensor(t), None if w is None else torch.tensor(w), reduction=reduction,
                           label_smoothing=ls)
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(loss, want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
