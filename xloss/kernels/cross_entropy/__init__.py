"""Cross entropy from logits with class-index targets (PyTorch's ``F.cross_entropy`` with CANN's
z-loss): the forward (``cross_entropy_loss``: loss, log-probabilities, z-loss, log-sum-exp) and the
backward from the log-probabilities (``cross_entropy_loss_grad``), CANN's aclnnCrossEntropyLoss and
aclnnCrossEntropyLossGrad pair; and xloss's own fused row, the loss and its gradient from the logits in one
pass (``cross_entropy_loss_with_grad``).

Importing this package registers the rows; it imports nothing heavy (only :mod:`xloss.kernels`).
"""

from __future__ import annotations

from types import MappingProxyType

from .. import KernelSpec, register

#: the variant axes both rows declare over: what changes the computation, not just its values
_AXES = MappingProxyType({
    "weight": (False, True),
    "label_smoothing": (False, True),
    "zloss": (False, True),  # a nonzero lse_square_scale_for_zloss
    "target_dtype": ("int64", "int32"),
})

FORWARD = KernelSpec(
    name="cross_entropy_loss",
    axes=_AXES,
    primary=None,
    reduces=True,
    aliases=("ce",),
    functions=("cross_entropy_loss",),
    exports=("CrossEntropyLossOut",),
    args=".args:CrossEntropyArgs",
    validator=".validate:cross_entropy_args",
    reference="xloss.reference.cross_entropy_loss:cross_entropy_loss",
    descriptor=".conformance:FORWARD_DESCRIPTOR",
    torch=".torch_api:cross_entropy",
    torch_exports=(".torch_api:cross_entropy", ".torch_api:CrossEntropyLoss"),
    workload=".bench:forward_workload",
    bench=".bench:FORWARD_IMPLS",
    api=".api",
    package=__name__,
    order=70,
    bench_dims=2,
    bench_sizes=("8192x32000", "1024x4000"),
    bench_modes=(("forward",), ("forward",)),
    bench_weight=(0.8, 1.0),
)
GRAD = KernelSpec(
    name="cross_entropy_loss_grad",
    axes=_AXES,
    primary=None,
    reduces=True,
    aliases=("ce_grad",),
    functions=("cross_entropy_loss_grad",),
    args=".args:CrossEntropyGradArgs",
    validator=".validate:cross_entropy_grad_args",
    reference="xloss.reference.cross_entropy_loss:cross_entropy_loss_grad",
    descriptor=".conformance:GRAD_DESCRIPTOR",
    torch=".torch_api:cross_entropy",
    workload=".bench:training_workload",
    bench=".bench:TRAINING_IMPLS",
    api=".api",
    package=__name__,
    order=71,
    bench_dims=2,
    bench_sizes=("8192x32000", "1024x4000"),
    bench_weight=(1.2, 1.0),
)

#: Dense (probability) labels, loss and gradient in one call (CANN's aclnnSoftmaxCrossEntropyWithLogits,
#: TensorFlow's softmax_cross_entropy_with_logits): no weights, no reduction.
DENSE = KernelSpec(
    name="softmax_cross_entropy_with_logits",
    axes=MappingProxyType({"labels": ("dense",)}),
    primary=None,
    reduces=False,
    aliases=("softmax_ce",),
    functions=("softmax_cross_entropy_with_logits",),
    exports=("SoftmaxCrossEntropyOut",),
    args=".args:SoftmaxCrossEntropyArgs",
    validator=".validate:softmax_cross_entropy_args",
    reference="xloss.reference.cross_entropy_loss:softmax_cross_entropy_with_logits",
    descriptor=".dense_conformance:DESCRIPTOR",
    torch=".torch_api:softmax_cross_entropy_with_logits",
    torch_exports=(".torch_api:softmax_cross_entropy_with_logits",),
    workload=".bench:dense_workload",
    bench=".bench:DENSE_IMPLS",
    api=".api",
    package=__name__,
    order=72,
    bench_dims=2,
    bench_sizes=("8192x32000", "1024x4000"),
    bench_weight=(0.6, 1.0),
)

#: xloss's own fused row (no vendor publishes it): the loss and its gradient from the logits in one pass, as
#: the training step (and ``xloss.torch.cross_entropy``) wants them; no z-loss (the drop-in has none)
WITH_GRAD = KernelSpec(
    name="cross_entropy_loss_with_grad",
    axes=MappingProxyType({k: v for k, v in _AXES.items() if k != "zloss"}),
    primary=None,
    reduces=True,
    aliases=("ce_fused",),
    functions=("cross_entropy_loss_with_grad",),
    args=".args:CrossEntropyWithGradArgs",
    validator=".validate:cross_entropy_with_grad_args",
    reference="xloss.reference.cross_entropy_loss:cross_entropy_loss_with_grad",
    descriptor=".conformance:WITH_GRAD_DESCRIPTOR",
    torch=".torch_api:cross_entropy",
    workload=".bench:fused_workload",
    bench=".bench:FUSED_IMPLS",
    api=".api",
    package=__name__,
    order=73,
    bench_dims=2,
    bench_sizes=("8192x32000", "1024x4000"),
    bench_weight=(0.6, 0.5),
)

register(FORWARD, GRAD, DENSE, WITH_GRAD)
