"""PyTorch integration: autograd functions and ``nn.Module``s whose kernels run on an xloss backend.

    >>> import torch, xloss.torch as xt
    >>> loss_fn = xt.SigmoidFocalLoss(alpha=0.25, gamma=2.0, reduction="mean", backend="cpu")
    >>> lm_loss = xt.FusedLinearCrossEntropyLoss(ignore_index=-100)   # loss_fn(hidden, lm_head.weight, target)
    >>> liger_style = xt.LigerCompatFusedLinearCrossEntropyLoss()     # loss_fn(lm_head.weight, hidden, target)

Imported on demand (``import xloss`` does not import torch). Every function takes
``backend=`` (an xloss backend name or object) and float16/bfloat16/float32/float64 tensors
on the CPU (the ``Backend.devices`` a backend declares); arithmetic and sums are float32 or wider
and results come back in the input's dtype.

The kernels are ``torch.library`` custom ops (``torch.ops.xloss.*``, :mod:`xloss.torch.ops`):
``torch.compile(fullgraph=True)`` and ``torch.func.grad`` trace through them. Model patches:
:func:`apply_to_causal_lm` (Hugging Face causal LMs), :func:`apply_to_detection` (torchvision
RetinaNet/FCOS); :func:`mmdet_sigmoid_focal_loss` has mmdetection's semantics.
"""

from . import ops  # noqa: F401  (registers the torch.ops.xloss custom ops)
from .bce import BCELoss, binary_cross_entropy
from .chunking import default_chunk_size, default_vocab_chunk_size
from .detection import apply_to_detection
from .distributed import shard_vocab, vocab_shard_range
from .flce import FusedLinearCrossEntropyLoss, FusedLinearCrossEntropyOutput, fused_linear_cross_entropy
from .focal import SigmoidFocalLoss, sigmoid_focal_loss
from .hf import apply_to_causal_lm, remove_from_causal_lm
from .liger_compat import LigerCompatFusedLinearCrossEntropyLoss
from .mmdet import mmdet_sigmoid_focal_loss
from .nll import NLLLoss, nll_loss

__all__ = [
    "apply_to_causal_lm", "apply_to_detection", "mmdet_sigmoid_focal_loss", "remove_from_causal_lm",
    "BCELoss", "FusedLinearCrossEntropyLoss", "FusedLinearCrossEntropyOutput", "LigerCompatFusedLinearCrossEntropyLoss",
    "NLLLoss", "SigmoidFocalLoss", "binary_cross_entropy",
    "default_chunk_size", "default_vocab_chunk_size", "fused_linear_cross_entropy", "nll_loss", "shard_vocab",
    "sigmoid_focal_loss", "vocab_shard_range",
]
