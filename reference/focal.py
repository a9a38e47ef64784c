"""Sigmoid focal loss and its gradient, in float64.

Notation (SPEC, kernel 1): ``p = sigmoid(x)``, ``ce = softplus(x) - x*y``,
``q = 1 - p_t = p + y - 2*p*y``, ``a_t = alpha*y + (1-alpha)*(1-y)`` (1 when alpha < 0),
``loss = w * a_t * ce * q**gamma`` and

    dx = w * a_t * ((p - y) * q**gamma + gamma * q**(gamma-1) * (1-2y) * p*(1-p) * ce).

Every quantity is formed so that it stays finite wherever its mathematical value is
finite: ``1 - p`` is ``sigmoid(-x)`` (no cancellation near p = 1), ``ce`` and ``p - y``
are sums of non-negative parts, and the factor that blows up for gamma < 1,
``q**(gamma-1)``, is never formed: ``q**(gamma-1) * p*(1-p) = q**gamma * r`` with
``r = p*(1-p)/q``, which lies in [0, 1] because q >= min(p, 1-p).
"""

from __future__ import annotations

import numpy as np

from ._common import apply_reduction, as_f64, scale_grad


def sigmoid_pair(x):
    """Return ``(sigmoid(x), sigmoid(-x))``, both to full relative precision."""
    x = as_f64(x)
    e = np.exp(-np.abs(x))  # in (0, 1]: never overflows
    big = 1.0 / (1.0 + e)  # sigmoid(|x|)
    small = e / (1.0 + e)  # sigmoid(-|x|)
    pos = x >= 0
    return np.where(pos, big, small), np.where(pos, small, big)


def bce_with_logits(x, y):
    """``softplus(x) - x*y`` without cancellation: for x > 0 it is ``x*(1-y) + log1p(e^-x)``."""
    x, y = as_f64(x), as_f64(y)
    with np.errstate(invalid="ignore"):  # inf * 0 for infinite logits: NaN, as documented
        linear = np.where(x > 0, x * (1.0 - y), -x * y)
    return linear + np.log1p(np.exp(-np.abs(x)))


def _alpha_t(y, alpha):
    return alpha * y + (1.0 - alpha) * (1.0 - y) if alpha >= 0 else np.ones_like(y)


def _parts(x, y, alpha, gamma, weight):
    x, y = as_f64(x), as_f64(y)
    p, s = sigmoid_pair(x)  # s = 1 - p
    q = p * (1.0 - y) + s * y  # 1 - p_t
    ce = bce_with_logits(x, y)
    w = _alpha_t(y, alpha)
    if weight is not None:
        w = w * as_f64(weight)
    w = np.broadcast_to(w, x.shape)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        qg = q**gamma  # numpy: 0**0 == 1, as torch
    return x, y, p, s, q, ce, w, qg


def sigmoid_focal_loss(x, y, *, alpha=0.25, gamma=2.0, weight=None, reduction="none"):
    """Focal loss (float64), reduced as asked: ``none`` keeps x's shape, else a 0-d array."""
    x, y, p, s, q, ce, w, qg = _parts(x, y, alpha, gamma, weight)
    return apply_reduction(w * ce * qg, reduction)


def sigmoid_focal_loss_grad(x, y, grad=1.0, *, alpha=0.25, gamma=2.0, weight=None, reduction="none"):
    """d(loss)/dx times the upstream gradient (float64), shape of x."""
    x, y, p, s, q, ce, w, qg = _parts(x, y, alpha, gamma, weight)
    with np.errstate(divide="ignore", invalid="ignore"):
        # r = p(1-p)/q; where q == 0 (p and y both exactly 0, or both exactly 1) its limit is 1.
        r = np.where(q > 0, (p * s) / np.where(q > 0, q, 1.0), 1.0)
    p_minus_y = p * (1.0 - y) - s * y
    with np.errstate(invalid="ignore"):  # NaN for infinite logits (0 * inf), as documented
        dx = w * (p_minus_y * qg + gamma * qg * r * (1.0 - 2.0 * y) * ce)
    return scale_grad(dx, grad, reduction)


# --- The paper's closed forms for binary targets (seed 000, eq. 3 and appendix A.3) -------
# They are a second, independently derived formula used to check the general one. Both
# are written with t = exp(-|x|) in place of e^x so that |x| up to 1e4 does not overflow;
# the algebra is otherwise the paper's.


def focal_loss_eq3(x, y, *, alpha=0.25, gamma=2.0):
    """Paper eq. 3: ``((e^x(1-y)+y)/(e^x+1))^g * ((a(2y-1)-y+1) log(e^x+1) - a x y)``, y in {0,1}."""
    x, y = as_f64(x), as_f64(y)
    t = np.exp(-np.abs(x))
    pos = x >= 0
    frac = np.where(pos, ((1.0 - y) + y * t) / (1.0 + t), (t * (1.0 - y) + y) / (1.0 + t))
    log_ex1 = np.where(pos, x + np.log1p(t), np.log1p(t))  # log(e^x + 1)
    with np.errstate(under="ignore"):
        return frac**gamma * ((alpha * (2.0 * y - 1.0) - y + 1.0) * log_ex1 - alpha * x * y)


def focal_loss_grad_a3(x, y, *, alpha=0.25, gamma=2.0):
    """Paper appendix A.3 backward kernel, for y in {0,1}, upstream gradient 1.

    ``-(E+1)^(-g-1) (y+(1-y)E)^(g-1) (-a g x y E + g (y+a-1) E L + a y + (a-1)(1-y) E^2)``
    with ``E = e^x`` and ``L = log(E+1)``. For x >= 0 numerator and denominator are
    divided by E^2 (t = 1/E); the result is finite wherever t does not underflow.
    """
    x, y = as_f64(x), as_f64(y)
    t = np.exp(-np.abs(x))
    a, g = alpha, gamma
    with np.errstate(divide="ignore", invalid="ignore", under="ignore", over="ignore"):
        big_l = x + np.log1p(t)  # L for x >= 0
        pos = -((1.0 + t) ** (-g - 1.0)) * ((1.0 - y) + y * t) ** (g - 1.0) * (
            -a * g * x * y * t + g * (y + a - 1.0) * t * big_l + a * y * t * t + (a - 1.0) * (1.0 - y)
        )
        small_l = np.log1p(t)  # L for x < 0
        neg = -((t + 1.0) ** (-g - 1.0)) * (y + (1.0 - y) * t) ** (g - 1.0) * (
            -a * g * x * y * t + g * (y + a - 1.0) * t * small_l + a * y + (a - 1.0) * (1.0 - y) * t * t
        )
    return np.where(x >= 0, pos, neg)
