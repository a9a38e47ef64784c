"""Fused linear-cross-entropy gradients for one vocabulary shard, in float64 (seed 003).

For tokens i (BT of them) and this shard's vocabulary rows v (V of them):

    G = softmax                                   ("softmax" mode), or
    G = exp(input @ weight.T - logits_max) / sum_exp_logits       ("recompute" mode)
    G -= label_smoothing / vocab_size             (only with label smoothing)
    G[i, masked_target[i]] -= (1 - label_smoothing) * (1 - target_mask[i])
    G *= grad[:, None]
    input_grad = G @ weight        (BT, H)
    weight_grad = G.T @ input      (V, H)

``target_mask[i]`` is 1 when token i's target is NOT in this shard. The mask comes either
as one bool per token or bit-packed in uint8, LSB first (bit i%8 of byte i//8).

The helpers below produce those inputs the way Ascend's FusedLinearOnlineMaxSum and a
vocabulary-parallel all-reduce do, so a caller can build a shard's arguments.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._common import as_f64


def pack_mask(mask):
    """bool (n,) -> uint8 (ceil(n/8),), LSB first."""
    return np.packbits(np.asarray(mask, dtype=bool).reshape(-1), bitorder="little")


def unpack_mask(packed, n):
    """uint8 (ceil(n/8),) LSB first -> bool (n,)."""
    return np.unpackbits(np.asarray(packed, dtype=np.uint8).reshape(-1), count=n, bitorder="little").astype(bool)


def mask_as_bool(target_mask, n):
    """A target mask in either form as bool (n,): bool/0-1 arrays are taken as is, uint8 as packed."""
    m = np.asarray(target_mask)
    if m.dtype == np.uint8:
        return unpack_mask(m, n)
    return m.reshape(-1).astype(bool)


def flce_probabilities(input, weight, logits_max, sum_exp_logits):
    """The recompute-mode G before the target correction: exp(logits - max) / sum_exp."""
    logits = as_f64(input) @ as_f64(weight).T
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        return np.exp(logits - as_f64(logits_max)[:, None]) / as_f64(sum_exp_logits)[:, None]


def flce_grad_logits(grad, input, weight, target_mask, masked_target, *, logits_max=None,
                     sum_exp_logits=None, softmax=None, label_smoothing=0.0, vocab_size=None):
    """G after correction and scaling by grad: the gradient of the loss w.r.t. this shard's logits."""
    bt, v = np.shape(input)[0], np.shape(weight)[0]
    if softmax is not None:
        g = as_f64(softmax).copy()
    else:
        g = flce_probabilities(input, weight, logits_max, sum_exp_logits)
    if label_smoothing:
        g -= label_smoothing / (vocab_size if vocab_size is not None else v)
    in_shard = ~mask_as_bool(target_mask, bt)
    rows = np.nonzero(in_shard)[0]
    g[rows, np.asarray(masked_target).reshape(-1)[rows].astype(np.int64)] -= 1.0 - label_smoothing
    return g * as_f64(grad).reshape(-1)[:, None]


def flce_grad(grad, input, weight, target_mask, masked_target, *, logits_max=None, sum_exp_logits=None,
              softmax=None, label_smoothing=0.0, vocab_size=None):
    """Return ``(input_grad (BT, H), weight_grad (V, H))`` in float64."""
    g = flce_grad_logits(grad, input, weight, target_mask, masked_target, logits_max=logits_max,
                         sum_exp_logits=sum_exp_logits, softmax=softmax, label_smoothing=label_smoothing,
                         vocab_size=vocab_size)
    return g @ as_f64(weight), g.T @ as_f64(input)


class ShardStats(NamedTuple):
    """What one shard contributes before the all-reduce (Ascend FusedLinearOnlineMaxSum)."""

    logits_max: np.ndarray  # (BT,) local row max (-inf for an empty shard)
    sum_exp_logits: np.ndarray  # (BT,) sum(exp(logits - logits_max)) over this shard
    predicted_logits: np.ndarray  # (BT,) logit of the target where it is in this shard, else 0
    target_mask: np.ndarray  # (BT,) bool: target NOT in this shard
    masked_target: np.ndarray  # (BT,) int64: local target index, 0 where masked


