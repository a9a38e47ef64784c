"""The cross-entropy reference against PyTorch autograd (``F.cross_entropy`` in float64), and its
z-loss term against autograd of the written-out formula."""

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xloss.reference import cross_entropy_loss as ref


@st.composite
def ce_inputs(draw):
    n = draw(st.integers(0, 7))
    c = draw(st.integers(1, 9))
    x = draw(hnp.arrays(np.float64, (n, c), elements=st.floats(-30, 30)))
    ignore_index = draw(st.sampled_from([-100, 0, c - 1]))
    t = np.array(draw(st.lists(st.sampled_from([*range(c), ignore_index]), min_size=n, max_size=n)), np.int64)
    weight = draw(st.one_of(st.none(), hnp.arrays(np.float64, (c,), elements=st.floats(0.1, 3))))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]))
    ls = draw(st.sampled_from([0.0, 0.1, 0.75, 1.0]))
    grad = draw(hnp.arrays(np.float64, (n,), elements=st.floats(-2, 2))) if reduction == "none" else \
        np.float64(draw(st.floats(-2, 2)))
    return x, t, weight, reduction, ignore_index, ls, grad


def _torch(x, t, weight, reduction, ignore_index, ls, grad, scale=0.0, grad_z=None):
    xt = torch.tensor(x, requires_grad=True)
    w = None if weight is None else torch.tensor(weight)
    loss = F.cross_entropy(xt, torch.tensor(t), w, ignore_index=ignore_index, reduction=reduction, label_smoothing=ls)
    keep = torch.tensor(t != ignore_index)
    lse = torch.logsumexp(xt, 1) if x.shape[1] else torch.zeros(x.shape[0])
    z = torch.where(keep, scale * lse * lse, 0.0)
    zloss = {"none": z, "sum": z.sum(), "mean": z.sum() / keep.sum()}[reduction]
    total = loss + zloss if scale else loss
    g = torch.tensor(grad)
    (total * g).sum().backward(retain_graph=True) if reduction == "none" else total.backward(g, retain_graph=True)
    if grad_z is not None:
        gz = torch.tensor(grad_z)
        (zloss * gz).sum().backward() if reduction == "none" else zloss.backward(gz)
    return total.detach().numpy(), zloss.detach().numpy(), xt.grad.numpy()


@settings(max_examples=60, deadline=None)
@given(ce_inputs())
def test_forward_and_backward_match_torch_autograd(inputs):
    x, t, weight, reduction, ignore_index, ls, grad = inputs
    loss_t, _, dx_t = _torch(x, t, weight, reduction, ignore_index, ls, grad)
    out = ref.cross_entropy_loss(x, t, weight=weight, reduction=reduction, ignore_index=ignore_index,
                                 label_smoothing=ls)
    np.testing.assert_allclose(out.loss, loss_t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.log_prob, torch.log_softmax(torch.tensor(x), 1).numpy(), rtol=1e-12, atol=1e-12)
    dx = ref.cross_entropy_loss_grad(grad, out.log_prob, t, weight=weight, reduction=reduction,
                                     ignore_index=ignore_index, label_smoothing=ls)
    np.testing.assert_allclose(dx, dx_t, rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(ce_inputs(), st.sampled_from([1e-4, 0.3]), st.booleans())
def test_zloss_matches_autograd_of_its_formula(inputs, scale, with_grad_z):
    x, t, weight, reduction, ignore_index, ls, grad = inputs
    grad_z = (grad * 0.5 + 0.25) if with_grad_z else None
    loss_t, zloss_t, dx_t = _torch(x, t, weight, reduction, ignore_index, ls, grad, scale, grad_z)
    out = ref.cross_entropy_loss(x, t, weight=weight, reduction=reduction, ignore_index=ignore_index,
                                 label_smoothing=ls, lse_square_scale_for_zloss=scale)
    np.testing.assert_allclose(out.loss, loss_t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.zloss, zloss_t, rtol=1e-12, atol=1e-12)
    dx = ref.cross_entropy_loss_grad(grad, out.log_prob, t, weight=weight, reduction=reduction,
                                     ignore_index=ignore_index, label_smoothing=ls, lse_square_scale_for_zloss=scale,
                                     grad_zloss=grad_z, lse_for_zloss=out.lse)
    np.testing.assert_allclose(dx, dx_t, rtol=1e-10, atol=1e-12)


def test_extreme_logits_stay_finite():
    x = np.array([[1e4, -1e4, 0.0], [-1e3, -1e3, -1e3]])
    out = ref.cross_entropy_loss(x, np.array([1, 2]), reduction="none")
    np.testing.assert_allclose(out.loss, [2e4, np.log(3.0)])
    assert np.isfinite(out.log_prob).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 6), st.integers(1, 8), st.integers(0, 2**31))
def test_dense_labels_match_torch_probability_targets(n, c, seed):
    """Per-row loss as F.cross_entropy with probability targets (reduction none); backprop its gradient for
    labels that sum to 1 per row."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 5, (n, c))
    y = rng.random((n, c))
    y /= y.sum(axis=1, keepdims=True)
    xt = torch.tensor(x, requires_grad=True)
    loss_t = F.cross_entropy(xt, torch.tensor(y), reduction="none")
    (grad_t,) = torch.autograd.grad(loss_t.sum(), xt) if n else (torch.zeros(0, c),)
    loss, backprop = ref.softmax_cross_entropy_with_logits(x, y)
    np.testing.assert_allclose(loss, loss_t.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(backprop, grad_t.numpy(), rtol=1e-10, atol=1e-12)
