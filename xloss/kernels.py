"""The kernel table: one row per kernel, and the variant axes a backend declares support for.

A *variant axis* is a choice that changes what a backend must compute (not merely the
values it is given): the focal mode, the BCE epsilon form, whether a weight is present,
the FLCE mode and mask format, whether focal targets are soft or binary (an ABI with an integer
one-hot target, such as DrivingSDK's, cannot express soft ones). Capabilities (:class:`xloss.backend.KernelCaps`) are
declared over exactly these axes, and the conformance suite enumerates them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

REDUCTIONS = ("none", "mean", "sum")
#: Vendor reduction codes (Ascend and FT78NE agree).
REDUCTION_CODES = MappingProxyType({"none": 0, "mean": 1, "sum": 2})


@functools.cache
def _parameters(functions: tuple) -> frozenset:
    """Read once per row (a case file may hold thousands of cases)."""
    api = importlib.import_module("xloss.api")
    names = {p for fn in functions for p in inspect.signature(getattr(api, fn)).parameters}
    return frozenset(n for n in names if n != "backend" and n != "out" and not n.endswith("_out"))


@dataclass(frozen=True)
class KernelSpec:
    """One row per kernel (PyTorch OpInfo's idea): everything that knows a kernel exists reads it here.

    Dispatch (``Backend.run`` calls the backend's method named ``name``), ``xloss backends``,
    ``xloss check`` (``descriptor``), ``xloss bench`` (``workload``, ``bench_dims``, sizes), the CLI
    aliases and the generic tests are built from the rows. The links are ``"module:attribute"``
    strings, loaded on first use with :meth:`load`, so this module imports nothing heavy and
    everything may import it.
    """

    name: str
    axes: Mapping[str, tuple]  # axis -> every value it can take
    primary: str | None  # the axis reports break results down by ("mode")
    reduces: bool  # whether the kernel takes a reduction
    aliases: tuple[str, ...]  # short names for the CLI and xloss bench
    functions: tuple[str, ...]  # the public functions (``xloss.<name>``) that run it
    args: str  # the Args type a backend's method receives (:mod:`xloss.kernel_args`)
    validator: str  # caller's arguments -> Args (:mod:`xloss.validation`)
    reference: str  # the float64 formulas (:mod:`xloss.reference`)
    descriptor: str  # the conformance descriptor (:mod:`xloss.conformance`)
    torch: str  # the PyTorch entry point (:mod:`xloss.torch`)
    workload: str  # (mode, size, dtype, rng) -> bench Workload (:mod:`xloss.bench.workloads`)
    bench_dims: int  # dimensions of a bench size: N; N x C; BT x H x V
    bench_sizes: tuple[str, str]  # (default size, --quick size)
    #: axis or bounded parameter -> how a refused value reads, naming its argument ({value}, {supported})
    refusals: Mapping[str, str] = field(default_factory=dict)

    def parameters(self) -> frozenset:
        """The arguments a call of this kernel takes (its public functions' parameters, but the
        backend and the output buffers): what a saved conformance case may hold."""
        return _parameters(self.functions)

    def load(self, link: str):
        """The object behind one of the row's links (``"descriptor"``, ``"validator"``, ...)."""
        module, _, attr = getattr(self, link).partition(":")
        obj = importlib.import_module(module)
        return getattr(obj, attr) if attr else obj


FOCAL = KernelSpec(
    name="focal_loss",
    # targets: "binary" where every y is 0 or 1, else "soft"; a backend declaring only "binary"
    # is never handed soft targets
    axes=MappingProxyType({"mode": ("forward", "grad", "forward+grad"), "weight": (False, True),
                           "targets": ("soft", "binary")}),
    primary="mode",
    reduces=True,
    aliases=("focal",),
    functions=("focal_loss", "focal_loss_grad", "focal_loss_with_grad"),
    args="xloss.kernel_args:FocalArgs",
    validator="xloss.validation:focal_args",
    reference="xloss.reference.focal",
    descriptor="xloss.conformance.focal:DESCRIPTOR",
    torch="xloss.torch.focal:sigmoid_focal_loss",
    workload="xloss.bench.workloads:focal",
    bench_dims=1,
    bench_sizes=("8M", "1M"),
    refusals=MappingProxyType({"targets": "y with {value} targets: {value} targets are not supported (supported "
                                          "targets: {supported}; binary means every y is 0 or 1)"}),
)
BCE_GRAD = KernelSpec(
    name="bce_grad",
    axes=MappingProxyType({"eps_mode": ("clamp", "add"), "weight": (False, True)}),
    primary="eps_mode",
    reduces=True,
    aliases=("bce",),
    functions=("bce_grad",),
    args="xloss.kernel_args:BCEArgs",
    validator="xloss.validation:bce_args",
    reference="xloss.reference.bce",
    descriptor="xloss.conformance.bce:DESCRIPTOR",
    torch="xloss.torch.bce:binary_cross_entropy",
    workload="xloss.bench.workloads:bce",
    bench_dims=1,
    bench_sizes=("8M", "1M"),
)
NLL_GRAD = KernelSpec(
    name="nll_loss_grad",
    axes=MappingProxyType({"ndim": (1, 2), "weight": (False, True), "target_dtype": ("int64", "int32", "uint8")}),
    primary=None,
    reduces=True,
    aliases=("nll",),
    functions=("nll_loss_grad",),
    args="xloss.kernel_args:NLLArgs",
    validator="xloss.validation:nll_args",
    reference="xloss.reference.nll",
    descriptor="xloss.conformance.nll:DESCRIPTOR",
    torch="xloss.torch.nll:nll_loss",
    workload="xloss.bench.workloads:nll",
    bench_dims=2,
    bench_sizes=("32768x1000", "8192x1000"),
)
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
    functions=("fused_linear_cross_entropy_grad",),
    args="xloss.kernel_args:FLCEArgs",
    validator="xloss.validation:flce_args",
    reference="xloss.reference.flce",
    descriptor="xloss.conformance.flce:DESCRIPTOR",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload="xloss.bench.workloads:flce",
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
    functions=("fused_linear_online_max_sum",),
    args="xloss.kernel_args:OnlineMaxSumArgs",
    validator="xloss.validation:online_max_sum_args",
    reference="xloss.reference.flce:fused_linear_online_max_sum",
    descriptor="xloss.conformance.vocab_parallel:ONLINE_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload="xloss.bench.workloads:online_max_sum",
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
    functions=("fused_cross_entropy_loss_with_max_sum",),
    args="xloss.kernel_args:LossWithMaxSumArgs",
    validator="xloss.validation:loss_with_max_sum_args",
    reference="xloss.reference.flce:fused_cross_entropy_loss_with_max_sum",
    descriptor="xloss.conformance.vocab_parallel:LOSS_WITH_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload="xloss.bench.workloads:loss_with_max_sum",
    bench_dims=2,
    bench_sizes=("2048x32000", "256x4000"),
)

KERNELS: Mapping[str, KernelSpec] = MappingProxyType(
    {k.name: k for k in (FOCAL, BCE_GRAD, NLL_GRAD, FLCE_GRAD, ONLINE_MAX_SUM, LOSS_WITH_MAX_SUM)})
#: short name or full name -> full name
ALIASES: Mapping[str, str] = MappingProxyType(
    {**{a: k.name for k in KERNELS.values() for a in k.aliases}, **{k: k for k in KERNELS}})


def kernel_named(name: str) -> KernelSpec | None:
    """The row for a full name or an alias (None if there is none)."""
    full = ALIASES.get(name)
    return KERNELS[full] if full else None
