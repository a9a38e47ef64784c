"""The float64 reference of the fused loss's extras (soft-capping, z-loss, token accuracy) against
PyTorch autograd through materialised logits."""

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from xloss.reference.flce import cross_entropy_extras, cross_entropy_extras_grad_logits

F64 = torch.float64


def torch_extras(z, t, *, ignore_index, reduction, label_smoothing, class_weight, softcap, lse_square_scale,
                 token_scaling):
    """The same loss in torch operations: (loss, z_loss, accuracy) with z's graph."""
    u = softcap * torch.tanh(z / softcap) if softcap else z
    valid = t != ignore_index
    ce = F.cross_entropy(u, t, weight=class_weight, ignore_index=ignore_index, reduction="none",
                         label_smoothing=label_smoothing)
    zl = torch.where(valid, lse_square_scale * torch.logsumexp(u, 1) ** 2, 0.0)
    if token_scaling:  # times the target's probability, detached
        s = torch.where(valid, torch.softmax(u.detach(), 1).gather(1, torch.where(valid, t, 0)[:, None])[:, 0], 0.0)
        ce, zl = ce * s, zl * s
    correct = (valid & (u.argmax(1) == t)).to(F64)
    if reduction == "none":
        return ce + zl, zl, correct
    count = valid.sum()
    acc = correct.sum() / count
    if reduction == "sum":
        return ce.sum() + zl.sum(), zl.sum(), acc
    w = torch.ones(z.shape[1], dtype=F64) if class_weight is None else class_weight
    w_sum = torch.where(valid, w[torch.where(valid, t, 0)], 0.0).sum()
    return ce.sum() / w_sum + zl.sum() / count, zl.sum() / count, acc


@st.composite
def case(draw):
    bt, k = draw(st.integers(1, 12)), draw(st.integers(1, 9))
    t = draw(st.lists(st.integers(0, k - 1) | st.just(-100), min_size=bt, max_size=bt))
    if all(v == -100 for v in t):
        t[0] = 0  # mean of nothing is NaN on both sides; covered by the torch-level tests
    return dict(bt=bt, k=k, t=t, seed=draw(st.integers(0, 2**16)), scale=draw(st.sampled_from([0.5, 3.0, 20.0])),
                reduction=draw(st.sampled_from(["none", "mean", "sum"])),
                ls=draw(st.sampled_from([0.0, 0.2])), weighted=draw(st.booleans()),
                softcap=draw(st.sampled_from([None, 0.7, 5.0, 30.0])),
                z=draw(st.sampled_from([0.0, 1e-4, 0.3])), scaling=draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(case())
def test_extras_and_their_gradient_match_autograd(c):
    g = torch.Generator().manual_seed(c["seed"])
    z = torch.randn(c["bt"], c["k"], generator=g, dtype=F64) * c["scale"]
    t = torch.tensor(c["t"])
    cw = torch.rand(c["k"], generator=g, dtype=F64) + 0.2 if c["weighted"] else None
    kw = dict(ignore_index=-100, reduction=c["reduction"], label_smoothing=c["ls"], softcap=c["softcap"],
              lse_square_scale=c["z"], token_scaling=c["scaling"])
    zr = z.clone().requires_grad_()
    loss, zl, acc = torch_extras(zr, t, class_weight=cw, **kw)
    up = torch.rand(loss.shape, generator=g, dtype=F64) + 0.5
    (expected,) = torch.autograd.grad(loss, zr, up)
    got = cross_entropy_extras(z.numpy(), t.numpy(), class_weight=None if cw is None else cw.numpy(), **kw)
    for a, e, what in zip(got, (loss, zl, acc), ("loss", "z_loss", "accuracy")):
        np.testing.assert_allclose(a, e.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=what)
    grad = cross_entropy_extras_grad_logits(z.numpy(), t.numpy(), up.numpy(),
                                            class_weight=None if cw is None else cw.numpy(), **kw)
    np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-10, atol=1e-12)
