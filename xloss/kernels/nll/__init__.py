"""The NLL loss: its backward (``nll_loss_grad``) and forward (``nll_loss``) rows, and the family's parts
they link.

Importing this package registers the row; it imports nothing heavy (only :mod:`xloss.kernels`).
"""

from __future__ import annotations

from types import MappingProxyType

from .. import KernelSpec, register

#: The backward: d loss / d self for (C), (N, C) and (N, C, d1, ..., dk) input (CANN's aclnnNLLLossBackward and
#: aclnnNLLLoss2dBackward, the FT78NE/MT7004 nlllossgrad). ``input``: "C", "NC" or "NCd", as the forward's.
ROW = KernelSpec(
    name="nll_loss_grad",
    axes=MappingProxyType({"input": ("C", "NC", "NCd"), "weight": (False, True),
                           "target_dtype": ("int64", "int32", "uint8")}),
    primary=None,
    reduces=True,
    aliases=("nll",),
    functions=("nll_loss_grad",),
    args=".args:NLLArgs",
    validator=".validate:nll_args",
    reference="xloss.reference.nll",
    descriptor=".conformance:DESCRIPTOR",
    torch="xloss.torch.nll:nll_loss",
    torch_exports=("xloss.torch.nll:nll_loss", "xloss.torch.nll:NLLLoss"),
    workload=".bench:workload",
    bench=".bench:IMPLS",
    api=".api",
    package=__name__,
    bench_weight=(0.7, 1.0),
    order=30,
    bench_dims=2,
    bench_sizes=("32768x1000", "8192x1000"),  # positions x classes: (N, C) rows, or (N, C, H, W) in "grad NCHW"
    bench_modes=(("grad", "grad NCHW"), ("grad",)),
    refusals=MappingProxyType({"input": "input of layout {value} ({supported})"}),
)

#: The forward: ``(loss, total_weight)`` for (C), (N, C) and (N, C, d1, ..., dk) input (CANN's aclnnNLLLoss and
#: aclnnNLLLoss2d, the FT78NE/MT7004 nllloss). ``input``: "C", "NC" or "NCd" (dims after the classes).
FORWARD = KernelSpec(
    name="nll_loss",
    axes=MappingProxyType({"input": ("C", "NC", "NCd"), "weight": (False, True),
                           "target_dtype": ("int64", "int32", "uint8")}),
    primary=None,
    reduces=True,
    aliases=("nll_fwd",),
    functions=("nll_loss",),
    args=".forward_args:NLLLossArgs",
    validator=".forward_validate:nll_loss_args",
    reference="xloss.reference.nll:nll_loss",
    descriptor=".forward_conformance:DESCRIPTOR",
    torch="xloss.torch.nll:nll_loss",
    workload=".forward_bench:workload",
    bench=".forward_bench:IMPLS",
    api=".api",
    package=__name__,
    bench_weight=(0.5, 1.0),
    order=31,
    bench_dims=2,
    bench_sizes=("32768x1000", "8192x1000"),
    bench_modes=(("forward",), ("forward",)),
    refusals=MappingProxyType({"input": "input of layout {value} ({supported})"}),
)

register(ROW, FORWARD)