def online_max_sum(input, weight_shard, target, vocab_start):
    """Per-shard statistics for the shard holding global vocabulary rows [vocab_start, vocab_start + V)."""
    logits = as_f64(input) @ as_f64(weight_shard).T
    bt, v = logits.shape
    target = np.asarray(target).reshape(-1).astype(np.int64)
    in_shard = (target >= vocab_start) & (target < vocab_start + v)
    masked_target = np.where(in_shard, target - vocab_start, 0)
    if v == 0:
        zeros = np.zeros(bt)
        return ShardStats(np.full(bt, -np.inf), zeros, zeros, ~in_shard, masked_target)
    row_max = logits.max(axis=1)
    sum_exp = np.exp(logits - row_max[:, None]).sum(axis=1)
    predicted = np.where(in_shard, logits[np.arange(bt), masked_target], 0.0)
    return ShardStats(row_max, sum_exp, predicted, ~in_shard, masked_target)


def combine_max_sum(maxes, sums):
    """Global row max and sum-exp from per-shard ones (what the all-reduces compute)."""
    maxes, sums = np.stack([as_f64(m) for m in maxes]), np.stack([as_f64(s) for s in sums])
    global_max = maxes.max(axis=0)
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.isneginf(maxes), 0.0, sums * np.exp(maxes - global_max))
    return global_max, scaled.sum(axis=0)


def shard_inputs(input, weight, target, shards):
    """Split a full-vocabulary problem into ``shards`` contiguous vocabulary shards.

    Returns, per shard, ``(vocab_start, weight_shard, kwargs)`` where kwargs are the recompute-mode
    arguments of :func:`flce_grad` for that shard (global max and sum-exp, mask, local target).
    """
    v = np.shape(weight)[0]
    bounds = np.linspace(0, v, shards + 1).astype(int)
    stats = [online_max_sum(input, weight[a:b], target, a) for a, b in zip(bounds[:-1], bounds[1:])]
    gmax, gsum = combine_max_sum([s.logits_max for s in stats], [s.sum_exp_logits for s in stats])
    out = []
    for (a, b), s in zip(zip(bounds[:-1], bounds[1:]), stats):
        out.append((int(a), weight[a:b], dict(target_mask=s.target_mask, masked_target=s.masked_target,
                                              logits_max=gmax, sum_exp_logits=gsum)))
    return out


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, class_weight=None):
    """Cross entropy on full-vocabulary logits (float64), PyTorch semantics; used to check FLCE end to end."""
    z = as_f64(logits)
    t = np.asarray(target).reshape(-1).astype(np.int64)
    zmax = z.max(axis=1, keepdims=True) if z.shape[1] else np.zeros((z.shape[0], 1))
    logp = z - zmax - np.log(np.exp(z - zmax).sum(axis=1, keepdims=True))
    valid = t != ignore_index
    k = z.shape[1]
    cw = np.ones(k) if class_weight is None else as_f64(class_weight)
    tt = np.where(valid, t, 0)
    w_t = np.where(valid, cw[tt], 0.0)
    nll = -logp[np.arange(len(t)), tt] * w_t
    smooth = -(logp * cw).sum(axis=1) / k * valid if label_smoothing else 0.0
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    if reduction == "none":
        return per_token
    if reduction == "sum":
        return np.asarray(per_token.sum())
    return np.asarray(per_token.sum() / w_t.sum())


def softcap_logits(logits, softcap):
    """Gemma-2-style soft-capping: ``softcap * tanh(logits / softcap)`` (None or 0: unchanged)."""
    z = as_f64(logits)
    return z if not softcap else softcap * np.tanh(z / softcap)


def _token_scale(u, t, valid):
    """Liger-Kernel's ``use_token_scaling`` factor: softmax(u)[target] (0 where ignored), a constant."""
    umax = u.max(axis=1, keepdims=True)
    e = np.exp(u - umax)
    p_t = e[np.arange(len(t)), np.where(valid, t, 0)] / e.sum(axis=1)
    return np.where(valid, p_t, 0.0)


