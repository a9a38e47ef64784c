"""The float64 NLL backward reference on (C), (N, C) and (N, C, d1, ..., dk) input against PyTorch autograd
(``F.nll_loss``'s float64 gradient, with torch's default total weight or ``aten.nll_loss2d_backward``'s given
one), and the validator's refusals of N-d input that does not fit."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xloss
from xloss import reference as ref

_CODES = {"none": 0, "mean": 1, "sum": 2}


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_nll_grad_matches_autograd_for_every_layout(data):
    c = data.draw(st.integers(1, 6))
    layout = data.draw(st.sampled_from(["C", "NC", "NCd"]))
    n = data.draw(st.integers(0, 4))
    spatial = tuple(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))) if layout == "NCd" else ()
    shape = (c,) if layout == "C" else (n, c, *spatial)
    t_shape = () if layout == "C" else (n, *spatial)
    ignore_index = data.draw(st.sampled_from([-100, 0, c - 1]))
    choices = sorted(set(range(c)) | {ignore_index})
    t = np.asarray(data.draw(hnp.arrays(np.int64, t_shape, elements=st.sampled_from(choices))))
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-30, 0)))
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, (c,), elements=st.floats(0.1, 2))))
    reduction = data.draw(st.sampled_from(["none", "mean", "sum"]))
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
