"""The kernel table: one row per kernel, and the variant axes a backend declares support for.

A *variant axis* is a choice that changes what a backend must compute (not merely the
values it is given): the focal mode, the BCE epsilon form, whether a weight is present,
the FLCE mode and mask format, whether focal targets are soft or binary (an ABI with an integer
one-hot target, such as DrivingSDK's, cannot express soft ones). Capabilities (:class:`xloss.backend.KernelCaps`) are
declared over exactly these axes, and the conformance suite enumerates them.

A kernel family (a package under ``xloss/kernels/``) :func:`register` s its rows when it is imported;
this package imports every family it holds once its own names exist, so ``KERNELS`` is complete as
soon as ``xloss.kernels`` is. The generic layers (dispatch, ``xloss check``, ``xloss bench``, the
CLI, ``xloss.torch``) read the rows and name no kernel.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

REDUCTIONS = ("none", "mean", "sum")
#: Vendor reduction codes (Ascend and FT78NE agree).
REDUCTION_CODES = MappingProxyType({"none": 0, "mean": 1, "sum": 2})


@functools.cache
def _parameters(row: KernelSpec) -> frozenset:
    """Read once per row (a case file may hold thousands of cases)."""
    api = row.load("api")
    names = {p for fn in row.functions for p in inspect.signature(getattr(api, fn)).parameters}
    return frozenset(n for n in names if n != "backend" and n != "out" and not n.endswith("_out"))


@dataclass(frozen=True, eq=False)  # a row is itself: compared and hashed by identity
class KernelSpec:
    """One row per kernel (PyTorch OpInfo's idea): everything that knows a kernel exists reads it here.

    Dispatch (``Backend.kernel``), ``xloss backends``, ``xloss check`` (``descriptor``), ``xloss bench``
    (``workload``, ``bench``, ``bench_dims``, sizes, modes, weights), the CLI aliases, the public API
    (``api``, ``exports``) and the generic tests are built from the rows. A link holds the object
    itself or a ``"module:attribute"`` string loaded on first use with :meth:`load` (a module name
    starting with ``.`` is relative to ``package``, the family's): parts that import Numba, torch or
    hypothesis stay unloaded until used, so every layer may import this module.
    """

    name: str
    axes: Mapping[str, tuple]  # axis -> every value it can take
    primary: str | None  # the axis reports break results down by ("mode")
    reduces: bool  # whether the kernel takes a reduction
    aliases: tuple[str, ...]  # short names for the CLI and xloss bench
    functions: tuple[str, ...]  # the public functions (``xloss.<name>``) that run it, found in ``api``
    args: object  # the Args type a backend's implementation receives
    validator: object  # caller's arguments -> Args
    reference: object  # the float64 formulas
    descriptor: object  # the conformance descriptor
    torch: object  # the PyTorch entry point
    workload: object  # (mode, size, dtype, rng) -> bench Workload
    bench: object  # the bench candidates (``xloss.bench.impls.KernelImpls``)
    bench_dims: int  # dimensions of a bench size: N; N x C; BT x H x V
    bench_sizes: tuple[str, str]  # (default size, --quick size)
    api: object = "xloss.api"  # the module holding ``functions`` and ``exports``
    exports: tuple[str, ...] = ()  # more public names the row adds to ``xloss`` (result types)
    order: int = 1000  # where the row sorts in ``KERNELS`` (listings, check and bench order)
    package: str | None = None  # the family package relative links resolve in
    bench_modes: tuple[tuple[str, ...], tuple[str, ...]] = (("grad",), ("grad",))  # (default, --quick)
    bench_weight: tuple[float, float] = (1.0, 1.0)  # a cell's share of the bench budget (default, --quick)
    bench_steps: tuple = ()  # links to timed steps built on the kernel (``xloss.bench.steps.Step``)
    #: axis or bounded parameter -> how a refused value reads, naming its argument ({value}, {supported})
    refusals: Mapping[str, str] = field(default_factory=dict)

    def parameters(self) -> frozenset:
        """The arguments a call of this kernel takes (its public functions' parameters, but the
        backend and the output buffers): what a saved conformance case may hold."""
        return _parameters(self)

    def load(self, link: str):
        """The object behind one of the row's links (``"descriptor"``, ``"validator"``, ...)."""
        return self.resolve(getattr(self, link))

    def resolve(self, value):
        """A link's object: ``value`` itself, or what a ``"module:attribute"`` string names."""
        if not isinstance(value, str):
            return value
        module, _, attr = value.partition(":")
        obj = importlib.import_module(module, self.package) if module.startswith(".") else importlib.import_module(
            module)
        return getattr(obj, attr) if attr else obj


_ROWS: dict[str, KernelSpec] = {}
_ALIASES: dict[str, str] = {}
#: name -> row, in row order; a live view (a family registered later shows up)
KERNELS: Mapping[str, KernelSpec] = MappingProxyType(_ROWS)
#: short name or full name -> full name
ALIASES: Mapping[str, str] = MappingProxyType(_ALIASES)


def register(*rows: KernelSpec) -> None:
    """Add rows to the table (a family calls this when imported). A name or alias may be taken once."""
    for row in rows:
        for name in (row.name, *row.aliases):
            if name in _ALIASES and _ROWS.get(_ALIASES[name]) is not row:
                raise ValueError(f"kernel name {name!r} is taken by {_ALIASES[name]!r}")
    merged = {**_ROWS, **{r.name: r for r in rows}}
    ordered = sorted(merged.values(), key=lambda r: r.order)  # stable: equal orders keep registration order
    _ROWS.clear()
    _ROWS.update((r.name, r) for r in ordered)
    _ALIASES.clear()
    _ALIASES.update({**{a: r.name for r in ordered for a in r.aliases}, **{r.name: r.name for r in ordered}})


def kernel_named(name: str) -> KernelSpec | None:
    """The row for a full name or an alias (None if there is none)."""
    full = ALIASES.get(name)
    return KERNELS[full] if full else None


def _discover() -> None:
    """Import every family package here: each registers its rows."""
    for info in pkgutil.iter_modules(__path__):  # noqa: F821 (a package's __path__)
        if info.ispkg:
            importlib.import_module(f"{__name__}.{info.name}")


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
    bench="xloss.bench.impls:FOCAL_IMPLS",
    bench_modes=(("forward", "grad", "forward+grad"), ("forward+grad",)),
    bench_weight=(1.0, 3.0),  # --quick: torch.compile's first call dominates the cell
    order=10,
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
    bench="xloss.bench.impls:BCE_IMPLS",
    bench_weight=(0.6, 1.0),
    order=20,
    bench_dims=1,
    bench_sizes=("8M", "1M"),
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
    bench="xloss.bench.impls:FLCE_IMPLS",
    bench_steps=("xloss.bench.training:LM_STEP",),
    bench_weight=(2.5, 1.0),  # the big GEMMs
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
    functions=("fused_linear_online_max_sum",),
    args="xloss.kernel_args:OnlineMaxSumArgs",
    validator="xloss.validation:online_max_sum_args",
    reference="xloss.reference.flce:fused_linear_online_max_sum",
    descriptor="xloss.conformance.vocab_parallel:ONLINE_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload="xloss.bench.workloads:online_max_sum",
    bench="xloss.bench.impls:ONLINE_MAX_SUM_IMPLS",
    exports=("OnlineMaxSum",),
    bench_weight=(1.2, 1.0),
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
    functions=("fused_cross_entropy_loss_with_max_sum",),
    args="xloss.kernel_args:LossWithMaxSumArgs",
    validator="xloss.validation:loss_with_max_sum_args",
    reference="xloss.reference.flce:fused_cross_entropy_loss_with_max_sum",
    descriptor="xloss.conformance.vocab_parallel:LOSS_WITH_MAX_SUM",
    torch="xloss.torch.flce:fused_linear_cross_entropy",
    workload="xloss.bench.workloads:loss_with_max_sum",
    bench="xloss.bench.impls:LOSS_WITH_MAX_SUM_IMPLS",
    exports=("LossWithMaxSum",),
    bench_weight=(0.7, 1.0),
    order=60,
    bench_dims=2,
    bench_sizes=("2048x32000", "256x4000"),
)

register(FOCAL, BCE_GRAD, FLCE_GRAD, ONLINE_MAX_SUM, LOSS_WITH_MAX_SUM)
_discover()
