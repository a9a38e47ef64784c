"""``xloss.torch.cross_entropy`` / ``CrossEntropyLoss``: drop-ins for PyTorch's, forward and backward
on an xloss backend (``torch.ops.xloss.cross_entropy_loss_*`` custom ops underneath).

Class-index targets run on the kernel: (N, C) with (N), (C) with (), and (N, C, d1, ..., dk) with
(N, d1, ..., dk) (the class axis moved last, every position a row, as PyTorch defines it).
Probability targets (a float target of the input's shape) are not class indices: they take
PyTorch's own ``F.cross_entropy`` (a correct result, not this kernel's). The gradient w.r.t.
``weight`` is not computed (a weight that requires grad is refused), as for xloss's NLL loss.
Under CPU autocast 16-bit logits are computed in float32 and the loss is float32, as PyTorch's.
With a gradient wanted, the forward runs xloss's fused row (``cross_entropy_loss_with_grad``: the loss
and the gradient for upstream gradient 1 from one pass over the logits) and saves only that gradient:
one (N, C) buffer a step, as PyTorch's own, from :mod:`xloss.torch.grad_buffers` (a large one is reused
once no tensor holds it: no fresh pages to fault in every step). In eager use on CPU tensors the backward
hands it on as it is for the scalar 1 that ``loss.backward()`` passes (no pass over memory) and scales it
in place otherwise; it also keeps a reference to the logits, from which a second backward through a retained
graph recomputes a gradient already scaled (so, as for any op that saves its input, modifying the
logits in place before the backward is refused by autograd). Traced (``torch.compile``) and functorch
backwards multiply out of place.
"""

from __future__ import annotations

import torch

_WHAT = "xloss.torch.cross_entropy"


