"""The paper's appendix A.1 focal loss (torchvision's ``sigmoid_focal_loss``): the eager PyTorch
baseline every focal-loss comparison in xloss is made against (benchmarks, tests, examples)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def paper_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2, reduction: str = "none",
                     dtype=torch.float32):
    """Appendix A.1 of the paper, verbatim but for ``dtype``: A.1 computes in float32; pass
    ``dtype=None`` to keep the inputs' dtype (float64 comparisons)."""
    if dtype is not None:
        inputs = inputs.to(dtype=dtype)
        targets = targets.to(dtype=dtype)
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss
