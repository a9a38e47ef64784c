"""The conformance suite: one descriptor per kernel, and the helpers that run them on a backend.

``DESCRIPTORS`` maps kernel names to :class:`KernelDescriptor` (the kernel table's links); :func:`targets` enumerates
what a backend declares (kernel × dtype × mode); :func:`request_of` says what a case asks for,
through the same validation path as a real call; :func:`supports` decides whether a declared
capability covers a case. The pytest suite in ``tests/conformance`` and ``xloss check`` are both
built from these.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import registry
from ..backend import Backend, KernelCaps
from ..dtypes import FLOAT_DTYPES
from ..kernels import KERNELS
from .descriptor import Case, Comparison, ErrorCase, KernelDescriptor, compare


class _Descriptors(Mapping):
    """kernel -> its descriptor, loaded from the kernel table on first use: a family's descriptor
    module imports this package, so loading them while it is imported would find that module half made."""

    def __init__(self):
        self._loaded: dict[str, KernelDescriptor] | None = None

    def _all(self) -> dict[str, KernelDescriptor]:
        if self._loaded is None:
            self._loaded = {name: row.load("descriptor") for name, row in KERNELS.items()}
        return self._loaded

    def __getitem__(self, kernel):
        return self._all()[kernel]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())

    def __repr__(self):
        return repr(self._all())


#: kernel -> its descriptor, from the kernel table (each row names its descriptor)
DESCRIPTORS: Mapping[str, KernelDescriptor] = _Descriptors()


class _Captured(Exception):
    def __init__(self, request):
        super().__init__("captured")
        self.request = request


class _RequestProbe(Backend):
    """Declares everything and runs nothing: it captures the request a call makes."""

    def __init__(self):
        super().__init__(name="request-probe")

    def capabilities(self):
        return {k: KernelCaps.declare(k, dtypes=tuple(FLOAT_DTYPES)) for k in KERNELS}

    def run(self, args):
        raise _Captured(args.request())


_PROBE = _RequestProbe()


def request_of(case: Case):
    """The :class:`~xloss.kernel_args.Request` a case makes, computed by the real validation path."""
    try:
        DESCRIPTORS[case.kernel].call(case, _PROBE)
    except _Captured as c:
        return c.request
    raise AssertionError("the request probe was not reached")  # pragma: no cover


def supports(caps: KernelCaps, case: Case) -> bool:
    return caps.refusal(request_of(case)) is None


def targets(backend: Backend):
    """Every (kernel, dtype, mode) the backend declares, in a stable order."""
    out = []
    for kernel, caps in sorted(backend.capabilities().items()):
        d = DESCRIPTORS[kernel]
        for dtype in sorted(caps.dtypes):
            for mode in d.modes():
                if d.spec.primary is None or mode in caps.variants[d.spec.primary]:
                    out.append((kernel, dtype, mode))
    return out


def backends_declaring(kernel: str, dtype: str, **variants) -> list[str]:
    """Names of the available backends that declare ``kernel`` in ``dtype`` (and the given variant
    values, e.g. ``mode="grad"``), in registry order."""
    names = []
    for info in registry.list_backends():
        caps = info.capabilities.get(kernel)
        if info.available and caps is not None and dtype in caps.dtypes and all(
                v in caps.variants.get(axis, (v,)) for axis, v in variants.items()):
            names.append(info.name)
    return names


def available_backends() -> list[Backend]:
    """The default instance of every registered backend that can run here."""
    out = []
    for info in registry.list_backends():
        if info.available:
            out.append(registry.backend(info.name))
    return out


__all__ = ["Case", "Comparison", "DESCRIPTORS", "ErrorCase", "KernelDescriptor", "available_backends",
           "backends_declaring", "compare",
           "request_of", "supports", "targets"]
