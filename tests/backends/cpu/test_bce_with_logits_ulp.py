"""The cpu backend's float32 BCE with logits (loss and gradient, one pass) against float64, in float32
ulps, over every float32 exponent of the logit, with binary and soft targets, weights and pos_weights;
torch's own float32 results on the same inputs measured beside it (printed with ``-s``).

Scale: an error is counted in ulps of the float64 result rounded to float32. The loss has no
cancellation for targets in [0, 1] and nonnegative weights (every term is nonnegative), so its ulp error
is the whole story; the gradient ``w ((1-y) p - pw y s)`` cancels for soft targets, so there the error is
counted in ulps of its larger term (the tolerance contract's scale). Where that scale is below the
normals, an ulp is the smallest subnormal, and ``exp(-|x|)`` itself has already been rounded to a
subnormal before ``pw`` and ``w`` multiply it: there the bound adds the contract's underflow term
(:func:`xloss.conformance.descriptor.underflow`), as for every float32 implementation.
"""

import numpy as np
import pytest
from numba import njit

from xloss.backends.cpu_onednn.sigmoid_terms import sigmoid_terms_f32
from xloss.conformance.descriptor import underflow
from xloss.kernels.bce_with_logits import api
from xloss.reference import bce_logits
from xloss.reference.focal import sigmoid_pair

#: the bounds asserted. Measured when written (max over the four runs below, exp(-|x|) normal): loss
#: 2.59 / 2.19 ulp plain (binary / soft targets), 3.45 / 3.70 with weight and pos_weight (the weight's
#: product adds its rounding); gradient 2.43 / 2.22 and 3.17 / 3.53. The kernel before sigmoid_terms.py:
#: loss 1.81 / 1.77 and 10.7 / 22.9 (lw = 1 + (pw - 1) y cancelled for pw < 1), gradient 2.43 / 2.60 and
#: 3.22 / 3.98. torch 2.13's float32 results on the same inputs: ~1.7e7 for both (its
#: ``(1-y) x + lw (log1p(exp(-|x|)) + max(-x, 0))`` cancels for x << 0, y = 0; its gradient
#: ``lw sigmoid(x) - pw y`` for x >> 0, y = 1)
LOSS_ULPS = 4.0
GRAD_ULPS = 4.0
CLASSES = 64
_TINY = 2.0**-126
_BIG = float(np.finfo(np.float32).max)


def _logits(rng):
    """Every float32 binade of |x| from the subnormals to 2**127, 2048 random significands each, both
    signs; and a dense uniform sweep of [-105, 105], where exp(-|x|) goes from 1 to below the subnormals."""
    exps = np.repeat(np.arange(-149, 128), 1024)
    sig = rng.integers(0, 1 << 23, exps.size)
    bits = np.where(exps < -126, sig >> (-126 - exps), ((exps + 127) << 23) | sig)  # subnormal binades: fewer bits
    mags = bits.astype(np.uint32).view(np.float32)
    dense = rng.uniform(-105.0, 105.0, 1_000_000).astype(np.float32)
    x = np.concatenate([mags, -mags, dense, np.float32([0.0, -0.0, 104.0, -104.0, 87.5, -87.5, 1e-45])])
    n = -(-x.size // CLASSES) * CLASSES
    return np.resize(x, n).reshape(-1, CLASSES)


def _ulps(got, want, scale=None):
    """|got - want| in float32 ulps of ``scale`` (default: want), 2**-149 below the normals; results
    beyond float32's range must be the infinity of their sign, and count 0."""
    scale = np.abs(want) if scale is None else scale
    with np.errstate(over="ignore"):
        over = np.isinf(np.abs(want).astype(np.float32))
    assert np.array_equal(got[over], np.sign(want[over]) * np.inf)
    return np.where(over, 0.0, np.abs(got.astype(np.float64) - want) / _spacing(np.where(over, 1.0, scale)))


def _spacing(v):
    """float32 ulp of |v| (2**-149 at and below the normals)."""
    v = np.minimum(np.abs(v), 2.0**127).astype(np.float32)  # the top binade's spacing, not inf
    return np.maximum(np.spacing(v).astype(np.float64), 2.0**-149)


def _torch_results(x, y, weight, pos_weight):
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x).requires_grad_()
    kw = dict(reduction="none")
    if weight is not None:
        kw["weight"] = torch.from_numpy(weight)
    if pos_weight is not None:
        kw["pos_weight"] = torch.from_numpy(pos_weight)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(xt, torch.from_numpy(y), **kw)
    loss.backward(torch.ones_like(loss))
    return loss.detach().numpy(), xt.grad.numpy()


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(30)
    x = _logits(rng)
    binary = (rng.random(x.shape) < 0.5).astype(np.float32)
    soft = rng.random(x.shape, dtype=np.float32)
    weight = rng.uniform(0.0, 2.0, x.shape).astype(np.float32)
    pos_weight = rng.uniform(0.0, 5.0, CLASSES).astype(np.float32)
    return x, binary, soft, weight, pos_weight


