"""The float64 reference against PyTorch autograd and PyTorch's own backward ops."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xloss import reference as ref
from xloss.torch.paper import paper_focal_loss


@pytest.fixture(autouse=True)
def _float64_default():
    """torch.tensor(python floats) in float64 here, restored afterwards for the other test files."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def torch_focal(x, y, grad, *, alpha, gamma, reduction, weight=None):
    xt = torch.tensor(x, requires_grad=True)
    loss = paper_focal_loss(xt, torch.tensor(y), alpha, gamma, "none", dtype=None)  # A.1, kept in float64
    if weight is not None:
        loss = loss * torch.tensor(weight)
    loss = {"none": lambda t: t, "mean": torch.mean, "sum": torch.sum}[reduction](loss)
    loss.backward(torch.as_tensor(grad, dtype=torch.float64).expand_as(loss) if reduction == "none" else
                  torch.tensor(float(grad)))
    return loss.detach().numpy(), xt.grad.numpy()


shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9)
moderate = st.floats(-8, 8, allow_nan=False)  # torch forms 1 - p_t by subtraction: e^|x| eps relative
unit = st.floats(0, 1, allow_nan=False)


@st.composite
def focal_inputs(draw):
    shape = draw(shapes)
    x = draw(hnp.arrays(np.float64, shape, elements=moderate))
    y = draw(st.one_of(hnp.arrays(np.float64, shape, elements=st.sampled_from([0.0, 1.0])),
                       hnp.arrays(np.float64, shape, elements=unit)))
    weight = draw(st.one_of(st.none(), hnp.arrays(np.float64, shape[-1:], elements=st.floats(0, 2))))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]))
    grad = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2, 2))) if reduction == "none" else \
        draw(st.floats(-2, 2))
    alpha = draw(st.one_of(st.just(-1.0), st.floats(0, 1)))
    # gamma >= 1 here: for gamma < 1 autograd of (1-p_t)**gamma is inf*0 = nan where p_t == 1
    gamma = draw(st.one_of(st.sampled_from([1.0, 2.0, 3.0]), st.floats(1, 5)))
    return x, y, weight, reduction, grad, alpha, gamma


@given(focal_inputs())
def test_focal_matches_paper_code_under_autograd(inputs):
    x, y, weight, reduction, grad, alpha, gamma = inputs
    loss_t, dx_t = torch_focal(x, y, grad, alpha=alpha, gamma=gamma, reduction=reduction, weight=weight)
    loss = ref.sigmoid_focal_loss(x, y, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction)
    dx = ref.sigmoid_focal_loss_grad(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction)
    # torch forms 1 - p_t by subtraction, which loses up to e^8 * eps relative for |x| <= 8
    np.testing.assert_allclose(loss, loss_t, rtol=1e-10, atol=1e-300)  # subnormals differ by order
    np.testing.assert_allclose(dx, dx_t, rtol=1e-9, atol=1e-15 * np.max(np.abs(dx_t), initial=0.0) + 1e-300)


@given(focal_inputs())
def test_focal_gamma_below_one_matches_autograd_where_autograd_is_finite(inputs):
    x, y, weight, reduction, grad, alpha, _ = inputs
    gamma = 0.5
    _, dx_t = torch_focal(x, y, grad, alpha=alpha, gamma=gamma, reduction=reduction, weight=weight)
    dx = ref.sigmoid_focal_loss_grad(x, y, grad, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction)
    assert np.isfinite(dx).all()
    ok = np.isfinite(dx_t)
    np.testing.assert_allclose(dx[ok], dx_t[ok], rtol=1e-8, atol=1e-14)


bce_probs = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 1e-12, 1e-15, 1 - 1e-12]))


@given(st.data())
def test_bce_grad_matches_aten_backward(data):
    shape = data.draw(shapes)
    x = data.draw(hnp.arrays(np.float64, shape, elements=bce_probs))
    y = data.draw(hnp.arrays(np.float64, shape, elements=unit))
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, shape, elements=st.floats(0, 2))))
    reduction = data.draw(st.sampled_from(["none", "mean", "sum"]))
    g = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-2, 2))) if reduction == "none" else \
        data.draw(st.floats(-2, 2))
    code = {"none": 0, "mean": 1, "sum": 2}[reduction]
    expected = torch.ops.aten.binary_cross_entropy_backward(
        torch.as_tensor(g, dtype=torch.float64), torch.tensor(x), torch.tensor(y),
        None if w is None else torch.tensor(w), code).numpy()
    # ATen's clamp constant is a C float: in double arithmetic it is float32(1e-12) = 9.99999996e-13
    got = ref.bce_grad(x, y, g, weight=w, reduction=reduction, eps=float(np.float32(1e-12)))
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-300)  # operation order differs in subnormals


def test_bce_grad_add_form_is_the_manual_formula():
    x = np.array([0.0, 1e-12, 0.3, 1.0])
    y = np.array([1.0, 0.0, 1.0, 0.0])
    got = ref.bce_grad(x, y, 1.0, reduction="sum", eps_mode="add", eps=1e-12)
    np.testing.assert_allclose(got, (x - y) / (x * (1 - x) + 1e-12), rtol=1e-15)
    clamp = ref.bce_grad(x, y, 1.0, reduction="sum", eps_mode="clamp", eps=1e-12)
    assert got[1] == pytest.approx(clamp[1] / 2)  # x(1-x) == eps: adding doubles the denominator