def cross_entropy_extras(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         class_weight=None, softcap=None, lse_square_scale=0.0, token_scaling=False):
    """The fused loss with Liger-Kernel's extras, on full-vocabulary logits (float64):
    ``(loss, z_loss, token_accuracy)``.

    The logits are soft-capped first; the cross entropy is :func:`cross_entropy`'s; the z-loss is
    ``lse_square_scale * logsumexp(logits)**2`` per non-ignored token (not class-weighted) and is
    included in ``loss``; token accuracy is ``argmax == target`` (first maximum) per non-ignored
    token. ``mean``: cross entropy / summed class weight, z-loss / token count; accuracy is the mean
    over the non-ignored tokens for ``mean`` and ``sum``, per token (0 where ignored) for ``none``.
    ``token_scaling``: each token's loss (z-loss included) times its target's softmax probability
    (Liger-Kernel's ``use_token_scaling``; a constant for the gradient)."""
    z = softcap_logits(logits, softcap)
    t = np.asarray(target).reshape(-1).astype(np.int64)
    valid = t != ignore_index
    ce = cross_entropy(z, t, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing,
                       class_weight=class_weight)
    zmax = z.max(axis=1) if z.shape[1] else np.zeros(z.shape[0])
    lse = zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1))
    zl = np.where(valid, lse_square_scale * lse * lse, 0.0)
    correct = (valid & (z.argmax(axis=1) == t)).astype(np.float64) if z.shape[1] else np.zeros(len(t))
    if token_scaling:
        s = _token_scale(z, t, valid)
        ce, zl = ce * s, zl * s
    if reduction == "none":
        return ce + zl, zl, correct
    count = valid.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.asarray(correct.sum() / count)
        if reduction == "sum":
            return np.asarray(ce.sum() + zl.sum()), np.asarray(zl.sum()), acc
        cw = np.ones(z.shape[1]) if class_weight is None else as_f64(class_weight)
        w_sum = np.where(valid, cw[np.where(valid, t, 0)], 0.0).sum()
        z_mean = zl.sum() / count
        return np.asarray(ce.sum() / w_sum + z_mean), np.asarray(z_mean), acc


def cross_entropy_extras_grad_logits(logits, target, grad, *, ignore_index=-100, reduction="mean",
                                     label_smoothing=0.0, class_weight=None, softcap=None, lse_square_scale=0.0,
                                     token_scaling=False):
    """d loss / d logits of :func:`cross_entropy_extras` for upstream ``grad`` (a scalar, or per token
    for ``none``), in closed form: with u the soft-capped logits, p = softmax(u), a_i = (1-ls) w_t +
    (ls/K) W_sum, g_i / gz_i the per-token upstream of the cross entropy / z-loss,

        G_ij = (1 - (u_ij / softcap)**2) [g_i (a_i p_ij - (1-ls) w_t [j == t] - (ls/K) w_j)
                                          + 2 lse_square_scale lse_i gz_i p_ij],

    g and gz multiplied by the token's target probability with ``token_scaling``."""
    u = softcap_logits(logits, softcap)
    bt, k = u.shape
    t = np.asarray(target).reshape(-1).astype(np.int64)
    valid = t != ignore_index
    tt = np.where(valid, t, 0)
    cw = np.ones(k) if class_weight is None else as_f64(class_weight)
    w_t = np.where(valid, cw[tt], 0.0)
    umax = u.max(axis=1, keepdims=True)
    e = np.exp(u - umax)
    p = e / e.sum(axis=1, keepdims=True)
    lse = umax[:, 0] + np.log(e.sum(axis=1))
    if reduction == "none":
        g = gz = np.where(valid, as_f64(grad).reshape(-1), 0.0)
    else:
        gs = float(np.asarray(grad, dtype=np.float64).reshape(-1)[0])
        count, w_sum = valid.sum(), w_t.sum()
        with np.errstate(divide="ignore"):
            g = np.where(valid, gs / (w_sum if reduction == "mean" else 1.0), 0.0)
            gz = np.where(valid, gs / (count if reduction == "mean" else 1.0), 0.0)
    if token_scaling:
        s = _token_scale(u, t, valid)
        g, gz = g * s, gz * s
    ls = label_smoothing
    a = (1.0 - ls) * w_t + (ls / k) * cw.sum()
    G = (g * a + 2.0 * lse_square_scale * lse * gz)[:, None] * p - (g * ls / k)[:, None] * cw[None, :]
    G[np.arange(bt), tt] -= g * (1.0 - ls) * w_t
    if softcap:
        G *= 1.0 - (u / softcap) ** 2
    return G


# ==== vocabulary-parallel forward ==========================================================================
# CANN ops-nn's aclnnFusedLinearOnlineMaxSum (one shard, before the all-reduce) and
# aclnnFusedCrossEntropyLossWithMaxSum (after it). Unlike online_max_sum above, the shard's predicted logit is
# relative to the shard's own max (subRes[b][maskedTarget[b]]), and the mask comes bit-packed, the padding
# bits of its last byte the mask of target 0 (padding_bit). A shard holds targets vocab_start <= t <
# vocab_end (ops-nn's kernel and golden script: "target >= vocabEndIndex" is masked; its doc page's formula
# writes ">").


