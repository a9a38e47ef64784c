"""The focal reference: high-precision truth at extreme inputs, the paper's closed forms, and
properties from the literature."""

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xloss import reference as ref
from xloss.conformance.focal import term_scales

mpmath.mp.dps = 60

EXTREME_X = [-1e4, -745.5, -700.0, -100.0, -36.0, -17.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 17.0, 36.0, 100.0, 700.0,
             745.5, 1e4]
TARGETS = [0.0, 1.0, 0.5, 1e-7, 1 - 1e-7, 0.9]
GAMMAS = [0.0, 0.25, 0.5, 0.999, 1.0, 2.0, 3.7]


def mp_focal(x, y, alpha, gamma):
    """Loss and d loss/dx at 60 digits, straight from the definitions (no rearrangement)."""
    x, y = mpmath.mpf(x), mpmath.mpf(y)
    p = 1 / (1 + mpmath.exp(-x))
    ce = mpmath.log(1 + mpmath.exp(x)) - x * y
    q = p + y - 2 * p * y
    a_t = alpha * y + (1 - alpha) * (1 - y) if alpha >= 0 else 1
    loss = a_t * ce * q**gamma
    if gamma == 0:
        dq = 0
    elif q == 0:
        dq = 0
    else:
        dq = gamma * q ** (gamma - 1) * (1 - 2 * y) * p * (1 - p) * ce
    return float(loss), float(a_t * ((p - y) * q**gamma + dq))


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("y", TARGETS)
@pytest.mark.parametrize("alpha", [0.25, -1.0])
def test_finite_and_accurate_at_extreme_logits(alpha, y, gamma):
    x = np.array(EXTREME_X)
    yy = np.full_like(x, y)
    loss = ref.sigmoid_focal_loss(x, yy, alpha=alpha, gamma=gamma)
    dx = ref.sigmoid_focal_loss_grad(x, yy, 1.0, alpha=alpha, gamma=gamma)
    assert np.isfinite(loss).all() and np.isfinite(dx).all()
    # the same term-magnitude model the backends are held to (xloss.conformance), with float64 epsilon
    _, loss_scale, grad_scale, _, _ = term_scales(x, yy, alpha=alpha, gamma=gamma)
    eps = np.finfo(np.float64).eps
    for xi, li, di, ls, gs in zip(x, loss, dx, loss_scale, grad_scale):
        el, ed = mp_focal(xi, y, alpha, gamma)
        assert abs(li - el) <= 8 * eps * ls + 1e-300, (xi, y, gamma, li, el)
        assert abs(di - ed) <= 8 * eps * gs + 1e-300, (xi, y, gamma, di, ed)


binary = st.sampled_from([0.0, 1.0])


@given(hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(-700, 700)), st.data())
def test_equation3_equals_general_form_for_binary_targets(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=binary))
    alpha = data.draw(st.floats(0, 1))
    gamma = data.draw(st.floats(0, 5))
    general = ref.sigmoid_focal_loss(x, y, alpha=alpha, gamma=gamma)
    eq3 = ref.focal_loss_eq3(x, y, alpha=alpha, gamma=gamma)
    # eq. 3 computes alpha*(x + log1p(e^-x)) - alpha*x for y = 1: a cancellation of size |x|*eps, times q**gamma
    p, s = ref.sigmoid_pair(x)
    q = np.where(y == 1, s, p)
    bound = 1e-12 * np.abs(general) + 8e-16 * (np.abs(x) + 1) * q**gamma
    assert np.all(np.abs(eq3 - general) <= bound + 1e-300)


# A.3 squares e^x, which turns subnormal beyond |x| ~ 354; the comparison stays inside that range
@given(hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(-340, 340)), st.data())
def test_appendix_a3_backward_equals_general_gradient(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=binary))
    alpha = data.draw(st.one_of(st.just(0.0), st.floats(1e-3, 1)))  # no subnormal products
    gamma = data.draw(st.floats(0, 5))
    general = ref.sigmoid_focal_loss_grad(x, y, 1.0, alpha=alpha, gamma=gamma)
    a3 = ref.focal_loss_grad_a3(x, y, alpha=alpha, gamma=gamma)
    # A.3's bracket cancels (-a g x y E against g (y+a-1) E log(E+1)), so the bound is the
    # magnitude of its terms times the prefactor, not the result
    a, g, t = alpha, gamma, np.exp(-np.abs(x))
    pos = x >= 0
    big_l = np.where(pos, x + np.log1p(t), np.log1p(t))
    pref = (1 + t) ** (-g - 1) * np.where(pos, (1 - y) + y * t, y + (1 - y) * t) ** (g - 1)
    terms = a * g * np.abs(x) * y * t + g * (y + a + 1) * t * big_l + np.where(
        pos, a * y * t * t + (1 - a) * (1 - y), a * y + (1 - a) * (1 - y) * t * t)
    bound = 1e-13 * np.abs(general) + 16 * np.finfo(float).eps * pref * terms
    assert np.all(np.abs(a3 - general) <= bound + 1e-300)


logits = hnp.arrays(np.float64, st.integers(1, 50), elements=st.floats(-50, 50))


@given(logits, st.data())
def test_focal_never_exceeds_weighted_bce(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(0, 1)))
    alpha = data.draw(st.floats(0, 1))
    gamma = data.draw(st.floats(0, 5))
    focal = ref.sigmoid_focal_loss(x, y, alpha=alpha, gamma=gamma)
    bce = ref.sigmoid_focal_loss(x, y, alpha=alpha, gamma=0.0)  # alpha-weighted BCE
    assert np.all(focal <= bce * (1 + 1e-15))


@given(logits, st.data())
def test_gamma_zero_alpha_negative_is_bce_with_logits(x, data):
    import torch
    import torch.nn.functional as F

    y = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(0, 1)))
    xt = torch.tensor(x, requires_grad=True)
    loss_t = F.binary_cross_entropy_with_logits(xt, torch.tensor(y), reduction="sum")
    loss_t.backward()
    # torch evaluates log(e^-m + e^(-x-m)) with log, not log1p: absolute error ~ eps * (|x| + 1) per element
    np.testing.assert_allclose(ref.sigmoid_focal_loss(x, y, alpha=-1, gamma=0, reduction="sum"), loss_t.item(),
                               rtol=1e-12, atol=4 * np.finfo(float).eps * np.sum(np.abs(x) + 1))
    # torch forms sigmoid(x) - y by subtraction: absolute error ~ eps * (p + y) <= 2 eps
    np.testing.assert_allclose(ref.sigmoid_focal_loss_grad(x, y, 1.0, alpha=-1, gamma=0, reduction="sum"),
                               xt.grad.numpy(), rtol=1e-12, atol=8 * np.finfo(float).eps)


@given(logits, st.data())
def test_gradient_sign_pushes_towards_the_target(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=binary))
    gamma = data.draw(st.floats(0, 5))
    dx = ref.sigmoid_focal_loss_grad(x, y, 1.0, alpha=0.25, gamma=gamma)
    assert np.all(dx[y == 1] <= 0) and np.all(dx[y == 0] >= 0)
