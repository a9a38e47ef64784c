"""NumPy reference formulas (float64) for the four xloss kernels.

These are the oracle every backend is tested against, and are themselves tested against
PyTorch autograd. They favour readability and numerical care over speed, and compute in
float64 whatever the input dtype. They do not validate arguments: :mod:`xloss` does that
in front of every backend.
"""

from .bce import bce_denominator, bce_grad, binary_cross_entropy
from .flce import (
    ShardStats,
    combine_max_sum,
    cross_entropy,
    flce_grad,
    flce_grad_logits,
    flce_probabilities,
    mask_as_bool,
    online_max_sum,
    pack_mask,
    shard_inputs,
    unpack_mask,
)
from .focal import (
    bce_with_logits,
    focal_loss_eq3,
    focal_loss_grad_a3,
    sigmoid_focal_loss,
    sigmoid_focal_loss_grad,
    sigmoid_pair,
)
from .nll import nll_loss_grad, nll_total_weight

__all__ = [
    "ShardStats", "bce_denominator", "bce_grad", "bce_with_logits", "binary_cross_entropy",
    "combine_max_sum", "cross_entropy", "flce_grad", "flce_grad_logits", "flce_probabilities",
    "focal_loss_eq3", "focal_loss_grad_a3", "mask_as_bool", "nll_loss_grad", "nll_total_weight",
    "online_max_sum", "pack_mask", "shard_inputs", "sigmoid_focal_loss", "sigmoid_focal_loss_grad",
    "sigmoid_pair", "unpack_mask",
]
