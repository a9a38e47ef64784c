"""The float64 NLL and BCE forward references against PyTorch (issue #30): ``aten.nll_loss_forward`` /
``nll_loss2d_forward`` (loss and total_weight), ``F.nll_loss`` on N-d input, and ``F.binary_cross_entropy``,
whose float64 gradient through autograd is the backward reference's too; the NLL backward reference on
(C), (N, C) and (N, C, d1, ..., dk) input against autograd (torch's default total weight) and
``aten.nll_loss2d_backward`` (a given one), and the validator's refusals of N-d input that does not fit."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xloss
from xloss import reference as ref
from xloss.reference import nll as ref_nll

_CODES = {"none": 0, "mean": 1, "sum": 2}


def _nll_case(data, *, classes: int, batch: int, weight_min: float):
    """(log-probabilities (C), (N, C) or (N, C, d1, ...), targets with some ignored, class weight or None,
    reduction, ignore_index), float64."""
    c = data.draw(st.integers(1, classes))
    layout = data.draw(st.sampled_from(["C", "NC", "NCd"]))
    n = data.draw(st.integers(0, batch))
    spatial = tuple(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))) if layout == "NCd" else ()
    shape = (c,) if layout == "C" else (n, c, *spatial)
    t_shape = () if layout == "C" else (n, *spatial)
    ignore_index = data.draw(st.sampled_from([-100, 0, c - 1]))
    choices = sorted(set(range(c)) | {ignore_index})
    t = np.asarray(data.draw(hnp.arrays(np.int64, t_shape, elements=st.sampled_from(choices))))
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-30, 0)))
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, (c,), elements=st.floats(weight_min, 2))))
    return x, t, w, data.draw(st.sampled_from(["none", "mean", "sum"])), ignore_index


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_nll_forward_matches_aten_for_every_layout(data):
    x, t, w, reduction, ignore_index = _nll_case(data, classes=7, batch=6, weight_min=0.0)
    shape = x.shape
    loss, tw = ref_nll.nll_loss(x, t, weight=w, reduction=reduction, ignore_index=ignore_index)
    wt = None if w is None else torch.tensor(w)
    if len(shape) <= 2:
        loss_t, tw_t = torch.ops.aten.nll_loss_forward(torch.tensor(x), torch.tensor(t), wt, _CODES[reduction],
                                                       ignore_index)
        np.testing.assert_allclose(tw, tw_t.numpy(), rtol=1e-14, atol=0)
    else:
        loss_t = F.nll_loss(torch.tensor(x), torch.tensor(t), wt, ignore_index=ignore_index, reduction=reduction)
        if len(shape) == 4:  # nll_loss2d_forward gives the total weight (0 for none, as the reference)
            tw_t = torch.ops.aten.nll_loss2d_forward(torch.tensor(x), torch.tensor(t), wt, _CODES[reduction],
                                                     ignore_index)[1]
            np.testing.assert_allclose(tw, tw_t.numpy(), rtol=1e-14, atol=0)
    assert np.shape(loss) == tuple(loss_t.shape)
    np.testing.assert_allclose(loss, loss_t.numpy(), rtol=1e-13, atol=1e-300, equal_nan=True)
    for dt in (np.int32, np.uint8):
        if t.size and (t >= 0).all():
            got = ref_nll.nll_loss(x, t.astype(dt), weight=w, reduction=reduction, ignore_index=ignore_index)
            np.testing.assert_array_equal(got[0], loss)


def test_nll_forward_edges_follow_torch():
    x = np.array([[0.0, -np.inf], [-np.inf, -1.0], [-0.5, -2.0]])
    for w in (None, np.array([1.0, 0.0])):
        for red in ("none", "mean", "sum"):
            for t in (np.array([1, 0, -100]), np.array([-100, -100, -100]), np.zeros(0, np.int64)):
                xs = x[: t.size]
                got = ref_nll.nll_loss(xs, t, weight=w, reduction=red)
                want = torch.ops.aten.nll_loss_forward(torch.tensor(xs), torch.tensor(t),
                                                       None if w is None else torch.tensor(w), _CODES[red], -100)
                np.testing.assert_array_equal(got[0], want[0].numpy())
                np.testing.assert_array_equal(got[1], want[1].numpy())


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_bce_forward_and_its_gradient_match_torch_autograd(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
    probs = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 1e-300, 1e-12, 1 - 2.0**-53]))
    x = data.draw(hnp.arrays(np.float64, shape, elements=probs))
    y = data.draw(hnp.arrays(np.float64, shape, elements=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1))))
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, shape[len(shape) - 1:] if shape else (),
                                                  elements=st.floats(0, 2))))
    reduction = data.draw(st.sampled_from(["none", "mean", "sum"]))
    xt = torch.tensor(x, requires_grad=True)
    loss_t = F.binary_cross_entropy(xt, torch.tensor(y), None if w is None else torch.tensor(w), reduction=reduction)
    got = ref.binary_cross_entropy(x, y, weight=w, reduction=reduction)
    np.testing.assert_allclose(got, loss_t.detach().numpy(), rtol=1e-13, atol=1e-300, equal_nan=True)
    if x.size and ((x > 1e-6) & (x < 1 - 1e-6)).all():  # away from the clamp of torch's gradient
        loss_t.sum().backward()
        dx = ref.bce_grad(x, y, 1.0, weight=w, reduction="sum" if reduction == "none" else reduction)
        np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-300)


# -- the NLL backward on every layout ------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.data())
def test_nll_grad_matches_autograd_for_every_layout(data):
    x, t, w, reduction, ignore_index = _nll_case(data, classes=6, batch=4, weight_min=0.1)
    shape = x.shape
    xt = torch.tensor(x, requires_grad=True)
    loss = F.nll_loss(xt, torch.tensor(t), None if w is None else torch.tensor(w), ignore_index=ignore_index,
                      reduction=reduction)
    g = data.draw(hnp.arrays(np.float64, loss.shape, elements=st.floats(-3, 3)))
    (want,) = torch.autograd.grad(loss, xt, torch.tensor(g), allow_unused=True)
    want = np.zeros(shape) if want is None else want.numpy()
    got = ref.nll_loss_grad(g if reduction == "none" else float(g), x, t, weight=w, reduction=reduction,
                            ignore_index=ignore_index)
    assert got.shape == shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)


def test_a_given_total_weight_is_atens_nll_loss2d_backward():
    rng = np.random.default_rng(0)
    x = -rng.random((2, 4, 3, 5))
    t = rng.integers(0, 4, (2, 3, 5))
    t[0, 0, :2] = -100
    w = rng.uniform(0.5, 2, 4)
    for reduction, g in (("mean", np.asarray(0.75)), ("none", rng.uniform(-1, 1, t.shape))):
        want = torch.ops.aten.nll_loss2d_backward(torch.tensor(g), torch.tensor(x), torch.tensor(t), torch.tensor(w),
                                                  _CODES[reduction], -100, torch.tensor(6.5, dtype=torch.float64))
        got = ref.nll_loss_grad(g if reduction == "none" else float(g), x, t, weight=w, reduction=reduction,
                                total_weight=6.5)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(self=np.zeros((2, 3, 4), np.float32), target=np.zeros((2, 3), np.int64)), xloss.XLossValueError,
     r"target must have shape \(2, 4\) for self of shape \(2, 3, 4\); got \(2, 3\)"),
    (dict(self=np.zeros((2, 3, 4), np.float32), target=np.zeros((2, 4), np.int64), reduction="none",
          grad=np.ones(2, np.float32)), xloss.XLossValueError, r"grad must have shape \(2, 4\)"),
    (dict(self=np.zeros((2, 3, 4), np.float32), target=np.zeros((2, 4), np.int64), reduction="sum",
          grad=np.ones((2, 4), np.float32)), xloss.XLossValueError, r"grad must be a scalar"),
    (dict(self=np.zeros((1, 3, 2, 2), np.float32), target=np.array([[[0, 1], [2, 3]]])), xloss.XLossIndexError,
     r"target\[3\] = 3 is out of range: class indices must lie in \[0, 3\)"),
])
def test_the_validator_names_what_does_not_fit(kw, exc, match):
    out = np.full(kw["self"].shape, 7.0, np.float32)
    with pytest.raises(exc, match=match):
        xloss.nll_loss_grad(kw.pop("grad", 1.0), kw.pop("self"), kw.pop("target"), backend="reference", out=out, **kw)
    assert (out == 7.0).all()
