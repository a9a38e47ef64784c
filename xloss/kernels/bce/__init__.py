"""The binary-cross-entropy gradient family (``bce_grad``): its kernel-table row.

The row's links point into this package (``.args``, ``.validate``, ``.api``, ``.conformance``,
``.bench``) and to the float64 formulas and the PyTorch entry point; nothing is imported here but
:mod:`xloss.kernels`.
"""

from __future__ import annotations

from types import MappingProxyType

from xloss.kernels import KernelSpec, register

ROW = KernelSpec(
    name="bce_grad",
    axes=MappingProxyType({"eps_mode": ("clamp", "add"), "weight": (False, True)}),
    primary="eps_mode",
    reduces=True,
    aliases=("bce",),
    functions=("bce_grad",),
    args=".args:BCEArgs",
    validator=".validate:bce_args",
    reference="xloss.reference.bce",
    descriptor=".conformance:DESCRIPTOR",
    torch="xloss.torch.bce:binary_cross_entropy",
    torch_exports=("xloss.torch.bce:binary_cross_entropy", "xloss.torch.bce:BCELoss"),
    workload=".bench:workload",
    bench=".bench:IMPLS",
    api=".api",
    bench_weight=(0.6, 1.0),
    package=__name__,
    order=20,
    bench_dims=1,
    bench_sizes=("8M", "1M"),
)

register(ROW)
