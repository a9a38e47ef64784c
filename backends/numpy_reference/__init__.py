"""The ``reference`` backend: the float64 NumPy formulas of :mod:`xloss.reference`, behind the
backend interface. Always available; slow; rounds its float64 results once to the output dtype.
"""

from __future__ import annotations

import numpy as np

from ... import reference as ref
from ...backend import Backend, KernelCaps
from ...dtypes import FLOAT_DTYPES
from ...reference import nll as ref_nll
from ...reference.cross_entropy_loss import (
    cross_entropy_loss,
    cross_entropy_loss_grad,
    softmax_cross_entropy_with_logits,
)

_ALL = tuple(FLOAT_DTYPES)


def _store(out, values):
    with np.errstate(over="ignore", invalid="ignore"):  # rounding past the dtype's range gives inf, as it should
        out[...] = np.asarray(values).astype(out.dtype)


class ReferenceBackend(Backend):
    def __init__(self):
        super().__init__(name="reference", description="NumPy float64 reference formulas (the test oracle)")

    def capabilities(self):
        return {
            "focal_loss": KernelCaps.declare("focal_loss", dtypes=_ALL),
            "bce_grad": KernelCaps.declare("bce_grad", dtypes=_ALL),
            "nll_loss_grad": KernelCaps.declare("nll_loss_grad", dtypes=_ALL),
            "fused_linear_cross_entropy_grad": KernelCaps.declare("fused_linear_cross_entropy_grad", dtypes=_ALL),
            "fused_linear_online_max_sum": KernelCaps.declare("fused_linear_online_max_sum", dtypes=_ALL),
            "fused_cross_entropy_loss_with_max_sum": KernelCaps.declare("fused_cross_entropy_loss_with_max_sum",
                                                                        dtypes=_ALL),
            "bce_with_logits": KernelCaps.declare("bce_with_logits", dtypes=_ALL),
            # NLL and BCE forward (issue #30)
            "nll_loss": KernelCaps.declare("nll_loss", dtypes=_ALL),
            "binary_cross_entropy": KernelCaps.declare("binary_cross_entropy", dtypes=_ALL),
            "cross_entropy_loss": KernelCaps.declare("cross_entropy_loss", dtypes=_ALL),
            "cross_entropy_loss_grad": KernelCaps.declare("cross_entropy_loss_grad", dtypes=_ALL),
            "softmax_cross_entropy_with_logits": KernelCaps.declare("softmax_cross_entropy_with_logits", dtypes=_ALL),
        }

    def focal_loss(self, a):
        kw = dict(alpha=a.alpha, gamma=a.gamma, weight=a.weight, reduction=a.reduction)
        if a.loss_out is not None:
            _store(a.loss_out, ref.sigmoid_focal_loss(a.x, a.y, **kw))
        if a.grad_out is not None:
            _store(a.grad_out, ref.sigmoid_focal_loss_grad(a.x, a.y, a.grad, **kw))

    def bce_grad(self, a):
        _store(a.out, ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction,
                                   eps=a.eps, eps_mode=a.eps_mode))

    def nll_loss_grad(self, a):
        _store(a.out, ref.nll_loss_grad(a.grad, a.self, a.target, weight=a.weight, reduction=a.reduction,
                                        ignore_index=a.ignore_index, total_weight=a.total_weight))

    def fused_linear_cross_entropy_grad(self, a):
        gi, gw = ref.flce_grad(a.grad, a.input, a.weight, a.target_mask, a.masked_target,
                               logits_max=a.logits_max, sum_exp_logits=a.sum_exp_logits, softmax=a.softmax,
                               label_smoothing=a.label_smoothing, vocab_size=a.vocab_size)
        _store(a.input_grad_out, gi)
        _store(a.weight_grad_out, gw)

    def fused_linear_online_max_sum(self, a):
        r = ref.fused_linear_online_max_sum(a.input, a.weight, a.target, a.vocab_start, a.vocab_end)
        for out, value in ((a.logits_max_out, r.logits_max_local), (a.sum_exp_out, r.sum_exp_logits_local),
                           (a.predicted_out, r.predicted_logits_local), (a.masked_target_out, r.masked_target)):
            _store(out, value)
        if a.mask_format == "bitpacked":
            a.target_mask_out[...] = r.target_mask
        else:
            a.target_mask_out[...] = (a.target < a.vocab_start) | (a.target >= a.vocab_end)
        if a.logits_out is not None:
            _store(a.logits_out, r.vocab_parallel_logits)

    def fused_cross_entropy_loss_with_max_sum(self, a):
        loss, softmax = ref.fused_cross_entropy_loss_with_max_sum(a.logits_max, a.sum_exp_logits, a.predicted_logits,
                                                                  a.label_smoothing, a.vocab_parallel_logits)
        _store(a.loss_out, loss)
        if a.softmax_out is not None:
            _store(a.softmax_out, softmax)

    def bce_with_logits(self, a):
        from ...reference import bce_logits

        kw = dict(weight=a.weight, pos_weight=a.pos_weight, reduction=a.reduction)
        if a.loss_out is not None:
            _store(a.loss_out, bce_logits.bce_with_logits_loss(a.x, a.y, **kw))
        if a.grad_out is not None:
            _store(a.grad_out, bce_logits.bce_with_logits_grad(a.x, a.y, a.grad, **kw))

    # -- NLL and BCE forward (issue #30)
    def nll_loss(self, a):
        loss, total_weight = ref_nll.nll_loss(a.self, a.target, weight=a.weight, reduction=a.reduction,
                                              ignore_index=a.ignore_index)
        _store(a.out, loss)
        _store(a.total_weight_out, total_weight)

    def binary_cross_entropy(self, a):
        _store(a.out, ref.binary_cross_entropy(a.x, a.y, weight=a.weight, reduction=a.reduction))

    def cross_entropy_loss(self, a):
        r = cross_entropy_loss(a.input, a.target, weight=a.weight, reduction=a.reduction, ignore_index=a.ignore_index,
                               label_smoothing=a.label_smoothing, lse_square_scale_for_zloss=a.zloss_scale)
        for out, value in ((a.loss_out, r.loss), (a.log_prob_out, r.log_prob), (a.zloss_out, r.zloss),
                           (a.lse_out, r.lse)):
            if out is not None:
                _store(out, value)

    def cross_entropy_loss_grad(self, a):
        _store(a.out, cross_entropy_loss_grad(a.grad, a.log_prob, a.target, weight=a.weight, reduction=a.reduction,
                                              ignore_index=a.ignore_index, label_smoothing=a.label_smoothing,
                                              lse_square_scale_for_zloss=a.zloss_scale, grad_zloss=a.grad_zloss,
                                              lse_for_zloss=a.lse_for_zloss))

    def softmax_cross_entropy_with_logits(self, a):
        loss, backprop = softmax_cross_entropy_with_logits(a.features, a.labels)
        _store(a.loss_out, loss)
        _store(a.backprop_out, backprop)


def make_backend(**options) -> ReferenceBackend:
    if options:
        raise TypeError(f"the reference backend takes no options, got {sorted(options)}")
    return ReferenceBackend()
