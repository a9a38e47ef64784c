"""Sigmoid focal loss: loss, gradient, or both, in one parallel vectorized pass over x and y.

Per element (SPEC kernel 1; every quantity formed so that it stays finite where its value is):
``e = exp(-|x|)``, ``p``/``s`` = ``sigmoid(x)``/``sigmoid(-x)`` from ``1/(1+e)`` and ``e/(1+e)``,
``q = p(1-y) + s*y``, ``ce = max(x,0) - x*y + log1p(e)`` written as a sum of non-negative
parts, ``r = p*s/q`` (the finite form of ``q**(gamma-1) * p(1-p) / q**gamma``, 1 where q = 0),
``loss = w*a_t*ce*q**gamma`` and ``dx = w*a_t*((p(1-y) - s*y)*q**gamma + gamma*q**gamma*r*(1-2y)*ce)``.

``q**gamma`` has three compiled forms, chosen once per call: ``q*q`` for gamma = 2,
repeated squaring (times a square root) for other integer and half-integer gamma below 16,
and ``exp(gamma*log q)`` in float64 (:func:`.vecmath.vpow`) for everything else.

Two kernels — forward, and gradient with loss — so the forward mode never pays for the
gradient (the gradient needs every factor of the loss anyway).
Compute type: float64 for float64 data, float32 otherwise; sums are float32 over
:data:`_SUB` elements, then float64 per fixed block (see :mod:`.layout`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store
from .intrinsics import inline_me, like, radd
from .layout import BLOCK as _BLOCK
from .layout import broadcast_plan, n_blocks, ones_block, stretch, threads_for
from .vecmath import vexp, vlog1p_unit, vpow

_INL = dict(error_model="numpy")
_KERNEL = dict(parallel=True, cache=True, error_model="numpy")
_SUB = 64  # elements per compute-type partial sum: keeps the loop at full SIMD width

#: q**gamma forms (compile-time constants of the loops).
POW_GENERAL, POW_CHAIN, POW_SQUARE = 0, 1, 2


def pow_form(gamma: float) -> tuple[int, int, bool]:
    """(form, integer part, has half) of gamma for :func:`_powq`."""
    if gamma == 2.0:
        return POW_SQUARE, 2, False
    twice = 2.0 * gamma
    if twice == int(twice) and gamma < 16.0:
        return POW_CHAIN, int(gamma), twice % 2 == 1
    return POW_GENERAL, 0, False


@njit(**_INL)
def _powq(q, gamma, nint, half, form):
    """q**gamma for q in [0, 1] (0**0 == 1; the general form never sees gamma = 0)."""
    inline_me()
    if form == POW_SQUARE:
        return q * q
    if form == POW_GENERAL:
        return vpow(q, gamma)
    r = like(1.0, q)
    b = q
    r = r * b if nint & 1 else r
    b = b * b
    r = r * b if nint & 2 else r
    b = b * b
    r = r * b if nint & 4 else r
    b = b * b
    r = r * b if nint & 8 else r
    return r * np.sqrt(q) if half else r


@njit(**_INL)
def _sigmoids(xv, yv):
    """(e, 1/(1+e), p, s, 1-y, q) with e = exp(-|x|), p = sigmoid(x), s = sigmoid(-x)."""
    inline_me()
    one = like(1.0, xv)
    e = vexp(-abs(xv))
    rcp = one / (one + e)  # sigmoid(|x|)
    small = e * rcp  # sigmoid(-|x|)
    pos = xv >= like(0.0, xv)
    p = rcp if pos else small
    s = small if pos else rcp
    omy = one - yv
    return e, rcp, p, s, omy, p * omy + s * yv


@njit(**_INL)
def _parts(xv, yv, alpha, gamma, nint, half, form, want_grad):
    """(a_t*ce*q**gamma, a_t*dloss/dx) of one element, in xv's float type (dx is 0 unless
    ``want_grad``, a compile-time constant)."""
    inline_me()
    one = like(1.0, xv)
    zero = like(0.0, xv)
    e, rcp, p, s, omy, q = _sigmoids(xv, yv)
    ce = (xv * omy if xv > zero else -xv * yv) + vlog1p_unit(e, rcp)
    a = like(alpha, xv)
    at = a * yv + (one - a) * omy if alpha >= 0.0 else one
    qg = _powq(q, gamma, nint, half, form)
    dx = zero
    if want_grad:
        if form == POW_SQUARE:  # q**2 * r == q * p * s: no division
            qgr = q * (p * s)
        else:
            qgr = qg * (p * s / q if q > zero else one)
        dx = at * ((p * omy - s * yv) * qg + like(gamma, xv) * qgr * (one - (yv + yv)) * ce)
    return at * ce * qg, dx


@njit(**_INL)
def _run(x, y, i0, m, w, wo, wk, g, go, gk, alpha, gamma, nint, half, form,
         loss_out, store_loss, grad_out, want_loss, want_grad):
    """Elements i0 .. i0+m-1: weight ``w[wo + j] * wk``, upstream gradient ``g[go + j] * gk``.
    Returns the sum of the weighted losses (0 unless ``want_loss``)."""
    inline_me()
    acc = 0.0
    zero = like(0.0, wk)
    for j0 in range(0, m, _SUB):
        sub = zero
        for j in range(j0, min(m, j0 + _SUB)):
            i = i0 + j
            lv, dv = _parts(load(x, i), load(y, i), alpha, gamma, nint, half, form, want_grad)
            wv = load(w, wo + j) * wk
            if want_loss:
                lv = wv * lv
                sub = radd(sub, lv)
                if store_loss:
                    store(loss_out, i, lv)
            if want_grad:
                store(grad_out, i, dv * wv * (load(g, go + j) * gk))
        acc += np.float64(sub)
    return acc


@njit(inline="always", error_model="numpy")  # IR-inlined: its prange must land in the kernel
def _blocks(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, alpha, gamma, nint, half, form,
            loss_out, store_loss, grad_out, partials, want_loss, want_grad):
    """Walk the fixed blocks in parallel; within a block, the stretches of constant weight layout."""
    n = x.size
    x0 = load(x, 0)
    gk = like(g_scale, x0)
    for b in prange(partials.size):
        end_block = min(n, (b + 1) * _BLOCK)
        pos = b * _BLOCK
        acc = 0.0
        while pos < end_block:
            end, wo, wi = stretch(pos, end_block, w_rep, w_period)
            if wi < 0:  # the weight walks along x
                wsrc = w
                wk = like(1.0, x0)
            else:  # one weight for the whole stretch
                wsrc = ones
                wk = load(w, wi)
            go = pos if g_full else 0
            if form == POW_SQUARE:
                acc += _run(x, y, pos, end - pos, wsrc, wo, wk, g, go, gk, alpha, gamma, nint, half, POW_SQUARE,
                            loss_out, store_loss, grad_out, want_loss, want_grad)
            elif form == POW_CHAIN:
                acc += _run(x, y, pos, end - pos, wsrc, wo, wk, g, go, gk, alpha, gamma, nint, half, POW_CHAIN,
                            loss_out, store_loss, grad_out, want_loss, want_grad)
            else:
                acc += _run(x, y, pos, end - pos, wsrc, wo, wk, g, go, gk, alpha, gamma, nint, half, POW_GENERAL,
                            loss_out, store_loss, grad_out, want_loss, want_grad)
            pos = end
        partials[b] = acc


# The entry points: forward only, and gradient with the loss (the gradient needs every factor
# of the loss, so the gradient-only mode runs this one too: a few multiplies per element), each in
# two forms: every loss stored (``reduction="none"``) or only the per-block sums (``_total``: sum,
# mean, or no loss wanted). ``store_loss`` must be a compile-time constant of each kernel: as a
# run-time flag LLVM unswitched the loop and left the sum-only copy scalar (3-4x slower than
# ``none``), and one kernel per form keeps what a caller compiles to the forms it uses.
# Arrays are flat and share one storage type (see .access); ``w``/``ones``/``g`` follow the
# walk described in .layout (``g`` is ``ones`` when the upstream gradient is the scalar
# ``g_scale``). ``partials`` has one float64 slot per block.

@njit(**_KERNEL)
def focal_forward(x, y, w, w_rep, w_period, ones, alpha, gamma, nint, half, form, loss_out, partials):
    _blocks(x, y, w, w_rep, w_period, ones, ones, False, 1.0, alpha, gamma, nint, half, form,
            loss_out, True, loss_out, partials, True, False)


@njit(**_KERNEL)
def focal_forward_total(x, y, w, w_rep, w_period, ones, alpha, gamma, nint, half, form, unused, partials):
    _blocks(x, y, w, w_rep, w_period, ones, ones, False, 1.0, alpha, gamma, nint, half, form,
            unused, False, unused, partials, True, False)


@njit(**_KERNEL)
def focal_both(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, alpha, gamma, nint, half, form,
               loss_out, grad_out, partials):
    _blocks(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, alpha, gamma, nint, half, form,
            loss_out, True, grad_out, partials, True, True)


@njit(**_KERNEL)
def focal_both_total(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, alpha, gamma, nint, half, form,
                     unused, grad_out, partials):
    _blocks(x, y, w, w_rep, w_period, ones, g, g_full, g_scale, alpha, gamma, nint, half, form,
            unused, False, grad_out, partials, True, True)


# --- driver ----------------------------------------------------------------------------

def run(a, backend=None) -> None:
    """Fill ``a.loss_out`` / ``a.grad_out`` of a validated :class:`xloss.kernel_args.FocalArgs`."""
    n = a.x.size
    mean = a.reduction == "mean"
    if n == 0:
        if a.loss_out is not None and a.reduction != "none":
            a.loss_out[...] = np.nan if mean else 0.0  # mean of nothing is NaN, as torch
        return
    x = storage_view(a.x).reshape(-1)
    y = storage_view(a.y).reshape(-1)
    ones = ones_block(a.x.dtype)
    w = broadcast_plan(a.weight, a.x.shape, ones)
    form, nint, half = pow_form(a.gamma)
    partials = np.empty(n_blocks(n))
    store_loss = a.reduction == "none"
    scratch = np.empty(1, dtype=x.dtype)  # stands in for an output that is not written
    loss_out = storage_view(a.loss_out).reshape(-1) if store_loss and a.loss_out is not None else scratch
    common = (x, y, w.values, w.rep, w.period, ones)
    pow_args = (a.alpha, a.gamma, nint, half, form)
    if a.grad_out is None:
        args = (*common, *pow_args, loss_out, partials)
        kernel = focal_forward if store_loss else focal_forward_total
    else:
        grad_out = storage_view(a.grad_out).reshape(-1)
        if isinstance(a.grad, np.ndarray):
            g, g_full, g_scale = storage_view(a.grad).reshape(-1), True, 1.0
        else:
            g, g_full, g_scale = ones, False, a.grad / n if mean else a.grad
        store = store_loss and a.loss_out is not None
        args = (*common, g, g_full, g_scale, *pow_args, loss_out, grad_out, partials)
        kernel = focal_both if store else focal_both_total
    with threads_for(n):
        kernel(*args)
    if a.loss_out is not None and not store_loss:
        total = partials.sum()  # fixed order: independent of the thread count
        with np.errstate(over="ignore"):  # a half-type sum may overflow to inf, as it should
            a.loss_out[...] = total / n if mean else total
