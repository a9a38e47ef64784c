"""Detection: the torchvision patch (on a stand-in module tree built here, and on torchvision
itself where it imports) and mmdetection's focal loss against its formula in float64."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
import xloss.torch as xt

F64 = torch.float64

# torchvision's focal loss (fvcore's formula), the stock function of the stand-in tree
FOCAL_SRC = '''
import torch
import torch.nn.functional as F

def sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2, reduction: str = "none"):
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss
'''

# FCOS's classification loss: every anchor, one-hot targets, summed (name bound at import time)
FCOS_SRC = '''
import torch
from ...ops import sigmoid_focal_loss

def classification_loss(cls_logits, matched_idxs, labels):
    foreground = matched_idxs >= 0
    gt = torch.zeros_like(cls_logits)
    gt[foreground, labels[matched_idxs[foreground]]] = 1.0
    return sigmoid_focal_loss(cls_logits, gt, reduction="sum") / max(1, int(foreground.sum()))
'''

# what RetinaNet's classification head does with it: the name bound at import time
RETINANET_SRC = '''
import torch
from ...ops import sigmoid_focal_loss

def classification_loss(cls_logits, matched_idxs, labels):
    losses = []
    for logits_i, matched_i, labels_i in zip(cls_logits, matched_idxs, labels):
        foreground = matched_i >= 0
        gt = torch.zeros_like(logits_i)
        gt[foreground, labels_i[matched_i[foreground]]] = 1.0
        valid = matched_i != -2  # between the thresholds: ignored
        losses.append(sigmoid_focal_loss(logits_i[valid], gt[valid], reduction="sum") / max(1, int(foreground.sum())))
    return sum(losses) / len(losses)
'''


@pytest.fixture
def standin(monkeypatch):
    """torchvision, torchvision.ops(.focal_loss), torchvision.models.detection.retinanet in sys.modules."""
    mods = {}
    for name in ("torchvision", "torchvision.ops", "torchvision.ops.focal_loss", "torchvision.models",
                 "torchvision.models.detection", "torchvision.models.detection.retinanet",
                 "torchvision.models.detection.fcos"):
        mod = types.ModuleType(name)
        mod.__path__ = []  # a package, so relative imports resolve
        mod.__package__ = name.rsplit(".", 1)[0] if name.endswith(("retinanet", "fcos")) else name
        monkeypatch.setitem(sys.modules, name, mod)
        mods[name] = mod
    exec(FOCAL_SRC, mods["torchvision.ops.focal_loss"].__dict__)
    mods["torchvision.ops"].sigmoid_focal_loss = mods["torchvision.ops.focal_loss"].sigmoid_focal_loss
    exec(RETINANET_SRC, mods["torchvision.models.detection.retinanet"].__dict__)
    exec(FCOS_SRC, mods["torchvision.models.detection.fcos"].__dict__)
    return mods


def _detection_batch(seed):
    g = torch.Generator().manual_seed(seed)
    logits = [torch.randn(12, 4, generator=g, dtype=F64) * 3 for _ in range(2)]
    matched = [torch.randint(-2, 3, (12,), generator=g) for _ in range(2)]
    labels = [torch.randint(0, 4, (3,), generator=g) for _ in range(2)]
    return logits, matched, labels


def _loss_and_grads(fn, logits, matched, labels):
    leaves = [t.clone().requires_grad_() for t in logits]
    loss = fn(leaves, matched, labels)
    loss.backward()
    return loss.detach(), [t.grad for t in leaves]


def test_patch_swaps_every_bound_name_and_matches_stock(standin):
    retina = standin["torchvision.models.detection.retinanet"]
    stock = retina.sigmoid_focal_loss
    batch = _detection_batch(0)
    want_loss, want_grads = _loss_and_grads(retina.classification_loss, *batch)
    with xt.apply_to_detection(backend="reference") as patch:
        assert patch.modules == ["torchvision.models.detection.fcos", "torchvision.models.detection.retinanet",
                                 "torchvision.ops", "torchvision.ops.focal_loss"]
        assert retina.sigmoid_focal_loss is not stock and standin["torchvision.ops"].sigmoid_focal_loss is not stock
        loss, grads = _loss_and_grads(retina.classification_loss, *batch)
    assert retina.sigmoid_focal_loss is stock and standin["torchvision.ops.focal_loss"].sigmoid_focal_loss is stock
    torch.testing.assert_close(loss, want_loss, rtol=1e-13, atol=0)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-15)


def test_patch_reaches_fcos_too(standin):
    fcos = standin["torchvision.models.detection.fcos"]
    logits, matched, labels = _detection_batch(1)
    x, m, lab = logits[0], matched[0].clamp_min(-1), labels[0]
    want = fcos.classification_loss(x, m, lab)
    with xt.apply_to_detection(backend="reference"):
        assert getattr(fcos.sigmoid_focal_loss, "_xloss_drop_in", False)
        got = fcos.classification_loss(x, m, lab)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0)


def test_drop_in_keeps_torchvision_signature_and_messages(standin):
    stock = standin["torchvision.ops"].sigmoid_focal_loss
    patch = xt.apply_to_detection(backend="reference")
    try:
        fn = standin["torchvision.ops"].sigmoid_focal_loss
        x, y = torch.randn(5, 3, dtype=F64), (torch.rand(5, 3) > 0.5).to(F64)
        torch.testing.assert_close(fn(x, y, 0.5, 1.5, "mean"), stock(x, y, 0.5, 1.5, "mean"), rtol=1e-13, atol=0)
        with pytest.raises(ValueError, match="Invalid"):
            fn(x, y, reduction="xyz")
        again = xt.apply_to_detection()  # patching twice: the stock originals stay with the first patch
        assert again.replaced == {}
    finally:
        patch.remove()
    assert standin["torchvision.ops"].sigmoid_focal_loss is stock


def test_without_torchvision_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision -> ImportError
    with pytest.raises(xloss.XLossValueError, match="torchvision, which cannot be imported"):
        xt.apply_to_detection()


def test_real_torchvision_retinanet_head():
    try:
        from torchvision.models.detection.retinanet import RetinaNetClassificationHead
    except Exception as exc:  # only a CUDA wheel exists for this machine's torch
        pytest.skip(f"torchvision not importable: {exc}")
    torch.manual_seed(0)
    head = RetinaNetClassificationHead(in_channels=8, num_anchors=2, num_classes=3).double()
    feats = [torch.randn(1, 8, 4, 4, dtype=F64)]
    targets = [{"labels": torch.tensor([0, 2])}]
    matched = [torch.randint(-2, 2, (32,))]
    head_out = {"cls_logits": head(feats)}
    want = head.compute_loss(targets, head_out, matched)
    with xt.apply_to_detection(backend="reference"):
        got = head.compute_loss(targets, head_out, matched)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


# -- mmdetection -------------------------------------------------------------------------------

def mmdet_reference(pred, target, weight=None, gamma=2.0, alpha=0.25, reduction="mean", avg_factor=None):
    """mmdetection's py_sigmoid_focal_loss + weight_reduce_loss, one-hot targets (background dropped)."""
    t = torch.nn.functional.one_hot(target, pred.shape[1] + 1)[:, :-1].to(pred.dtype)
    p = pred.sigmoid()
    pt = (1 - p) * t + p * (1 - t)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(pred, t, reduction="none") * (
        (alpha * t + (1 - alpha) * (1 - t)) * pt.pow(gamma))
    if weight is not None:
        loss = loss * (weight.view(-1, 1) if weight.shape == (pred.shape[0],) else weight.view(pred.shape))
    if avg_factor is None:
        return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]
    return loss.sum() / (avg_factor + torch.finfo(torch.float32).eps) if reduction == "mean" else loss


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), c=st.integers(1, 6), gamma=st.sampled_from([0.0, 0.5, 2.0]),
       alpha=st.floats(0, 1), reduction=st.sampled_from(["none", "mean", "sum"]),
       weight_kind=st.sampled_from([None, "row", "elem", "flat"]), avg=st.sampled_from([None, 7.5]),
       seed=st.integers(0, 2**16))
