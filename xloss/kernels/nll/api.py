"""The public functions of the NLL loss: ``xloss.nll_loss_grad`` (backward) and ``xloss.nll_loss`` (forward)."""

from __future__ import annotations

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .forward_validate import nll_loss_args
from .validate import nll_args

__all__ = ["nll_loss", "nll_loss_grad"]


def nll_loss_grad(grad, self, target, *, weight=None, reduction="mean", ignore_index=-100, total_weight=None,
                  backend=None, out=None):
    """Backward of NLL loss w.r.t. the log-probabilities ``self`` ((C), (N, C) or (N, C, d1, ..., dk)); PyTorch
    semantics. ``grad``: a scalar, or for ``none`` on batched input an array of target's shape."""
    a = nll_args(grad, self, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                 total_weight=total_weight, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(self))


def nll_loss(self, target, *, weight=None, reduction="mean", ignore_index=-100, backend=None, out=None,
             total_weight_out=None):
    """``(loss, total_weight)`` of the negative log-likelihood loss of log-probabilities ``self``
    ((C), (N, C) or (N, C, d1, ..., dk)); PyTorch's ``nll_loss_forward`` semantics.

    ``loss``: target's shape for ``none``, else 0-d; ``mean`` divides the sum by ``total_weight``, the sum
    of the class weights of the positions not ignored (NaN when that is 0). ``total_weight`` is 0-d, in
    self's dtype; for ``none`` on batched input it is 0, as PyTorch's.
    """
    a = nll_loss_args(self, target, weight=weight, reduction=reduction, ignore_index=ignore_index, out=out,
                      total_weight_out=total_weight_out)
    dispatch.run(a, backend, *(o for o in (out, total_weight_out) if o is not None))
    kind = kind_of(self)
    return (out if out is not None else from_numpy(a.out, kind),
            total_weight_out if total_weight_out is not None else from_numpy(a.total_weight_out, kind))