@pytest.mark.parametrize("targets", ["binary", "soft"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight+pos_weight"])
def test_float32_error_in_ulps_next_to_torch(inputs, targets, weighted):
    x, binary, soft, weight, pos_weight = inputs
    y = binary if targets == "binary" else soft
    w, pw = (weight, pos_weight) if weighted else (None, None)
    # plain: a scalar upstream gradient (the kernel's uniform-weight loop); weighted: an array (its general loop)
    grad = np.ones_like(x) if weighted else 1.0
    loss, dx = api.bce_with_logits_with_grad(x, y, weight=w, pos_weight=pw, reduction="none", grad=grad, backend="cpu")
    want_loss = bce_logits.bce_with_logits_loss(x, y, weight=w, pos_weight=pw, reduction="none")
    want_dx = bce_logits.bce_with_logits_grad(x, y, np.ones(x.shape), weight=w, pos_weight=pw, reduction="none")
    # the gradient's scale: its larger term (the whole gradient for binary targets)
    p, s = sigmoid_pair(x.astype(np.float64))
    y64 = y.astype(np.float64)
    pw64 = 1.0 if pw is None else pw.astype(np.float64)
    w64 = 1.0 if w is None else w.astype(np.float64)
    scale = w64 * np.maximum((1.0 - y64) * p, pw64 * y64 * s)
    # exp(-|x|) rounded to a subnormal, then multiplied by pw and w: the contract's underflow term, in ulps
    e_sub = np.exp(-np.abs(x.astype(np.float64))) < _TINY
    sub = np.where(e_sub, underflow("float32", pw64 * y64, w64) / _spacing(scale), 0.0)
    lw = 1.0 + (pw64 - 1.0) * y64
    # |x| near float32's largest: x pw overflows before w brings it back (in float32 compute, torch's too)
    in_range = np.abs(x.astype(np.float64)) * np.maximum(pw64, 1.0) <= _BIG
    ulps = {}
    for who, (lo, dlo) in {"xloss": (loss, dx), "torch": _torch_results(x, y, w, pw)}.items():
        ulps[who] = (np.where(in_range, _ulps(np.where(in_range, lo, 0), np.where(in_range, want_loss, 0)), 0.0),
                     _ulps(dlo, want_dx, scale))
    (lu, gu), (tlu, tgu) = ulps["xloss"], ulps["torch"]
    sub_loss = np.where(e_sub, underflow("float32", lw, w64) / _spacing(np.minimum(np.abs(want_loss), _BIG)), 0.0)
    print(f"\n{x.size} logits, {targets} targets, {'weight+pos_weight' if weighted else 'plain'}: max ulp "
          f"xloss loss {lu[~e_sub].max():.2f} grad {gu[~e_sub].max():.2f} (where exp(-|x|) is subnormal: loss "
          f"{lu.max(initial=0, where=e_sub):.2f} grad {gu.max(initial=0, where=e_sub):.2f}); "
          f"torch loss {tlu[~e_sub].max():.3g} grad {tgu[~e_sub].max():.3g} "
          f"(torch's 99.99th percentile: loss {np.percentile(tlu, 99.99):.2f}, grad {np.percentile(tgu, 99.99):.2f})")
    assert np.all(lu <= LOSS_ULPS + sub_loss)
    assert np.all(gu <= GRAD_ULPS + sub)
    assert lu.max() <= tlu.max() and gu.max() <= tgu.max()


@njit(error_model="numpy")
def _terms(x):
    e, r, sp = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    for i in range(x.size):
        e[i], r[i], sp[i] = sigmoid_terms_f32(x[i], np.float32(1.0))
    return e, r, sp


def test_sigmoid_terms_f32_in_ulps():
    """exp(-|x|), sigmoid(|x|) and log1p(exp(-|x|)) of :mod:`sigmoid_terms` on every 997th float32 from 0 to
    104 (where exp(-|x|) reaches 0), subnormals included, against float64. Measured when written: 0.96,
    1.49 and 2.33 ulp (the polynomials' fit errors are 0.29 and 0.09 of 2**-24; the rest is float32
    rounding: of 1 + e and the division for the sigmoid; of e, 2 + e, the division and the last FMA for
    the log1p, whose error is mostly e's own while e is small)."""
    x = np.arange(0, 0x42D00001, 997, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, -x[::7], np.float32([np.inf, -np.inf, 104.0, 1e-45])])
    e, r, sp = _terms(x)
    x64 = np.abs(x.astype(np.float64))
    e64 = np.exp(-x64)
    worst = {name: _ulps(got, want).max() for name, got, want in
             (("exp", e, e64), ("sigmoid", r, 1.0 / (1.0 + e64)), ("log1p", sp, np.log1p(e64)))}
    print(f"\n{x.size} logits: max ulp {worst}")
    assert worst["exp"] <= 1.1 and worst["sigmoid"] <= 1.6 and worst["log1p"] <= 3.0
    nan = _terms(np.float32([np.nan]))
    assert all(np.isnan(v[0]) for v in nan)
