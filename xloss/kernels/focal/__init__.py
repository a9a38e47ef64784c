"""Sigmoid focal loss (RetinaNet): forward, gradient, or both from one pass (SPEC kernel 1)."""

from types import MappingProxyType

from xloss.kernels import KernelSpec, register

ROW = KernelSpec(
    package=__name__,
    name="focal_loss",
    # targets: "binary" where every y is 0 or 1, else "soft"; a backend declaring only "binary"
    # is never handed soft targets
    axes=MappingProxyType({"mode": ("forward", "grad", "forward+grad"), "weight": (False, True),
                           "targets": ("soft", "binary")}),
    primary="mode",
    reduces=True,
    aliases=("focal",),
    functions=("focal_loss", "focal_loss_grad", "focal_loss_with_grad"),
    api=".api",
    args=".args:FocalArgs",
    validator=".validate:focal_args",
    reference="xloss.reference.focal",
    descriptor=".conformance:DESCRIPTOR",
    torch="xloss.torch.focal:sigmoid_focal_loss",
    torch_exports=("xloss.torch.focal:sigmoid_focal_loss", "xloss.torch.focal:SigmoidFocalLoss",
                   "xloss.torch.mmdet:mmdet_sigmoid_focal_loss", "xloss.torch.detection:apply_to_detection"),
    workload=".bench:workload",
    bench=".bench:IMPLS",
    bench_modes=(("forward", "grad", "forward+grad"), ("forward+grad",)),
    bench_weight=(1.0, 3.0),  # --quick: torch.compile's first call dominates the cell
    order=10,
    bench_dims=1,
    bench_sizes=("8M", "1M"),
    refusals=MappingProxyType({"targets": "y with {value} targets: {value} targets are not supported (supported "
                                          "targets: {supported}; binary means every y is 0 or 1)"}),
)

register(ROW)
