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
    api: object = None  # the module holding ``functions`` and ``exports`` (the family's ``.api``)
    exports: tuple[str, ...] = ()  # more public names the row adds to ``xloss`` (result types)
    order: int = 1000  # where the row sorts in ``KERNELS`` (listings, check and bench order)
    package: str | None = None  # the family package relative links resolve in
    bench_modes: tuple[tuple[str, ...], tuple[str, ...]] = (("grad",), ("grad",))  # (default, --quick)
    bench_weight: tuple[float, float] = (1.0, 1.0)  # a cell's share of the bench budget (default, --quick)
    bench_steps: tuple = ()  # links to timed steps built on the kernel (``xloss.bench.steps.Step``)
    torch_exports: tuple = ()  # links to what the family adds to ``xloss.torch`` (named by the attribute)
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


def linked_named(link: str, name: str):
    """The object some row's ``link`` (``"args"``, ``"validator"``) leads to whose ``__name__`` is ``name``,
    or None: the old module paths of names that moved into the families read through it."""
    for row in KERNELS.values():
        found = row.load(link)
        if getattr(found, "__name__", None) == name:
            return found
    return None


def _discover() -> None:
    """Import every family package here: each registers its rows."""
    for info in pkgutil.iter_modules(__path__):  # noqa: F821 (a package's __path__)
        if info.ispkg:
            importlib.import_module(f"{__name__}.{info.name}")


_discover()
