"""Forward-mode AD (``torch.func.jvp``, ``torch.autograd.forward_ad``, ``jacfwd``) through every
xloss.torch loss, against torch's own jvp of the same loss written in torch ops: the tangent is
right, or the call raises an XLossError naming what is not supported — never a zero or a missing
tangent."""

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

import xloss
import xloss.torch as xt
from xloss.torch.paper import paper_focal_loss

F64 = torch.float64
REDUCTIONS = ("none", "sum", "mean")


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 5, dtype=F64, generator=g)
    y = (torch.rand(6, 5, generator=g) > 0.6).to(F64)
    return g, x, y


def _losses(reduction, g):
    """(name, ours, torch's) as functions of the differentiated operands, with the same constants."""
    y = (torch.rand(6, 5, generator=g) > 0.6).to(F64)
    w = torch.rand(6, 5, dtype=F64, generator=g)
    t = torch.tensor([0, 4, -100, 1, 2, 3])
    cw = torch.rand(5, dtype=F64, generator=g) + 0.5
    lin_w = torch.randn(7, 5, dtype=F64, generator=g)
    lin_b = torch.randn(7, dtype=F64, generator=g)
    tt = torch.tensor([0, 6, -100, 1, 2, 5])
    logits = torch.randn(6, 5, dtype=F64, generator=g)
    r = reduction
    return [
        ("focal", lambda x: xt.sigmoid_focal_loss(x, y, reduction=r),
         lambda x: paper_focal_loss(x, y, reduction=r, dtype=None)),
        ("focal targets", lambda y: xt.sigmoid_focal_loss(logits, y, reduction=r, gamma=1.5),
         lambda y: paper_focal_loss(logits, y, gamma=1.5, reduction=r, dtype=None)),
        ("bce", lambda x: xt.binary_cross_entropy(torch.sigmoid(x), y, w, reduction=r),
         lambda x: F.binary_cross_entropy(torch.sigmoid(x), y, w, reduction=r)),
        ("nll", lambda x: xt.nll_loss(torch.log_softmax(x, 1), t, cw, reduction=r),
         lambda x: F.nll_loss(torch.log_softmax(x, 1), t, cw, reduction=r)),
        ("flce", lambda x: xt.fused_linear_cross_entropy(x, lin_w, tt, lin_b, reduction=r, label_smoothing=0.1),
         lambda x: F.cross_entropy(F.linear(x, lin_w, lin_b), tt, reduction=r, label_smoothing=0.1)),
    ]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_jvp_matches_torch_for_every_loss(reduction):
    g, x, _ = _data(1)
    tangent = torch.randn(6, 5, dtype=F64, generator=g)
    for name, ours, theirs in _losses(reduction, g):
        primal = torch.rand(6, 5, dtype=F64, generator=g) if name == "focal targets" else x
        out, jvp_ours = torch.func.jvp(ours, (primal,), (tangent,))
        ref_out, jvp_ref = torch.func.jvp(theirs, (primal,), (tangent,))
        torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12, msg=name)
        assert jvp_ref.abs().max() > 1e-6, name  # the comparison is not against a zero
        torch.testing.assert_close(jvp_ours, jvp_ref, rtol=1e-11, atol=1e-12, msg=f"torch.func.jvp {name}")
        with fwAD.dual_level():
            got = fwAD.unpack_dual(ours(fwAD.make_dual(primal, tangent))).tangent
            want = fwAD.unpack_dual(theirs(fwAD.make_dual(primal, tangent))).tangent
        assert got is not None, f"forward_ad {name}: no tangent"
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12, msg=f"forward_ad {name}")


@pytest.mark.parametrize("reduction", ("sum", "mean"))
@pytest.mark.parametrize("dtype", (torch.float32, F64))
def test_flce_jvp_through_weight_and_bias(reduction, dtype):
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(*s, dtype=dtype, generator=g) for s in ((6, 5), (7, 5), (7,)))
    t = torch.tensor([0, 6, -100, 1, 2, 5])
    tangents = tuple(torch.randn(a.shape, dtype=dtype, generator=g) for a in (x, w, b))
    _, ours = torch.func.jvp(lambda x, w, b: xt.fused_linear_cross_entropy(x, w, t, b, reduction=reduction),
                             (x, w, b), tangents)
    _, ref = torch.func.jvp(lambda x, w, b: F.cross_entropy(F.linear(x, w, b), t, reduction=reduction),
                            (x, w, b), tangents)
    tol = 1e-12 if dtype == F64 else 2e-5
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)


def test_flce_none_with_weight_tangent_refused():
    x, w = torch.randn(4, 3, dtype=F64), torch.randn(5, 3, dtype=F64)
    t = torch.tensor([0, 1, 2, 4])
    with pytest.raises(xloss.UnsupportedRequestError, match="w.r.t. input only"):
        torch.func.jvp(lambda w: xt.fused_linear_cross_entropy(x, w, t, reduction="none"), (w,), (torch.ones_like(w),))


def test_jacfwd_matches_and_second_order_raises_xloss_error():
    g, x, y = _data(2)
    f = lambda x: xt.sigmoid_focal_loss(x, y, reduction="sum")  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # vmap's per-entry fallback for the ops
        torch.testing.assert_close(torch.func.jacfwd(f)(x),
                                   torch.func.jacfwd(lambda x: paper_focal_loss(x, y, reduction="sum", dtype=None))(x))
        for loss in (f, lambda x: xt.fused_linear_cross_entropy(x, torch.ones(3, 5, dtype=F64),
                                                                torch.zeros(6, dtype=torch.int64))):
            with pytest.raises(xloss.XLossError, match="second-order"):
                torch.func.hessian(loss)(x)


def test_vmap_of_grad_focal_gives_per_sample_gradients():
    g, x, y = _data(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = torch.func.vmap(torch.func.grad(lambda x, y: xt.sigmoid_focal_loss(x, y, reduction="sum")))(x, y)
    want = torch.func.vmap(torch.func.grad(lambda x, y: paper_focal_loss(x, y, reduction="sum", dtype=None)))(x, y)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_constant_operand_with_tangent_refused():
    """A tangent on an operand that has no derivative here is refused like requires_grad is."""
    _, x, y = _data(5)
    w = torch.rand(6, 5, dtype=F64)
    with pytest.raises(xloss.XLossValueError, match="weight carries a forward-mode tangent"):
        torch.func.jvp(lambda w: xt.sigmoid_focal_loss(x, y, weight=w), (w,), (w,))