def test_mmdet_focal_matches_its_formula_in_float64(n, c, gamma, alpha, reduction, weight_kind, avg, seed):
    if avg is not None and reduction == "sum":
        avg = None
    g = torch.Generator().manual_seed(seed)
    pred = (torch.randn(n, c, generator=g, dtype=F64) * 3).requires_grad_()
    target = torch.randint(0, c + 1, (n,), generator=g)  # c: background
    weight = {None: None, "row": torch.rand(n, generator=g, dtype=F64),
              "elem": torch.rand(n, c, generator=g, dtype=F64),
              "flat": torch.rand(n * c, generator=g, dtype=F64)}[weight_kind]
    got = xt.mmdet_sigmoid_focal_loss(pred, target, weight, gamma, alpha, reduction, avg, backend="reference")
    ref_pred = pred.detach().clone().requires_grad_()
    want = mmdet_reference(ref_pred, target, weight, gamma, alpha, reduction, avg)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    up = torch.rand(got.shape, generator=g, dtype=F64)
    (gp,) = torch.autograd.grad(got, pred, up)
    (wp,) = torch.autograd.grad(want, ref_pred, up)
    torch.testing.assert_close(gp, wp, rtol=1e-10, atol=1e-14)


def test_mmdet_class_weight_and_errors():
    pred = torch.randn(4, 3, dtype=F64)
    target = torch.tensor([0, 3, 2, 2])
    cw = torch.tensor([2.0, 1.0, 0.5], dtype=F64)
    got = xt.mmdet_sigmoid_focal_loss(pred, target, reduction="none", class_weight=cw, backend="reference")
    rows = torch.tensor([2.0, 1.0, 0.5, 0.5], dtype=F64)[:, None]  # background row: unweighted
    torch.testing.assert_close(got, mmdet_reference(pred, target, reduction="none") * rows, rtol=1e-13, atol=0)
    with pytest.raises(xloss.XLossIndexError, match=r"target\[1\] = 4"):
        xt.mmdet_sigmoid_focal_loss(pred, torch.tensor([0, 4, 1, 1]))
    with pytest.raises(xloss.XLossValueError, match="avg_factor"):
        xt.mmdet_sigmoid_focal_loss(pred, target, reduction="sum", avg_factor=3.0)
    with pytest.raises(xloss.XLossValueError, match="alpha"):
        xt.mmdet_sigmoid_focal_loss(pred, target, alpha=-1.0)
    with pytest.raises(xloss.XLossValueError, match="weight"):
        xt.mmdet_sigmoid_focal_loss(pred, target, torch.ones(5, dtype=F64))
