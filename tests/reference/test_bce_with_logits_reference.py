"""The float64 reference of BCE with logits against PyTorch autograd
(``F.binary_cross_entropy_with_logits``, forward and backward, with weight and pos_weight)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xloss.reference import bce_logits


def torch_bce_with_logits(x, y, grad, *, weight, pos_weight, reduction):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    kw = {k: torch.tensor(v, dtype=torch.float64) for k, v in (("weight", weight), ("pos_weight", pos_weight))
          if v is not None}
    loss = F.binary_cross_entropy_with_logits(xt, torch.tensor(y, dtype=torch.float64), reduction=reduction, **kw)
    g = torch.tensor(grad, dtype=torch.float64)
    loss.backward(g.expand_as(loss) if reduction != "none" else g)
    return loss.detach().numpy(), xt.grad.numpy()


shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9)
# |x| <= 30: torch forms (1-y)x + lw softplus(-x) by subtraction, e^|x| ulps from the exact value elsewhere
logits = st.floats(-30, 30, allow_nan=False)
unit = st.floats(0, 1, allow_nan=False)


def close(a, b, rtol, atol):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert (np.abs(a - b) <= rtol * np.abs(b) + atol).all(), (a, b)


@st.composite
def inputs(draw):
    shape = draw(shapes)
    x = draw(hnp.arrays(np.float64, shape, elements=logits))
    y = draw(st.one_of(hnp.arrays(np.float64, shape, elements=st.sampled_from([0.0, 1.0])),
                       hnp.arrays(np.float64, shape, elements=unit)))
    weight = draw(st.one_of(st.none(), hnp.arrays(np.float64, draw(st.sampled_from([shape, shape[-1:], (1,)])),
                                                  elements=st.floats(0, 2))))
    pos_weight = draw(st.one_of(st.none(), hnp.arrays(np.float64, shape[-1:], elements=st.floats(0, 10))))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]))
    grad = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2, 2))) if reduction == "none" else \
        np.float64(draw(st.floats(-2, 2)))
    return x, y, weight, pos_weight, reduction, grad


@settings(max_examples=60, deadline=None)
@given(inputs())
def test_reference_matches_torch_autograd(case):
    x, y, weight, pos_weight, reduction, grad = case
    loss_t, dx_t = torch_bce_with_logits(x, y, grad, weight=weight, pos_weight=pos_weight, reduction=reduction)
    kw = dict(weight=weight, pos_weight=pos_weight, reduction=reduction)
    loss = bce_logits.bce_with_logits_loss(x, y, **kw)
    dx = bce_logits.bce_with_logits_grad(x, y, grad, **kw)
    # torch's forward subtracts terms of size |x| (1 + pw): its own rounding, not ours, sets the bound
    scale = np.abs(x) * (1 + (pos_weight if pos_weight is not None else 1.0)) * (
        np.abs(weight) if weight is not None else 1.0) + 1.0
    close(loss, loss_t, 1e-12, 1e-14 * (scale.sum() if reduction != "none" else scale))
    close(dx, dx_t, 1e-12, 1e-15)


@pytest.mark.parametrize("pos_weight", [None, 3.0])
def test_extreme_logits_agree_with_torch_where_torch_is_exact(pos_weight):
    x = np.array([-1e4, -745.0, -100.0, -30.0, -1e-30, 0.0, 1e-30, 30.0, 100.0, 745.0, 1e4])
    for y0 in (0.0, 1.0):
        y = np.full(x.shape, y0)
        pw = None if pos_weight is None else np.full(x.shape, pos_weight)
        loss_t, dx_t = torch_bce_with_logits(x, y, np.ones(x.shape), weight=None, pos_weight=pw, reduction="none")
        loss = bce_logits.bce_with_logits_loss(x, y, pos_weight=pw, reduction="none")
        dx = bce_logits.bce_with_logits_grad(x, y, pos_weight=pw, reduction="none")
        # where the loss is exactly softplus of a large argument torch's form is exact too; where it is a
        # tail below e^-30, torch's cancellation gives 0 or the tail: ours keeps the tail
        big = loss > 1e-12
        np.testing.assert_allclose(loss[big], loss_t[big], rtol=1e-15)
        assert (loss[~big] >= 0).all() and (np.abs(loss[~big] - loss_t[~big]) <= 1e-13).all()
        # torch forms lw sigmoid(x) - pw y by subtraction: an ulp of lw off (0 for y = 1 and x > 37, where
        # ours keeps pw sigmoid(-x) in full)
        close(dx, dx_t, 1e-15, 2.3e-16 * (1.0 + (pos_weight or 1.0)))


def test_nan_where_the_formula_multiplies_zero_by_infinity():
    x = np.array([np.inf, np.inf, -np.inf, -np.inf])
    y = np.array([1.0, 0.25, 0.0, 0.25])
    loss = bce_logits.bce_with_logits_loss(x, y, reduction="none")
    assert np.isnan(loss[0]) and loss[1] == np.inf and np.isnan(loss[2]) and loss[3] == np.inf
    np.testing.assert_array_equal(bce_logits.bce_with_logits_grad(x, y, reduction="none"), [0.0, 0.75, 0.0, -0.25])
