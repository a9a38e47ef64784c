"""Binary cross entropy with logits: loss, gradient, or both, in one parallel pass over x and y.

Per element (``pw`` = pos_weight, 1 if absent; ``lw = 1 + (pw - 1) y``, formed as ``pw y + (1 - y)``;
``e = exp(-|x|)``; ``p``/``s`` = ``sigmoid(x)``/``sigmoid(-x)`` from ``r = 1/(1+e)`` and ``e r``):
``loss = w (x(1-y) + lw log1p(e))`` for x > 0, ``w (-x y pw + lw log1p(e))`` otherwise (the stable
``max(x,0) - x y + log1p(e^-|x|)`` with torch's pos_weight form, no cancellation), and
``dx = w ((1-y) p - pw y s)``, formed as ``r ((1-y) - pw y e)`` or ``r ((1-y) e - pw y)``. ``e``, ``r``
and ``log1p(e)`` come from :mod:`.sigmoid_terms`. The weight and the pos_weight are walked as described
in :mod:`.layout`, each by its own (rep, period), a short period tiled to a block's length first
(:func:`.layout.tiled`): a stretch is where both layouts are uniform; where the weight is one value
over the stretch and the upstream gradient a scalar, a loop without the per-element weight products
runs it. Compute type: float64 for float64 data, float32 otherwise; sums are float32 over :data:`_SUB`
elements, then float64 per fixed block. Four kernels, as :mod:`.focal`: every loss stored or only
per-block sums, with or without the gradient (``store_loss`` is a compile-time constant of each);
a fifth for the gradient alone, which skips the loss's log1p.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .access import load, storage_view, store
from .intrinsics import fma, inline_me, like, radd
from .layout import BLOCK as _BLOCK
from .layout import broadcast_plan, n_blocks, ones_block, stretch, threads_for, tiled
from .sigmoid_terms import sigmoid_terms

_INL = dict(error_model="numpy")
_KERNEL = dict(parallel=True, cache=True, error_model="numpy")
_SUB = 256  # elements per compute-type partial sum (at most 8 per SIMD lane): a float32 sum keeps the loop at
# full SIMD width; 256 rather than 64 spreads each chunk's horizontal sum and loop set-up (-10 % per element)


@njit(**_INL)
def _parts(xv, yv, pw, gs, want_grad):
    """(loss, dloss/dx times ``gs``) of one element before the weight, in xv's float type (dx is 0
    unless ``want_grad``, a compile-time constant; ``gs`` rides on the sigmoid's division)."""
    inline_me()
    one = like(1.0, xv)
    zero = like(0.0, xv)
    e, rcp, softplus = sigmoid_terms(xv, gs)  # exp(-|x|), gs sigmoid(|x|), log1p(exp(-|x|))
    omy = one - yv
    ypw = yv * pw
    lw = fma(pw, yv, omy)  # 1 + (pw - 1) y as two nonnegative terms: no cancellation for pw < 1, y near 1
    pos = xv > zero
    linear = xv * (omy if pos else -ypw)
    loss = linear + lw * softplus
    dx = zero
    if want_grad:
        # (1-y) p - pw y s with p, s = sigmoid(x), sigmoid(-x) = rcp and e*rcp in either order:
        # rcp times one FMA (its product exact), two roundings fewer than forming e*rcp first
        dx = rcp * (fma(-ypw, e, omy) if pos else fma(omy, e, -ypw))
    return loss, dx


@njit(**_INL)
def _run(x, y, i0, m, w, wo, wk, pw, po, pk, g, go, gk, loss_out, store_loss, grad_out, want_grad, want_sum):
    """Elements i0 .. i0+m-1: weight ``w[wo + j] * wk``, pos_weight ``pw[po + j] * pk``, upstream
    gradient ``g[go + j] * gk``. Returns the sum of the weighted losses (0 unless ``want_sum``: with
    neither the sum nor the stored losses wanted, LLVM drops the loss's arithmetic)."""
    inline_me()
    acc = 0.0
    zero = like(0.0, wk)
    one = like(1.0, wk)
    for j0 in range(0, m, _SUB):
        sub = zero
        for j in range(j0, min(m, j0 + _SUB)):
            i = i0 + j
            lv, dv = _parts(load(x, i), load(y, i), load(pw, po + j) * pk, one, want_grad)
            wv = load(w, wo + j) * wk
            lv = wv * lv
            if want_sum:
                sub = radd(sub, lv)
            if store_loss:
                store(loss_out, i, lv)
            if want_grad:
                store(grad_out, i, dv * wv * (load(g, go + j) * gk))
        acc += np.float64(sub)
    return acc


@njit(**_INL)
def _run_uniform(x, y, i0, m, wk, pw, po, pk, gk, loss_out, store_loss, grad_out, want_grad, want_sum):
    """:func:`_run` where the weight (``wk``) and the upstream gradient (``gk``) are one value over the
    stretch (no weight and a scalar upstream: the common call): ``wk * gk`` is the numerator of the
    sigmoid's division and the sum is weighted once, five multiplies fewer per element on the FMA pipes
    that bound this loop."""
    inline_me()
    acc = 0.0
    zero = like(0.0, wk)
    scale = wk * gk
    for j0 in range(0, m, _SUB):
        sub = zero
        for j in range(j0, min(m, j0 + _SUB)):
            i = i0 + j
            lv, dv = _parts(load(x, i), load(y, i), load(pw, po + j) * pk, scale, want_grad)
            if want_sum:
                sub = radd(sub, lv)
            if store_loss:
                store(loss_out, i, wk * lv)
            if want_grad:
                store(grad_out, i, dv)
        acc += np.float64(sub)
    return acc * np.float64(wk)


