"""What a backend is: declared capabilities plus an implementation table, ``{row: function}``.

A backend subclasses :class:`Backend`, declares per kernel a :class:`KernelCaps`, and lists in
:attr:`Backend.implementations` the function that runs each kernel it declares, keyed by the
kernel's row (:mod:`xloss.kernels`). xloss validates every call before a backend sees it
(:mod:`xloss.kernel_args` states the invariants), then checks the request against the declared
capabilities: a backend is never asked for something it did not declare.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from .dtypes import FLOAT_DTYPES
from .errors import UnsupportedRequestError, XLossError, XLossMemoryError
from .kernel_args import Request
from .kernels import KERNELS, REDUCTIONS

#: Unpickles a backend the registry made, from its (name, options): ``xloss.registry.rebuild``, which the
#: registry installs as it imports (it makes every such backend, so it is imported before one pickles).
#: Pickles name that function, so this module need not import the registry.
_rebuild = None


def install_rebuild(fn) -> None:
    """Set the function that :meth:`Backend.__reduce_ex__` names for a registry-made backend:
    ``fn(name, options) -> Backend`` (called by :mod:`xloss.registry`)."""
    global _rebuild
    _rebuild = fn


def _fmt(values) -> str:
    return ", ".join(str(v) for v in sorted(values, key=str))


@dataclass(frozen=True)
class KernelCaps:
    """What a backend supports for one kernel.

    Build it with :meth:`declare`, which checks the axes against the kernel catalog and
    takes an omitted variant axis to mean "every value".
    """

    kernel: str
    dtypes: frozenset
    reductions: frozenset
    variants: Mapping[str, frozenset]
    max_elements: int | None = None
    notes: str = ""
    fixed: Mapping[str, object] = field(default_factory=dict)  # parameters the backend hard-wires, e.g. {"eps": 1e-12}
    # The upstream gradient, scaled for the reduction, crosses the backend's ABI in the storage
    # dtype (e.g. per-tile mean scales passed as half): the conformance tolerance allows that rounding.
    upstream_in_dtype: bool = False
    # The outputs are accumulated across calls (tiles) through the ABI in the storage dtype, so
    # partial sums are rounded to it once per tile: the conformance error-scale statistic is skipped.
    partials_in_dtype: bool = False
    # largest value of a request parameter the backend takes, e.g. {"hidden": 65534}
    limits: Mapping[str, int] = field(default_factory=dict)
    # The input range the vendor's own kernel behind this backend's ABI is good for, per argument,
    # e.g. {"x": (-60.0, 9.0)}: a library reproducing that kernel's numerics fails outside it.
    # xloss check reports cases with an input outside it apart ("passes within the vendor's
    # range, fails outside it") rather than as the target's failure. Empty: no such range.
    vendor_range: Mapping[str, tuple] = field(default_factory=dict)

    @classmethod
    def declare(cls, kernel: str, *, dtypes, reductions=REDUCTIONS, max_elements=None, notes="", fixed=None,
                upstream_in_dtype=False, partials_in_dtype=False, limits=None, vendor_range=None, **variants):
        spec = KERNELS[kernel]
        unknown_dtypes = set(dtypes) - set(FLOAT_DTYPES)
        if unknown_dtypes:
            raise ValueError(f"{kernel}: unknown dtypes {sorted(unknown_dtypes)}")
        if not spec.reduces:
            reductions = ()
        elif set(reductions) - set(REDUCTIONS):
            raise ValueError(f"{kernel}: unknown reductions {sorted(set(reductions) - set(REDUCTIONS))}")
        full = {}
        for axis, allowed in spec.axes.items():
            chosen = variants.pop(axis, allowed)
            chosen = (chosen,) if isinstance(chosen, (str, bool, int)) else tuple(chosen)
            if set(chosen) - set(allowed):
                raise ValueError(f"{kernel}: axis {axis!r} takes {allowed}, got {chosen}")
            full[axis] = frozenset(chosen)
        if variants:
            raise ValueError(f"{kernel}: unknown axes {sorted(variants)}; known: {sorted(spec.axes)}")
        return cls(kernel=kernel, dtypes=frozenset(dtypes), reductions=frozenset(reductions),
                   variants=MappingProxyType(full), max_elements=max_elements, notes=notes,
                   fixed=MappingProxyType(dict(fixed or {})), upstream_in_dtype=bool(upstream_in_dtype),
                   partials_in_dtype=bool(partials_in_dtype), limits=MappingProxyType(dict(limits or {})),
                   vendor_range=MappingProxyType({k: (float(lo), float(hi))
                                                  for k, (lo, hi) in dict(vendor_range or {}).items()}))

    def refusal(self, req: Request) -> str | None:
        """Why this declaration does not cover ``req`` (None if it does)."""
        if req.dtype not in self.dtypes:
            return f"dtype {req.dtype} (supported: {_fmt(self.dtypes)})"
        if req.reduction is not None and req.reduction not in self.reductions:
            return f"reduction={req.reduction!r} (supported: {_fmt(self.reductions)})"
        spec = KERNELS[self.kernel]
        for axis in req.variant:
            if len(self.variants[axis]) == len(spec.axes[axis]):
                continue  # every value declared: the request's value (maybe costly to compute) is not needed
            value = req.variant[axis]
            if value not in self.variants[axis]:
                supported = _fmt(self.variants[axis])
                if axis in spec.refusals:
                    return spec.refusals[axis].format(value=value, supported=supported)
                return f"{axis}={value!r} (supported: {supported})"
        if self.max_elements is not None and req.numel > self.max_elements:
            return f"{req.numel} elements (at most {self.max_elements})"
        for param, value in self.fixed.items():
            if param in req.params and req.params[param] != value:
                return f"{param}={req.params[param]!r} (this backend fixes {param}={value!r})"
        for param, limit in self.limits.items():
            if param in req.params and req.params[param] > limit:
                if param in spec.refusals:
                    return spec.refusals[param].format(value=req.params[param], supported=f"at most {limit}")
                return f"{param}={req.params[param]!r} (at most {limit})"
        return None

    def describe(self) -> str:
        parts = [f"dtypes: {_fmt(self.dtypes)}"]
        if self.reductions:
            parts.append(f"reductions: {_fmt(self.reductions)}")
        for axis, values in self.variants.items():
            if set(values) != set(KERNELS[self.kernel].axes[axis]):
                parts.append(f"{axis}: {_fmt(values)}")
        if self.max_elements is not None:
            parts.append(f"max elements: {self.max_elements}")
        parts.extend(f"{k} fixed at {v!r}" for k, v in self.fixed.items())
        parts.extend(f"{k} at most {v}" for k, v in self.limits.items())
        parts.extend(f"the vendor kernel's range: {k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in self.vendor_range.items())
        if self.upstream_in_dtype:
            parts.append("upstream gradient scale passed in the storage dtype")
        if self.partials_in_dtype:
            parts.append("partial sums accumulated across tiles in the storage dtype")
        if self.notes:
            parts.append(self.notes)
        return "; ".join(parts)


@dataclass(eq=False)  # identity semantics: backends are used as keys and compared by object
class Backend:
    """Base class of every backend. Subclasses set ``name`` and override what they support."""

    name: str = "abstract"
    description: str = ""
    options: dict = field(default_factory=dict)

    # -- what it can do --------------------------------------------------------------
    def capabilities(self) -> Mapping[str, KernelCaps]:
        """Per kernel name, what this backend supports. Kernels absent here are unsupported."""
        return {}

    def availability(self) -> tuple[bool, str]:
        """``(True, "")`` if it can run here, else ``(False, reason)``."""
        return True, ""

    def info(self) -> Mapping[str, str]:
        """Facts worth showing in ``xloss backends`` (library path, thread count, ...)."""
        return {}

    # -- what ``xloss check`` uses to hold a library to its ABI ----------------------------
    #: True where the backend promises bit-identical results across runs and across the
    #: :meth:`configurations` (e.g. any core mask); else agreement within tolerance is asked.
    deterministic = False  # (a plain class attribute, not a dataclass field: subclasses and instances set it)

    #: torch device types whose tensors this backend runs (``torch.device(...).type``). Every
    #: backend here runs on host memory; one for another device (CUDA through Triton, say) lists
    #: it and registers its kernels with :func:`xloss.torch.ops.register_device_kernel`.
    devices = ("cpu",)

    def checked(self) -> Backend:
        """This backend in its checked mode: every buffer handed to the library sits between
        poisoned guard regions and every input buffer is compared after the call, so a write out
        of bounds raises :class:`~xloss.errors.OutOfBoundsWrite` and a write into an input
        :class:`~xloss.errors.InputModified`. Backends that hand no raw memory to a separate
        library return themselves."""
        return self

    def configurations(self) -> list[tuple[str, Backend]]:
        """Other configurations of this backend that must give the same results (e.g. other core
        masks), as ``(label, backend)``; ``xloss check`` runs its edge and large cases on each."""
        return []

    def readings(self, kernel: str) -> list[tuple[str, str, Backend]]:
        """Where the vendor's own page for ``kernel`` can be read two ways (e.g. contradictory
        reduction codes): the readings other than this backend's, as ``(what the reading is, the
        command-line options that select it, this backend with them)``. ``xloss check`` reruns a
        failing case on each and says which one the library's results match."""
        return []

    def refusal(self, req: Request) -> str | None:
        caps = self.capabilities().get(req.kernel)
        if caps is None:
            return f"kernel {req.kernel} (supported: {_fmt(self.capabilities()) or 'none'})"
        return caps.refusal(req)

    def check(self, req: Request) -> None:
        """Raise :class:`UnsupportedRequestError` unless the capabilities cover ``req``."""
        why = self.refusal(req)
        if why is not None:
            caps = self.capabilities().get(req.kernel)
            supports = f"; it supports {caps.describe()}" if caps else ""
            raise UnsupportedRequestError(
                f"backend {self.name!r} does not support {why} for kernel {req.kernel}{supports}"
            )

    # -- the kernels --------------------------------------------------------------------
    #: The kernels this backend runs: ``{row: function}``, ``row`` a :class:`xloss.kernels.KernelSpec`
    #: (the object, not its name) and ``function(backend, args)`` writing that row's ``*_out`` arrays.
    #: Adding a kernel to a backend is one function and one entry here. (A plain class attribute,
    #: not a dataclass field; a subclass sets its own.)
    implementations: ClassVar[Mapping] = MappingProxyType({})

    def kernel(self, name: str):
        """What runs kernel ``name`` here, as ``fn(args)``, or None: an attribute of that name where
        there is one (a method a subclass defines, or a callable set on the instance, as tests do),
        else the :attr:`implementations` entry for the kernel's row, bound to this backend."""
        return getattr(self, name, None) if name in KERNELS else None

    def __getattr__(self, name: str):
        # Reached only when ordinary lookup finds nothing: a kernel's name reads the table, so
        # ``backend.nll_loss_grad(args)`` runs the entry (unchecked, like calling a method).
        row = KERNELS.get(name)
        fn = self.implementations.get(row) if row is not None else None
        if fn is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(fn, self)

    def flce_row_passes(self):
        """The per-row passes (statistics; G in place) that ``xloss.torch``'s FLCE may run on this
        backend's behalf between PyTorch GEMMs, or None (then it calls this backend's FLCE kernels).
        An object with ``row_stats`` and ``gradient_in_place`` as in ``backends/cpu_onednn/flce_rows.py``,
        run under the backend's own options (the ``cpu`` backend's thread count, launch lock and
        SIGINT hold)."""
        return None

    def run(self, args) -> None:
        """Check ``args`` against the capabilities and run the matching kernel."""
        req = args.request()
        self.check(req)
        fn = self.kernel(req.kernel)
        if fn is None:
            raise UnsupportedRequestError(f"backend {self.name!r} declares kernel {req.kernel} but does not "
                                          f"implement it (no entry for its row in the backend's implementations "
                                          f"table, and no method {req.kernel})")
        try:
            fn(args)
        except MemoryError as exc:
            if isinstance(exc, XLossError):
                raise
            raise XLossMemoryError(f"backend {self.name!r} ran out of memory in {req.kernel} "
                                   f"({type(exc).__name__}: {exc})") from exc

    def __reduce_ex__(self, protocol):
        """Pickle (and ``copy.deepcopy``) by name and options: the copy is the registry's shared
        instance for them, never a second copy of a loaded C library."""
        made_by = getattr(self, "_xloss_made_by", None)
        if made_by is None or _rebuild is None:
            return super().__reduce_ex__(protocol)  # a backend built by hand pickles as a plain object
        return _rebuild, made_by

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"<xloss backend {self.name}{' (' + opts + ')' if opts else ''}>"
