"""The binary-cross-entropy family: the gradient (``bce_grad``) and the forward (``binary_cross_entropy``) rows.

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

#: The forward loss on probabilities (CANN's aclnnBinaryCrossEntropy, the FT78NE/MT7004 binarycrossentropy):
#: ``-w (y log x + (1-y) log(1-x))``, each log clamped at -100, reduced.
FORWARD = KernelSpec(
    name="binary_cross_entropy",
    axes=MappingProxyType({"weight": (False, True)}),
    primary=None,
    reduces=True,
    aliases=("bce_fwd",),
    functions=("binary_cross_entropy",),
    args=".forward_args:BCELossArgs",
    validator=".forward_validate:bce_loss_args",
    reference="xloss.reference.bce:binary_cross_entropy",
    descriptor=".forward_conformance:DESCRIPTOR",
    torch="xloss.torch.bce:binary_cross_entropy",
    workload=".forward_bench:workload",
    bench=".forward_bench:IMPLS",
    api=".api",
    bench_weight=(0.5, 1.0),
    package=__name__,
    order=21,
    bench_dims=1,
    bench_sizes=("8M", "1M"),
    bench_modes=(("forward",), ("forward",)),
)

register(ROW, FORWARD)