@njit(inline="always", error_model="numpy")  # IR-inlined: its prange must land in the kernel
def _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, loss_out, store_loss,
            grad_out, partials, want_grad, want_sum):
    """Walk the fixed blocks in parallel; within a block, the stretches where both layouts are uniform."""
    n = x.size
    x0 = load(x, 0)
    one = like(1.0, x0)
    gk = like(g_scale, x0)
    for b in prange(partials.size):
        end_block = min(n, (b + 1) * _BLOCK)
        pos = b * _BLOCK
        acc = 0.0
        while pos < end_block:
            w_end, wo, wi = stretch(pos, end_block, w_rep, w_period)
            p_end, po, pi = stretch(pos, end_block, p_rep, p_period)
            end = min(w_end, p_end)
            wsrc, wk = (w, one) if wi < 0 else (ones, load(w, wi))
            psrc, pk = (pw, one) if pi < 0 else (ones, load(pw, pi))
            if wi >= 0:
                wo = 0
            if pi >= 0:
                po = 0
            if wi >= 0 and not g_full:
                acc += _run_uniform(x, y, pos, end - pos, wk, psrc, po, pk, gk, loss_out, store_loss, grad_out,
                                    want_grad, want_sum)
            else:
                go = pos if g_full else 0
                acc += _run(x, y, pos, end - pos, wsrc, wo, wk, psrc, po, pk, g, go, gk, loss_out, store_loss,
                            grad_out, want_grad, want_sum)
            pos = end
        partials[b] = acc


# Arrays are flat and share one storage type (see .access); ``w``/``pw``/``ones``/``g`` follow the walk
# of .layout (``g`` is ``ones`` when the upstream gradient is the scalar ``g_scale``); ``partials`` has
# one float64 slot per block.

@njit(**_KERNEL)
def logits_forward(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, loss_out, partials):
    _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, ones, False, 1.0, loss_out, True, loss_out,
            partials, False, True)


@njit(**_KERNEL)
def logits_forward_total(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, unused, partials):
    _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, ones, False, 1.0, unused, False, unused,
            partials, False, True)


@njit(**_KERNEL)
def logits_both(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, loss_out, grad_out,
                partials):
    _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, loss_out, True, grad_out,
            partials, True, True)


@njit(**_KERNEL)
def logits_both_total(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, unused, grad_out,
                      partials):
    _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, unused, False, grad_out,
            partials, True, True)


@njit(**_KERNEL)
def logits_grad(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, unused, grad_out,
                partials):
    """The gradient alone (no loss asked for: its log1p is not computed)."""
    _blocks(x, y, w, w_rep, w_period, pw, p_rep, p_period, ones, g, g_full, g_scale, unused, False, grad_out,
            partials, True, False)


def run(a, backend=None) -> None:
    """Fill ``a.loss_out`` / ``a.grad_out`` of a validated
    :class:`xloss.kernels.bce_with_logits.args.BCEWithLogitsArgs`."""
    n = a.x.size
    mean = a.reduction == "mean"
    if n == 0:
        if a.loss_out is not None and a.reduction != "none":
            a.loss_out[...] = np.nan if mean else 0.0  # mean of nothing is NaN, as torch
        return
    ones = ones_block(a.x.dtype)
    w = tiled(broadcast_plan(a.weight, a.x.shape, ones))
    pw = tiled(broadcast_plan(a.pos_weight, a.x.shape, ones))
    partials = np.empty(n_blocks(n))
    store_loss = a.reduction == "none" and a.loss_out is not None
    scratch = np.empty(1, dtype=storage_view(ones).dtype)  # stands in for an output that is not written
    loss_out = storage_view(a.loss_out).reshape(-1) if store_loss else scratch
    common = (storage_view(a.x).reshape(-1), storage_view(a.y).reshape(-1), w.values, w.rep, w.period,
              pw.values, pw.rep, pw.period, ones)
    if a.grad_out is None:
        kernel, args = (logits_forward if store_loss else logits_forward_total), (*common, loss_out, partials)
    else:
        if isinstance(a.grad, np.ndarray):
            g, g_full, g_scale = storage_view(a.grad).reshape(-1), True, 1.0
        else:
            g, g_full, g_scale = ones, False, a.grad / n if mean else a.grad
        kernel = logits_both if store_loss else logits_both_total if a.loss_out is not None else logits_grad
        args = (*common, g, g_full, g_scale, loss_out, storage_view(a.grad_out).reshape(-1), partials)
    with threads_for(n):
        kernel(*args)
    if a.loss_out is not None and not store_loss:
        total = partials.sum()  # fixed order: independent of the thread count
        with np.errstate(over="ignore"):  # a half-type sum may overflow to inf, as it should
            a.loss_out[...] = total / n if mean else total
