"""Binary cross entropy with logits and its gradient, in float64 (torch's semantics).

With ``pw`` the positive class's weight (1 if absent) and ``lw = 1 + (pw - 1) y``, per element:

* ``loss = w ((1-y) x + lw softplus(-x))``, written without cancellation as
  ``x (1-y) + lw log1p(e^-|x|)`` for x > 0 and ``-x y pw + lw log1p(e^-|x|)`` otherwise
  (for pw = 1: ``max(x, 0) - x y + log1p(e^-|x|)``);
* ``d loss/dx = w ((1-y) sigmoid(x) - pw y sigmoid(-x))`` (torch's ``lw sigmoid(x) - pw y`` rearranged so
  that each term keeps full relative precision).

``mean`` divides by the element count. Infinite logits give NaN where the formula multiplies 0 by an
infinity (x = +inf with y = 1, x = -inf with y pw = 0), as :func:`xloss.reference.bce_with_logits` does.
"""

from __future__ import annotations

import numpy as np

from ._common import apply_reduction, as_f64, scale_grad
from .focal import sigmoid_pair


def _pos(y, pos_weight):
    return 1.0 if pos_weight is None else as_f64(pos_weight)


def terms(x, y, pos_weight=None):
    """``(linear, lw, softplus_tail)`` per element: the loss is ``linear + lw * softplus_tail``."""
    x, y = as_f64(x), as_f64(y)
    pw = _pos(y, pos_weight)
    with np.errstate(invalid="ignore"):  # inf * 0 for infinite logits: NaN, as documented
        linear = np.where(x > 0, x * (1.0 - y), -x * (y * pw))
    lw = 1.0 + (pw - 1.0) * y
    return np.broadcast_to(linear, x.shape), np.broadcast_to(lw, x.shape), np.log1p(np.exp(-np.abs(x)))


def bce_with_logits_loss(x, y, *, weight=None, pos_weight=None, reduction="mean"):
    """The loss (float64): x's shape for ``none``, else 0-d."""
    linear, lw, tail = terms(x, y, pos_weight)
    loss = linear + lw * tail
    if weight is not None:
        loss = loss * as_f64(weight)
    return apply_reduction(np.broadcast_to(loss, np.shape(x)), reduction)


def bce_with_logits_grad(x, y, grad=1.0, *, weight=None, pos_weight=None, reduction="mean"):
    """d loss / dx times the upstream gradient (float64), x's shape."""
    x, y = as_f64(x), as_f64(y)
    p, s = sigmoid_pair(x)
    dx = (1.0 - y) * p - (_pos(y, pos_weight) * y) * s
    if weight is not None:
        dx = dx * as_f64(weight)
    return scale_grad(np.broadcast_to(dx, x.shape), grad, reduction)
