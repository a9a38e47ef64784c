"""NumPy reference formulas (float64) for the four xloss kernels.

These are the oracle every backend is tested against, and are themselves tested against
PyTorch autograd. They favour readability and numerical care over speed, and compute in
float64 whatever the input dtype. They do not validate arguments: :mod:`xloss` does that
in front of every backend.
"""

from ._common import as_f64
from .bce import bce_denominator, bce_grad, binary_cross_entropy
from .flce import (
    OnlineMaxSumOut,
    ShardStats,
    all_reduce_online_max_sum,
    combine_max_sum,
    cross_entropy,
    flce_grad,
    flce_grad_logits,
    flce_probabilities,
    fused_cross_entropy_loss_with_max_sum,
    fused_linear_online_max_sum,
    mask_as_bool,
    online_max_sum,
    pack_mask,
    pack_target_mask,
    padding_bit,
    shard_inputs,
    unpack_mask,
    vocab_shards,
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
    "OnlineMaxSumOut", "ShardStats", "all_reduce_online_max_sum", "as_f64", "bce_denominator", "bce_grad",
    "bce_with_logits", "binary_cross_entropy", "combine_max_sum", "cross_entropy", "flce_grad", "flce_grad_logits",
    "flce_probabilities", "focal_loss_eq3", "focal_loss_grad_a3", "fused_cross_entropy_loss_with_max_sum",
    "fused_linear_online_max_sum", "mask_as_bool", "nll_loss_grad", "nll_total_weight", "online_max_sum", "pack_mask",
    "pack_target_mask", "padding_bit", "shard_inputs", "sigmoid_focal_loss", "sigmoid_focal_loss_grad", "sigmoid_pair",
    "unpack_mask", "vocab_shards",
]
