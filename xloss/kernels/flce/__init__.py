"""The fused linear-cross-entropy family: the FLCE gradients of one vocabulary shard, and the
vocabulary-parallel forward before (online max/sum) and after (loss with max/sum) the caller's all-reduce.

Importing this package registers its rows and imports nothing heavy (only :mod:`xloss.kernels`); the
links below name the family's modules (``.args``, ``.validate``, ``.api``, ``.conformance``,
``.vocab_parallel_conformance``, ``.bench``, ``.training``) and load them on first use.
"""

from types import MappingProxyType

from xloss.kernels import KernelSpec, register

FLCE_GRAD = KernelSpec(
    name="fused_linear_cross_entropy_grad",
    axes=MappingProxyType({
        "mode": ("softmax", "recompute"),
        "mask": ("bool", "bitpacked"),
        "label_smoothing": (False, True),
    }),
    primary="mode",
    reduces=False,
    aliases=("flce",),
    api=".api",
    functions=("fused_linear_cross_entropy_grad",),
    args=".args:FLCEArgs",
    validator=".validate:flce_args",
    reference="xloss.reference.flce",
    descriptor=".conformance:DESCRIPTOR",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    torch_exports=("xloss.torch.flce:fused_linear_cross_entropy", "xloss.torch.flce:FusedLinearCrossEntropyLoss",
                   "xloss.torch.flce:FusedLinearCrossEntropyOutput", "xloss.torch.hf:apply_to_causal_lm",
                   "xloss.torch.hf:remove_from_causal_lm",
                   "xloss.torch.liger_compat:LigerCompatFusedLinearCrossEntropyLoss"),
    workload=".bench:flce",
    bench=".bench:FLCE_IMPLS",
    bench_steps=(".training:LM_STEP",),
    bench_weight=(2.5, 1.0),  # the big GEMMs
    package=__name__,
    order=40,
    bench_dims=3,
    bench_sizes=("2048x1024x32000", "256x256x4000"),
)
#: The vocabulary-parallel forward, before the caller's all-reduce (CANN's aclnnFusedLinearOnlineMaxSum).
ONLINE_MAX_SUM = KernelSpec(
    name="fused_linear_online_max_sum",
    axes=MappingProxyType({
        "logits": (False, True),  # whether the shard's logits (BT, V) are returned too
        "mask": ("bitpacked", "bool"),  # the mask produced: CANN's bits (padding: target 0's mask), or a byte per token
        "target_dtype": ("int64", "int32"),
    }),
    primary=None,
    reduces=False,
    aliases=("online_max_sum", "vp_max_sum"),
    api=".api",
    functions=("fused_linear_online_max_sum",),
    args=".args:OnlineMaxSumArgs",
    validator=".validate:online_max_sum_args",
    reference="xloss.reference.flce:fused_linear_online_max_sum",
    descriptor=".vocab_parallel_conformance:ONLINE_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload=".bench:online_max_sum",
    bench=".bench:ONLINE_MAX_SUM_IMPLS",
    exports=("OnlineMaxSum",),
    bench_weight=(1.2, 1.0),
    package=__name__,
    order=50,
    bench_dims=3,
    bench_sizes=("2048x1024x32000", "256x256x4000"),
    refusals=MappingProxyType({"hidden": "input with hidden size H={value} ({supported})"}),
)
#: The vocabulary-parallel loss, after the all-reduce (CANN's aclnnFusedCrossEntropyLossWithMaxSum).
LOSS_WITH_MAX_SUM = KernelSpec(
    name="fused_cross_entropy_loss_with_max_sum",
    axes=MappingProxyType({"softmax": (False, True)}),  # whether the softmax (BT, V) is computed too
    primary=None,
    reduces=False,
    aliases=("loss_with_max_sum", "vp_loss"),
    api=".api",
    functions=("fused_cross_entropy_loss_with_max_sum",),
    args=".args:LossWithMaxSumArgs",
    validator=".validate:loss_with_max_sum_args",
    reference="xloss.reference.flce:fused_cross_entropy_loss_with_max_sum",
    descriptor=".vocab_parallel_conformance:LOSS_WITH_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload=".bench:loss_with_max_sum",
    bench=".bench:LOSS_WITH_MAX_SUM_IMPLS",
    exports=("LossWithMaxSum",),
    bench_weight=(0.7, 1.0),
    package=__name__,
    order=60,
    bench_dims=2,
    bench_sizes=("2048x32000", "256x4000"),
)

register(FLCE_GRAD, ONLINE_MAX_SUM, LOSS_WITH_MAX_SUM)
