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

Large gradient outputs come from a small reuse pool (:mod:`xloss.torch.grad_buffers`: a buffer is handed
out again only once no tensor holds it); ``XLOSS_TORCH_POOL=0`` turns it off, :func:`release_buffers`
gives its memory back.
"""

from ..kernels import KERNELS as _KERNELS
from . import ops  # noqa: F401  (the custom-op registry the families' ops join)
from .chunking import default_chunk_size, default_vocab_chunk_size
from .distributed import shard_vocab, vocab_shard_range
from .grad_buffers import release_buffers

#: what each kernel family adds here (its row's ``torch_exports``); loading them registers the families' ops
_FAMILY_EXPORTS = {link.rpartition(":")[2]: row.resolve(link)
                   for row in _KERNELS.values() for link in row.torch_exports}
globals().update(_FAMILY_EXPORTS)

__all__ = ["default_chunk_size", "default_vocab_chunk_size", "release_buffers", "shard_vocab", "vocab_shard_range",
           *_FAMILY_EXPORTS]