def _rows(input, target, weight, ignore_index, reduction, label_smoothing, key):
    if checks.wants_derivative(input):
        return _CrossEntropyFunction.apply(input, target, weight, ignore_index, reduction, label_smoothing, key)[0]
    return ops.call(torch_ops.cross_entropy_loss_forward, input, target, weight, ignore_index, reduction,
                    label_smoothing, False, key)[0]


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0, *, backend=None):
    """``torch.nn.functional.cross_entropy`` (same arguments and defaults; ``size_average`` and
    ``reduce`` are PyTorch's deprecated spellings of ``reduction``) with ``backend=``."""
    if size_average is not None or reduce is not None:
        reduction = torch.nn.modules.loss._Reduction.legacy_get_string(size_average, reduce)
    input = checks.float_tensor(input, "input", backend)
    target = checks.same_device(checks.tensor(target, "target", backend), "target", input, "input")
    reduction = checks.reduction(reduction)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float, torch.SymFloat)):
        raise checks.XLossTypeError(f"label_smoothing must be a float; got {type(label_smoothing).__name__}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise checks.XLossValueError(f"label_smoothing must lie in [0, 1]; got {label_smoothing}")
    if weight is not None:
        weight = checks.same_device(checks.float_tensor(weight, "weight", backend), "weight", input, "input")
    if target.is_floating_point():  # probability targets: not this kernel's; PyTorch's own, correct path
        return torch.nn.functional.cross_entropy(input, target, weight, ignore_index=ignore_index,
                                                 reduction=reduction, label_smoothing=label_smoothing)
    target = checks.index_tensor(target, "target", backend)
    if input.ndim == 0:
        raise checks.XLossValueError("input must have shape (N, C), (C) or (N, C, d1, ..., dk); got ()")
    expected = (input.shape[0],) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
    if tuple(target.shape) != expected:
        raise checks.XLossValueError(f"target must have shape {checks.shape_str(expected)} for input of shape "
                                     f"{checks.shape_str(input.shape)}; got {checks.shape_str(target.shape)}")
    ignore_index = checks.int64(ignore_index, "ignore_index")
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    if weight is not None:
        if tuple(weight.shape) != (classes,):
            raise checks.XLossValueError(f"weight must have shape ({classes},), one per class; "
                                         f"got {checks.shape_str(weight.shape)}")
        checks.no_grad_required(weight, "weight", "cross_entropy gives no gradient w.r.t. the class weights")
    input, weight = checks.autocast_float32(input), checks.autocast_float32(weight)  # as torch's, under autocast
    key = ops.backend_key(backend)
    target = target.to(torch.int64)
    if input.ndim == 2:
        return _rows(input, target, weight, ignore_index, reduction, float(label_smoothing), key)
    rows = input.reshape(1, classes) if input.ndim == 1 else input.movedim(1, -1).reshape(-1, classes)
    loss = _rows(rows, target.reshape(-1), weight, ignore_index, reduction, float(label_smoothing), key)
    return loss.reshape(target.shape) if reduction == "none" else loss


class CrossEntropyLoss(torch.nn.Module):
    """:func:`cross_entropy` as a module (``torch.nn.CrossEntropyLoss`` with ``backend=``)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction: str = "mean",
                 label_smoothing: float = 0.0, *, backend=None):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = torch.nn.modules.loss._Reduction.legacy_get_string(size_average, reduce)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, checks.reduction(reduction)
        self.label_smoothing, self.backend = label_smoothing, backend

    def forward(self, input, target):
        return cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction,
                             label_smoothing=self.label_smoothing, backend=self.backend)



def softmax_cross_entropy_with_logits(features, labels, *, backend=None):
    """``(loss, backprop)`` of (N, C) logits with dense labels of the same shape on an xloss backend, as
    TensorFlow's op and CANN's aclnnSoftmaxCrossEntropyWithLogits return them: the loss per row and
    ``softmax(features) - labels``. Both computed at once, outside autograd (the gradient is an output)."""
    features = checks.float_tensor(features, "features", backend)
    labels = checks.same_device(checks.float_tensor(labels, "labels", backend), "labels", features, "features")
    with torch.no_grad():
        r = api.softmax_cross_entropy_with_logits(features.detach(), labels.detach(), backend=backend)
    return r.loss, r.backprop

# Imported after the exports above: ``xloss.torch`` reads them (the row's torch_exports) while it loads,
# and importing this module first loads ``xloss.torch``. ``ops.checks`` holds xloss.torch's argument rules.
from xloss.torch import ops  # noqa: E402

from . import api, torch_ops  # noqa: E402

checks = ops.checks


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(x, target, weight, ignore_index, reduction, label_smoothing, backend):
        return ops.call(torch_ops.cross_entropy_loss_with_grad, x, target, weight, ignore_index, reduction,
                        label_smoothing, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, target, weight, ignore_index, reduction, label_smoothing, backend = inputs
        ctx.params = (ignore_index, reduction, label_smoothing, backend)
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)
        # x too (a reference, no copy): a backward through a retained graph after dx was scaled in place
        # recomputes dx from it
        ctx.save_for_backward(output[1], target, weight, x)
        ctx.dx_spent = False

    @staticmethod
    @checks.first_order_only(_WHAT)
    def backward(ctx, grad, _):
        if grad is None:
            return (None,) * 7
        dx, target, weight, x = ctx.saved_tensors
        reduction = ctx.params[1]
        if ops.runs_directly((grad, dx, target, weight)):
            # dx (upstream gradient 1) is this Function's own buffer, never handed out: for the scalar 1 it is
            # the gradient as it is (no pass); otherwise it is scaled in place (one pass), and a later backward
            # through a retained graph finds it spent and recomputes it from x.
            if ctx.dx_spent:
                dx = ops.call(torch_ops.cross_entropy_loss_with_grad, x, target, weight, *ctx.params)[1]
            g = checks.scalar_value(grad)
            if g != 1.0:
                ctx.dx_spent = True
                with torch.autograd._unsafe_preserve_version_counter(dx):  # the saved dx stays unpackable
                    dx.mul_(g if g is not None else grad.detach().unsqueeze(-1))
        else:  # traced, functorch or another device: no mutation, the product as an op
            dx = dx * (grad.unsqueeze(-1) if reduction == "none" else grad)
        return checks.first_order_result(_WHAT, dx, x), None, None, None, None, None, None
