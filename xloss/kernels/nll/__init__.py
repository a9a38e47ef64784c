"""The NLL-loss backward (``nll_loss_grad``): its row, and the family's parts it links.

Importing this package registers the row; it imports nothing heavy (only :mod:`xloss.kernels`).
"""

from __future__ import annotations

from types import MappingProxyType

from .. import KernelSpec, register

ROW = KernelSpec(
    name="nll_loss_grad",
    axes=MappingProxyType({"ndim": (1, 2), "weight": (False, True), "target_dtype": ("int64", "int32", "uint8")}),
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
    bench_sizes=("32768x1000", "8192x1000"),
)

register(ROW)
