"""The vocabulary-parallel forward reference (CANN's FusedLinearOnlineMaxSum, the caller's all-reduce,
FusedCrossEntropyLossWithMaxSum) against PyTorch on the full logits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from xloss.reference import flce


def _problem(seed, bt, h, v):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(bt, h)) * 2.0
    w = rng.normal(size=(v, h))
    t = rng.integers(0, v, bt)
    return x, w, t


def _sharded_loss(x, w, t, shards, softmax=False):
    outs = [flce.fused_linear_online_max_sum(x, w[a:b], t, a, b) for a, b in flce.vocab_shards(w.shape[0], shards)]
    m, s, p = flce.all_reduce_online_max_sum(outs)
    loss, _ = flce.fused_cross_entropy_loss_with_max_sum(m, s, p)
    if not softmax:
        return loss, outs
    parts = [flce.fused_cross_entropy_loss_with_max_sum(m, s, p, vocab_parallel_logits=o.vocab_parallel_logits)[1]
             for o in outs]
    return loss, outs, np.concatenate(parts, axis=1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), bt=st.integers(1, 19), h=st.integers(1, 6), v=st.integers(1, 13),
       shards=st.integers(1, 4))
def test_sharded_forward_equals_cross_entropy_on_full_logits(seed, bt, h, v, shards):
    shards = min(shards, v)  # every shard holds at least one row (CANN: weight.size(0) > 0)
    x, w, t = _problem(seed, bt, h, v)
    loss, outs, softmax = _sharded_loss(x, w, t, shards, softmax=True)
    logits = torch.from_numpy(x @ w.T)
    want = F.cross_entropy(logits, torch.from_numpy(t), reduction="none").numpy()
    np.testing.assert_allclose(loss, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(softmax, torch.softmax(logits, dim=1).numpy(), rtol=1e-12, atol=1e-15)
    # exactly one shard holds each target, and its local index is the target's
    here = np.stack([~flce.unpack_mask(o.target_mask, bt) for o in outs])
    np.testing.assert_array_equal(here.sum(axis=0), np.ones(bt))
    for k, (a, _) in enumerate(flce.vocab_shards(v, shards)):
        np.testing.assert_array_equal(outs[k].masked_target[here[k]] + a, t[here[k]])
        np.testing.assert_array_equal(outs[k].masked_target[~here[k]], 0)


def test_one_shard_outputs_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    w = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, -1.0]])  # logits rows: [1, 0, 2], [0, 2, -2], [1, 1, 1]
    out = flce.fused_linear_online_max_sum(x, w, np.array([4, 5, 7]), vocab_start=4, vocab_end=6)
    np.testing.assert_array_equal(out.logits_max_local, [2.0, 2.0, 1.0])
    np.testing.assert_allclose(out.sum_exp_logits_local, [np.exp(-1) + np.exp(-2) + 1, np.exp(-2) + 1 + np.exp(-4),
                                                          3.0])
    np.testing.assert_array_equal(out.predicted_logits_local, [-1.0, 0.0, 0.0])  # 7 is past the end: masked
    np.testing.assert_array_equal(out.masked_target, [0, 1, 0])
    assert out.target_mask.tolist() == [0b11111100]  # token 2 masked; bits 3..7 are padding: mask(0), set
    np.testing.assert_array_equal(out.vocab_parallel_logits, x @ w.T)


@pytest.mark.parametrize("bt", [0, 1, 7, 8, 9, 16])
def test_mask_bytes_and_padding(bt):
    mask = np.arange(bt) % 3 == 0
    for pad in (False, True):
        packed = flce.pack_target_mask(mask, pad)
        assert packed.dtype == np.uint8 and packed.size == (bt + 7) // 8
        bits = np.unpackbits(packed, bitorder="little")
        np.testing.assert_array_equal(bits[:bt], mask)
        assert (bits[bt:] == pad).all()
        np.testing.assert_array_equal(flce.unpack_mask(packed, bt), mask)


@pytest.mark.parametrize("start, end", [(0, 5), (0, 1), (2, 5), (0, 0)])
def test_padding_bits_are_the_mask_of_target_zero(start, end):
    """ops-nn fused_linear_online_max_sum: the kernel (TargetInnerProcess) and its golden script pad the
    targets with 0 before comparing and packing, so the padding bits are target 0's mask (0 on the first shard)."""
    x, w = np.ones((3, 2)), np.ones((5, 2))
    bits = np.unpackbits(flce.fused_linear_online_max_sum(x, w, np.array([0, 1, 9]), start, end).target_mask,
                         bitorder="little")
    assert (bits[3:] == (not start <= 0 < end)).all()


def test_agrees_with_the_existing_shard_helper():
    """online_max_sum (the backward's helper) gives the unshifted predicted logit; ours is relative to the max."""
    x, w, t = _problem(3, 10, 4, 9)
    for a, b in flce.vocab_shards(9, 3):
        old = flce.online_max_sum(x, w[a:b], t, a)
        new = flce.fused_linear_online_max_sum(x, w[a:b], t, a, b)
        np.testing.assert_array_equal(old.logits_max, new.logits_max_local)
        np.testing.assert_allclose(old.sum_exp_logits, new.sum_exp_logits_local, rtol=1e-15)
        np.testing.assert_array_equal(old.masked_target, new.masked_target)
        np.testing.assert_array_equal(old.target_mask, flce.unpack_mask(new.target_mask, 10))
        np.testing.assert_allclose(np.where(old.target_mask, 0, old.predicted_logits - old.logits_max),
                                   new.predicted_logits_local, rtol=1e-15, atol=1e-15)


def test_forward_feeds_the_backward_reference():
    """The shards' mask and masked target plus the all-reduced max and sum are the backward's recompute
    inputs: its gradients equal autograd's of F.cross_entropy (sum)."""
    x, w, t = _problem(5, 11, 3, 10)
    shards = flce.vocab_shards(10, 3)
    outs = [flce.fused_linear_online_max_sum(x, w[a:b], t, a, b) for a, b in shards]
    m, s, _ = flce.all_reduce_online_max_sum(outs)
    grad = np.ones(11)
    dx = np.zeros_like(x)
    dw = []
    for (a, b), o in zip(shards, outs):
        gi, gw = flce.flce_grad(grad, x, w[a:b], o.target_mask, o.masked_target, logits_max=m, sum_exp_logits=s)
        dx += gi
        dw.append(gw)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    F.cross_entropy(xt @ wt.T, torch.from_numpy(t), reduction="sum").backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(dw), wt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(vocab_start=-1), dict(vocab_start=2, vocab_end=1),
                                dict(vocab_start=0, vocab_end=5)])
def test_refuses_bad_shard_bounds(kw):
    x, w, t = _problem(1, 3, 2, 4)
    with pytest.raises(ValueError):
        flce.fused_linear_online_max_sum(x, w, t, **kw)
    with pytest.raises(ValueError):
        flce.fused_cross_entropy_loss_with_max_sum(np.zeros(1), np.ones(1), np.zeros(1), label_smoothing=0.1)
