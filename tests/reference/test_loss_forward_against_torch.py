"""The float64 NLL and BCE forward references against PyTorch (issue #30): ``aten.nll_loss_forward`` /
``nll_loss2d_forward`` (loss and total_weight), ``F.nll_loss`` on N-d input, and ``F.binary_cross_entropy``,
whose float64 gradient through autograd is the backward reference's too."""

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xloss import reference as ref
from xloss.reference import nll as ref_nll

_CODES = {"none": 0, "mean": 1, "sum": 2}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_nll_forward_matches_aten_for_every_layout(data):
    c = data.draw(st.integers(1, 7))
    layout = data.draw(st.sampled_from(["C", "NC", "NCd"]))
    n = data.draw(st.integers(0, 6))
    spatial = tuple(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))) if layout == "NCd" else ()
    shape = (c,) if layout == "C" else (n, c, *spatial)
    t_shape = () if layout == "C" else (n, *spatial)
    ignore_index = data.draw(st.sampled_from([-100, 0, c - 1]))
    choices = sorted(set(range(c)) | {ignore_index})
    t = np.asarray(data.draw(hnp.arrays(np.int64, t_shape, elements=st.sampled_from(choices))))
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-30, 0)))
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, (c,), elements=st.floats(0, 2))))
    reduction = data.draw(st.sampled_from(["none", "mean", "sum"]))
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
