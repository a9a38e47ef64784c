"""The ``reference`` backend: the float64 NumPy formulas of :mod:`xloss.reference`, behind the
backend interface. Always available; slow; rounds its float64 results once to the output dtype.
"""

from __future__ import annotations

import numpy as np

from ... import reference as ref
from ...backend import Backend, KernelCaps
from ...dtypes import FLOAT_DTYPES
from ...kernels.bce import FORWARD as BCE
from ...kernels.bce import ROW as BCE_GRAD
from ...kernels.bce_with_logits import ROW as BCE_WITH_LOGITS
from ...kernels.cross_entropy import DENSE as SOFTMAX_CROSS_ENTROPY
from ...kernels.cross_entropy import FORWARD as CROSS_ENTROPY
from ...kernels.cross_entropy import GRAD as CROSS_ENTROPY_GRAD
from ...kernels.cross_entropy import WITH_GRAD as CROSS_ENTROPY_WITH_GRAD
from ...kernels.flce import FLCE_GRAD, LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM
from ...kernels.focal import ROW as FOCAL
from ...kernels.nll import FORWARD as NLL
from ...kernels.nll import ROW as NLL_GRAD
from ...reference import cross_entropy_loss as ref_ce
from ...reference import nll as ref_nll

_ALL = tuple(FLOAT_DTYPES)


def _store(out, values):
    with np.errstate(over="ignore", invalid="ignore"):  # rounding past the dtype's range gives inf, as it should
        out[...] = np.asarray(values).astype(out.dtype)


# -- the kernels: function(backend, args), each writing its row's outputs
def focal_loss(_backend, a):
    kw = dict(alpha=a.alpha, gamma=a.gamma, weight=a.weight, reduction=a.reduction)
    if a.loss_out is not None:
        _store(a.loss_out, ref.sigmoid_focal_loss(a.x, a.y, **kw))
    if a.grad_out is not None:
        _store(a.grad_out, ref.sigmoid_focal_loss_grad(a.x, a.y, a.grad, **kw))


def bce_grad(_backend, a):
    _store(a.out, ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction,
                               eps=a.eps, eps_mode=a.eps_mode))


def nll_loss_grad(_backend, a):
    _store(a.out, ref.nll_loss_grad(a.grad, a.self, a.target, weight=a.weight, reduction=a.reduction,
                                    ignore_index=a.ignore_index, total_weight=a.total_weight))


def fused_linear_cross_entropy_grad(_backend, a):
    gi, gw = ref.flce_grad(a.grad, a.input, a.weight, a.target_mask, a.masked_target,
                           logits_max=a.logits_max, sum_exp_logits=a.sum_exp_logits, softmax=a.softmax,
                           label_smoothing=a.label_smoothing, vocab_size=a.vocab_size)
    _store(a.input_grad_out, gi)
    _store(a.weight_grad_out, gw)


def fused_linear_online_max_sum(_backend, a):
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


def fused_cross_entropy_loss_with_max_sum(_backend, a):
    loss, softmax = ref.fused_cross_entropy_loss_with_max_sum(a.logits_max, a.sum_exp_logits, a.predicted_logits,
                                                              a.label_smoothing, a.vocab_parallel_logits)
    _store(a.loss_out, loss)
    if a.softmax_out is not None:
        _store(a.softmax_out, softmax)


def bce_with_logits(_backend, a):
    from ...reference import bce_logits

    kw = dict(weight=a.weight, pos_weight=a.pos_weight, reduction=a.reduction)
    if a.loss_out is not None:
        _store(a.loss_out, bce_logits.bce_with_logits_loss(a.x, a.y, **kw))
    if a.grad_out is not None:
        _store(a.grad_out, bce_logits.bce_with_logits_grad(a.x, a.y, a.grad, **kw))


