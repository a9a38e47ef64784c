"""mmdetection's sigmoid focal loss (``mmdet.models.losses.focal_loss.sigmoid_focal_loss``) on an xloss kernel.

mmdetection's semantics, which differ from torchvision's:

* ``target`` holds class indices (N,), with ``num_classes`` (= ``pred.shape[1]``) meaning
  background: that row is negative for every class (mmcv's ``sigmoid_focal_loss`` op);
* ``(gamma, alpha)`` in that order after ``weight``; ``alpha`` weighs positives, ``1 - alpha``
  negatives (no "negative alpha disables" as in torchvision: it must lie in [0, 1]);
* ``weight``: per sample (N,) or per element ((N, C) or flattened (N*C,)), multiplying the
  elementwise loss before the reduction;
* ``reduction="mean"`` averages over all N*C elements; with ``avg_factor`` the sum is divided
  by ``avg_factor + eps`` (float32 eps) instead; ``"sum"`` with ``avg_factor`` is an error;
  ``"none"`` returns the (N, C) weighted losses.

``class_weight`` (C,) is mmcv's per-class weight, indexed by each row's target class (mmcv's
kernel reads ``weight[target]``); background rows, for which mmcv would read past the end, are
left unweighted here (ours).
"""

from __future__ import annotations

import torch

from ..errors import XLossValueError
from . import _checks as checks
from .focal import sigmoid_focal_loss

_EPS = float(torch.finfo(torch.float32).eps)


def _elementwise_weight(weight, n: int, classes: int, pred):
    weight = checks.same_device(checks.float_tensor(weight, "weight"), "weight", pred, "pred")
    checks.no_grad_required(weight, "weight", "mmdet_sigmoid_focal_loss gives no gradient w.r.t. the weight")
    if tuple(weight.shape) == (n, classes):
        return weight
    if weight.ndim == 1 and weight.shape[0] == n:
        return weight.reshape(n, 1)
    if weight.numel() == n * classes:
        return weight.reshape(n, classes)
    raise XLossValueError(f"weight must have shape ({n},) (per sample), ({n}, {classes}) or ({n * classes},) "
                          f"(per element); got {checks.shape_str(weight.shape)}")


def mmdet_sigmoid_focal_loss(pred, target, weight=None, gamma: float = 2.0, alpha: float = 0.25,
                             reduction: str = "mean", avg_factor=None, *, class_weight=None, backend=None):
    """mmdetection's ``sigmoid_focal_loss(pred, target, weight, gamma, alpha, reduction, avg_factor)``.

    ``pred``: (N, C) logits; ``target``: (N,) class indices in [0, C] (C = background).
    """
    pred = checks.float_tensor(pred, "pred", backend)
    if pred.ndim != 2:
        raise XLossValueError(f"pred must have shape (N, C); got {checks.shape_str(pred.shape)}")
    n, classes = pred.shape
    target = checks.same_device(checks.index_tensor(target, "target", backend), "target", pred, "pred")
    if tuple(target.shape) != (n,):
        raise XLossValueError(f"target must hold one class index per row, shape ({n},); "
                              f"got {checks.shape_str(target.shape)}")
    checks.check_class_indices(target, classes + 1, -1)  # C itself is the background class
    reduction = checks.reduction(reduction)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0.0 <= alpha <= 1.0:
        raise XLossValueError(f"alpha must be in [0, 1] (mmdetection weighs positives by alpha, negatives by "
                              f"1 - alpha); got {alpha!r}")
    if avg_factor is not None and reduction == "sum":
        raise XLossValueError('avg_factor can not be used with reduction="sum"')
    t = target.to(torch.int64)
    onehot = (t[:, None] == torch.arange(classes, device=t.device)).to(pred.dtype)  # background: all zero
    w = None if weight is None else _elementwise_weight(weight, n, classes, pred)
    if class_weight is not None:
        class_weight = checks.same_device(checks.float_tensor(class_weight, "class_weight"), "class_weight", pred,
                                          "pred")
        if tuple(class_weight.shape) != (classes,):
            raise XLossValueError(f"class_weight must have shape ({classes},); "
                                  f"got {checks.shape_str(class_weight.shape)}")
        checks.no_grad_required(class_weight, "class_weight", "it is a constant")
        per_row = torch.cat([class_weight, class_weight.new_ones(1)])[t].reshape(n, 1)  # background: 1
        w = per_row if w is None else w * per_row
    kernel_reduction = "sum" if avg_factor is not None and reduction == "mean" else reduction
    loss = sigmoid_focal_loss(pred, onehot, alpha, gamma, kernel_reduction, weight=w, backend=backend)
    if kernel_reduction != reduction:
        loss = loss / (avg_factor + _EPS)
    return loss