class OnlineMaxSumOut(NamedTuple):
    """aclnnFusedLinearOnlineMaxSum's outputs, in its order (float64; the mask uint8; masked_target int64)."""

    logits_max_local: np.ndarray  # (BT,)
    sum_exp_logits_local: np.ndarray  # (BT,) sum(exp(logits - logits_max_local))
    predicted_logits_local: np.ndarray  # (BT,) logits[target - start] - logits_max_local, 0 where masked
    target_mask: np.ndarray  # ((BT + 7) // 8,) uint8, bit i%8 of byte i//8 set: token i's target not here
    masked_target: np.ndarray  # (BT,) target - start, 0 where masked
    vocab_parallel_logits: np.ndarray  # (BT, V) input @ weight.T


def padding_bit(vocab_start, vocab_end) -> bool:
    """The padding bits of CANN's packed targetMaskOut: the mask of target 0, since ops-nn's kernel
    (TargetInnerProcess) and its golden script pad the targets with 0 before comparing and packing."""
    return not vocab_start <= 0 < vocab_end


def pack_target_mask(mask, pad_bit: bool):
    """bool (BT,) -> uint8 ((BT+7)//8,), LSB first, the padding bits of the last byte ``pad_bit``
    (CANN's targetMaskOut: :func:`padding_bit` of the shard)."""
    mask = np.asarray(mask, dtype=bool).reshape(-1)
    pad = -mask.size % 8
    return pack_mask(np.concatenate([mask, np.full(pad, bool(pad_bit))]))


def fused_linear_online_max_sum(input, weight, target, vocab_start, vocab_end=None):
    """One vocabulary shard's statistics: the shard holds global rows [vocab_start, vocab_end) of the
    vocabulary, its weight rows ``weight`` (V, H); vocab_end defaults to vocab_start + V."""
    logits = as_f64(input) @ as_f64(weight).T
    bt, v = logits.shape
    vocab_end = vocab_start + v if vocab_end is None else vocab_end
    if v == 0 or vocab_start < 0 or not vocab_start <= vocab_end <= vocab_start + v:
        raise ValueError(f"need V > 0 and 0 <= vocab_start <= vocab_end <= vocab_start + V; got V={v}, "
                         f"vocab_start={vocab_start}, vocab_end={vocab_end}")
    target = np.asarray(target).reshape(-1).astype(np.int64)
    masked = (target < vocab_start) | (target >= vocab_end)
    masked_target = np.where(masked, 0, target - vocab_start)
    row_max = logits.max(axis=1) if bt else np.zeros(0)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, as IEEE gives it (the special-value cases)
        sub = logits - row_max[:, None]
        predicted = np.where(masked, 0.0, sub[np.arange(bt), masked_target])
        sum_exp = np.exp(sub).sum(axis=1)
    return OnlineMaxSumOut(row_max, sum_exp, predicted, pack_target_mask(masked, padding_bit(vocab_start, vocab_end)),
                           masked_target, logits)


def all_reduce_online_max_sum(shards):
    """The caller's all-reduce over the shards' :class:`OnlineMaxSumOut` (ours: CANN leaves it to the caller):
    the global max (MAX), the sums rescaled to it (SUM), and the predicted logits moved from each shard's max
    to the global one (SUM; one shard holds each target). Returns (logits_max, sum_exp_logits, predicted_logits)."""
    global_max, global_sum = combine_max_sum([s.logits_max_local for s in shards],
                                             [s.sum_exp_logits_local for s in shards])
    predicted = np.zeros_like(global_max)
    for s in shards:
        here = ~mask_as_bool(s.target_mask, global_max.size)
        predicted += np.where(here, s.predicted_logits_local + s.logits_max_local - global_max, 0.0)
    return global_max, global_sum, predicted


def fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, label_smoothing=0.0,
                                          vocab_parallel_logits=None):
    """aclnnFusedCrossEntropyLossWithMaxSum: (loss (BT,), softmax (BT, V) or None). loss = log(sum_exp) -
    predicted; softmax = exp(vocab_parallel_logits - logits_max) / sum_exp. label_smoothing must be 0."""
    if label_smoothing != 0:
        raise ValueError(f"label_smoothing must be 0 (the only value CANN supports); got {label_smoothing}")
    m, s = as_f64(logits_max).reshape(-1), as_f64(sum_exp_logits).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        loss = np.log(s) - as_f64(predicted_logits).reshape(-1)
        if vocab_parallel_logits is None:
            return loss, None
        return loss, np.exp(as_f64(vocab_parallel_logits) - m[:, None]) / s[:, None]


def vocab_shards(v, shards):
    """``shards`` contiguous, non-empty [start, end) ranges covering a vocabulary of v rows."""
    bounds = np.linspace(0, v, shards + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