# NLL and BCE forward (issue #30)
def nll_loss(_backend, a):
    loss, total_weight = ref_nll.nll_loss(a.self, a.target, weight=a.weight, reduction=a.reduction,
                                          ignore_index=a.ignore_index)
    _store(a.out, loss)
    _store(a.total_weight_out, total_weight)


def binary_cross_entropy(_backend, a):
    _store(a.out, ref.binary_cross_entropy(a.x, a.y, weight=a.weight, reduction=a.reduction))


def cross_entropy_loss(_backend, a):
    r = ref_ce.cross_entropy_loss(a.input, a.target, weight=a.weight, reduction=a.reduction,
                                  ignore_index=a.ignore_index, label_smoothing=a.label_smoothing,
                                  lse_square_scale_for_zloss=a.zloss_scale)
    for out, value in ((a.loss_out, r.loss), (a.log_prob_out, r.log_prob), (a.zloss_out, r.zloss),
                       (a.lse_out, r.lse)):
        if out is not None:
            _store(out, value)


def cross_entropy_loss_grad(_backend, a):
    _store(a.out, ref_ce.cross_entropy_loss_grad(a.grad, a.log_prob, a.target, weight=a.weight,
                                                 reduction=a.reduction, ignore_index=a.ignore_index,
                                                 label_smoothing=a.label_smoothing,
                                                 lse_square_scale_for_zloss=a.zloss_scale, grad_zloss=a.grad_zloss,
                                                 lse_for_zloss=a.lse_for_zloss))


def softmax_cross_entropy_with_logits(_backend, a):
    loss, backprop = ref_ce.softmax_cross_entropy_with_logits(a.features, a.labels)
    _store(a.loss_out, loss)
    _store(a.backprop_out, backprop)


#: ``{row: function(backend, args)}``, in the order ``xloss backends`` lists them
IMPLEMENTATIONS = {
    FOCAL: focal_loss,
    BCE_GRAD: bce_grad,
    NLL_GRAD: nll_loss_grad,
    FLCE_GRAD: fused_linear_cross_entropy_grad,
    ONLINE_MAX_SUM: fused_linear_online_max_sum,
    LOSS_WITH_MAX_SUM: fused_cross_entropy_loss_with_max_sum,
    BCE_WITH_LOGITS: bce_with_logits,
    # NLL and BCE forward (issue #30)
    NLL: nll_loss,
    BCE: binary_cross_entropy,
}
# -- cross entropy (xloss/kernels/cross_entropy)
IMPLEMENTATIONS[CROSS_ENTROPY] = cross_entropy_loss
IMPLEMENTATIONS[CROSS_ENTROPY_GRAD] = cross_entropy_loss_grad
IMPLEMENTATIONS[SOFTMAX_CROSS_ENTROPY] = softmax_cross_entropy_with_logits


# -- cross entropy, xloss's fused loss and gradient (xloss/kernels/cross_entropy)
def cross_entropy_loss_with_grad(_backend, a):
    loss, dx = ref_ce.cross_entropy_loss_with_grad(a.input, a.target, a.grad, weight=a.weight, reduction=a.reduction,
                                                   ignore_index=a.ignore_index, label_smoothing=a.label_smoothing)
    _store(a.loss_out, loss)
    _store(a.grad_out, dx)


IMPLEMENTATIONS[CROSS_ENTROPY_WITH_GRAD] = cross_entropy_loss_with_grad

#: the reference computes every kernel it implements for every dtype, whatever its variant
_CAPS = {row.name: KernelCaps.declare(row.name, dtypes=_ALL) for row in IMPLEMENTATIONS}


class ReferenceBackend(Backend):
    implementations = IMPLEMENTATIONS

    def __init__(self):
        super().__init__(name="reference", description="NumPy float64 reference formulas (the test oracle)")

    def capabilities(self):
        return dict(_CAPS)


def make_backend(**options) -> ReferenceBackend:
    if options:
        raise TypeError(f"the reference backend takes no options, got {sorted(options)}")
    return ReferenceBackend()