@given(st.data())
def test_nll_grad_matches_aten_backward(data):
    n = data.draw(st.integers(0, 12))
    c = data.draw(st.integers(1, 9))
    one_d = data.draw(st.booleans())
    ignore_index = data.draw(st.sampled_from([-100, 0, c - 1]))
    choices = sorted(set(range(c)) | {ignore_index})
    t = np.array(data.draw(st.lists(st.sampled_from(choices), min_size=n, max_size=n)), np.int64)
    if one_d:
        t = np.array(data.draw(st.sampled_from(choices)), np.int64)
    shape = (c,) if one_d else (n, c)
    s = -np.random.default_rng(0).random(shape)
    w = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, (c,), elements=st.floats(0, 2))))
    reduction = data.draw(st.sampled_from(["none", "mean", "sum"]))
    g = data.draw(hnp.arrays(np.float64, (n,), elements=st.floats(-2, 2))) \
        if reduction == "none" and not one_d else data.draw(st.floats(-2, 2))
    code = {"none": 0, "mean": 1, "sum": 2}[reduction]
    tw_t = torch.ops.aten.nll_loss_forward(torch.tensor(s), torch.tensor(t), None if w is None else torch.tensor(w),
                                           code, ignore_index)[1]
    expected = torch.ops.aten.nll_loss_backward(torch.as_tensor(g, dtype=torch.float64), torch.tensor(s),
                                                torch.tensor(t), None if w is None else torch.tensor(w), code,
                                                ignore_index, tw_t).numpy()
    got = ref.nll_loss_grad(g, s, t, weight=w, reduction=reduction, ignore_index=ignore_index)
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)
    for dt in (np.int32, np.uint8):
        if (t >= 0).all():
            np.testing.assert_array_equal(ref.nll_loss_grad(g, s, t.astype(dt), weight=w, reduction=reduction,
                                                            ignore_index=ignore_index), got)


def test_nll_total_weight_zero_follows_torch():
    s = -np.ones((3, 2))
    t = np.array([0, 1, -100])
    w = np.array([1.0, 0.0])
    got = ref.nll_loss_grad(1.0, s, t, weight=w, reduction="mean", total_weight=0.0)
    expected = torch.ops.aten.nll_loss_backward(torch.tensor(1.0), torch.tensor(s), torch.tensor(t), torch.tensor(w),
                                                1, -100, torch.tensor(0.0)).numpy()
    np.testing.assert_array_equal(got, expected)  # -inf where w=1, nan where w=0, zeros elsewhere
    assert np.isneginf(got[0, 0]) and np.isnan(got[1, 1])
    all_ignored = ref.nll_loss_grad(1.0, s, np.full(3, -100), reduction="mean", total_weight=0.0)
    assert (all_ignored == 0).all()


@st.composite
def flce_problem(draw):
    bt, h, v = draw(st.integers(0, 9)), draw(st.integers(1, 8)), draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.normal(size=(bt, h)) * draw(st.sampled_from([0.5, 2.0, 8.0]))
    w = rng.normal(size=(v, h))
    t = rng.integers(0, v, bt)
    t[rng.random(bt) < 0.2] = -100
    g = rng.normal(size=bt)
    ls = draw(st.sampled_from([0.0, 0.1, 0.3]))
    return x, w, t, g, ls


@given(flce_problem())
def test_flce_matches_autograd_through_materialised_logits(problem):
    x, w, t, g, ls = problem
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    loss = F.cross_entropy(xt @ wt.T, torch.tensor(t), ignore_index=-100, reduction="none", label_smoothing=ls)
    loss.backward(torch.tensor(g))
    g_used = np.where(t == -100, 0.0, g)  # the caller zeroes ignored tokens' upstream gradient
    logits = x @ w.T
    m = logits.max(axis=1) if len(x) else np.zeros(0)
    se = np.exp(logits - m[:, None]).sum(axis=1)
    mask = t == -100  # one shard holding the whole vocabulary: only ignored tokens are "elsewhere"
    mt = np.where(mask, 0, t)
    for kw in (dict(logits_max=m, sum_exp_logits=se), dict(softmax=np.exp(logits - m[:, None]) / se[:, None])):
        for packed in (False, True):
            mk = ref.pack_mask(mask) if packed else mask
            gi, gw = ref.flce_grad(g_used, x, w, mk, mt, label_smoothing=ls, **kw)
            np.testing.assert_allclose(gi, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-10, atol=1e-12)


@given(flce_problem(), st.integers(1, 4))
def test_flce_shards_add_up_to_the_whole_vocabulary(problem, shards):
    x, w, t, g, ls = problem
    g = np.where(t == -100, 0.0, g)
    logits = x @ w.T
    m = logits.max(axis=1) if len(x) else np.zeros(0)
    se = np.exp(logits - m[:, None]).sum(axis=1)
    full_gi, full_gw = ref.flce_grad(g, x, w, t == -100, np.where(t == -100, 0, t), logits_max=m, sum_exp_logits=se,
                                     label_smoothing=ls, vocab_size=len(w))
    gi_sum = np.zeros_like(full_gi)
    gw_parts = []
    for _start, w_shard, kw in ref.shard_inputs(x, w, t, shards):
        gi, gw = ref.flce_grad(g, x, w_shard, label_smoothing=ls, vocab_size=len(w), **kw)
        gi_sum += gi
        gw_parts.append(gw)
    np.testing.assert_allclose(gi_sum, full_gi, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(gw_parts), full_gw, rtol=1e-10, atol=1e-12)


def test_mask_packing_is_lsb_first():
    mask = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1], bool)
    packed = ref.pack_mask(mask)
    assert packed.tolist() == [0b00000001, 0b00000010]
    np.testing.assert_array_equal(ref.unpack_mask(packed, 10), mask)
