"""The public function of the NLL-loss backward (``xloss.nll_loss_grad``)."""

from __future__ import annotations

from xloss import dispatch
from xloss.containers import from_numpy, kind_of

from .validate import nll_args

__all__ = ["nll_loss_grad"]


def nll_loss_grad(grad, self, target, *, weight=None, reduction="mean", ignore_index=-100, total_weight=None,
                  backend=None, out=None):
    """Backward of NLL loss w.r.t. the log-probabilities ``self`` ((N, C) or (C)); PyTorch semantics."""
    a = nll_args(grad, self, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                 total_weight=total_weight, out=out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(self))
