"""The catalog of kernels: their names and the variant axes a backend declares support for.

A *variant axis* is a choice that changes what a backend must compute (not merely the
values it is given): the focal mode, the BCE epsilon form, whether a weight is present,
the FLCE mode and mask format, whether focal targets are soft or binary (an ABI with an integer
one-hot target, such as DrivingSDK's, cannot express soft ones). Capabilities (:class:`xloss.backend.KernelCaps`) are
declared over exactly these axes, and the conformance suite enumerates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

REDUCTIONS = ("none", "mean", "sum")
#: Vendor reduction codes (Ascend and FT78NE agree).
REDUCTION_CODES = MappingProxyType({"none": 0, "mean": 1, "sum": 2})


@dataclass(frozen=True)
class KernelSpec:
    name: str
    axes: Mapping[str, tuple]  # axis -> every value it can take
    primary: str | None  # the axis reports break results down by ("mode")
    reduces: bool  # whether the kernel takes a reduction
    summary: str
    #: axis -> how a refused value reads, naming the argument it comes from ({value}, {supported})
    refusals: Mapping[str, str] = field(default_factory=dict)


FOCAL = KernelSpec(
    name="focal_loss",
    # targets: "binary" where every y is 0 or 1, else "soft"; a backend declaring only "binary"
    # is never handed soft targets
    axes=MappingProxyType({"mode": ("forward", "grad", "forward+grad"), "weight": (False, True),
                           "targets": ("soft", "binary")}),
    primary="mode",
    reduces=True,
    summary="sigmoid focal loss: forward, gradient, or both in one pass",
    refusals=MappingProxyType({"targets": "y with {value} targets: {value} targets are not supported (supported "
                                          "targets: {supported}; binary means every y is 0 or 1)"}),
)
BCE_GRAD = KernelSpec(
    name="bce_grad",
    axes=MappingProxyType({"eps_mode": ("clamp", "add"), "weight": (False, True)}),
    primary="eps_mode",
    reduces=True,
    summary="binary-cross-entropy gradient w.r.t. the probabilities",
)
NLL_GRAD = KernelSpec(
    name="nll_loss_grad",
    axes=MappingProxyType({"ndim": (1, 2), "weight": (False, True), "target_dtype": ("int64", "int32", "uint8")}),
    primary=None,
    reduces=True,
    summary="NLL-loss backward",
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
    summary="fused linear-cross-entropy gradients for one vocabulary shard",
)

KERNELS: Mapping[str, KernelSpec] = MappingProxyType({k.name: k for k in (FOCAL, BCE_GRAD, NLL_GRAD, FLCE_GRAD)})
