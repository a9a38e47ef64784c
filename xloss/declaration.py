"""One row of a backend's declaration table: what a kernel is declared with when the loaded library
exports the operators (entry points) behind it. The ``ascend`` and ``ft78ne``/``mt7004`` backends
build their capabilities from tables of these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .backend import KernelCaps


@dataclass(frozen=True)
class Declaration:
    """One kernel's declaration.

    ``dtypes``: the dtypes the operators take (empty: those the caller passes, e.g. a chip's);
    ``ops``: the operators every request calls; ``modes``: for a kernel whose mode axis picks the
    operators (focal), mode -> operators. ``variants``: the restricted variant axes (others: every
    value); ``fixed``: the parameters the operators hard-wire; ``limits``: the largest parameter
    values they take; ``private_flags``: the KernelCaps flags set when the library runs in private
    memory (e.g. ``("upstream_in_dtype",)``); ``vendor_range``: KernelCaps.vendor_range."""

    kernel: str
    dtypes: tuple = ()
    ops: tuple = ()
    modes: Mapping[str, tuple] = field(default_factory=dict)
    variants: Mapping[str, object] = field(default_factory=dict)
    fixed: Mapping[str, object] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    private_flags: tuple = ()
    notes: str = ""
    vendor_range: Mapping[str, tuple] = field(default_factory=dict)

    def operators(self, variant) -> tuple:
        """The operators a request with this ``variant`` calls."""
        return self.modes[variant["mode"]] if self.modes else self.ops

    def caps(self, has: Callable[..., bool], dtypes=None, *, max_elements: int | None = None, private: bool = False,
             note: str = "") -> KernelCaps | None:
        """The declaration for a library with ``has(dtype, *operators)`` (a library whose operators take
        every dtype may ignore it), or None when it exports too little. ``dtypes``: the candidates in place
        of :attr:`dtypes`; ``private``: the library runs in private memory; ``note``: appended to the notes."""
        dtypes = tuple(dtypes if dtypes is not None else self.dtypes)
        if not dtypes:
            return None
        variants = dict(self.variants)
        if self.modes:
            # a dtype's modes are those whose operators it exports; declare the largest
            # (dtypes x modes) block every declared dtype fully supports
            per_dtype = {d: {m for m, ops in self.modes.items() if has(d, *self.ops, *ops)} for d in dtypes}
            candidates = [dtypes] + ([(d,) for d in dtypes] if len(dtypes) > 1 else [])
            best = (0, (), ())
            for subset in candidates:
                modes = set.intersection(*(per_dtype[d] for d in subset))
                if len(modes) * len(subset) > best[0]:
                    best = (len(modes) * len(subset), subset, tuple(sorted(modes)))
            if not best[0]:
                return None
            declared, variants["mode"] = best[1], best[2]
        else:
            declared = [d for d in dtypes if has(d, *self.ops)]
            if not declared:
                return None
        flags = {f: private for f in self.private_flags}
        notes = "; ".join(n for n in (self.notes, note) if n)
        return KernelCaps.declare(self.kernel, dtypes=declared, max_elements=max_elements, fixed=self.fixed or None,
                                  limits=self.limits or None, notes=notes, vendor_range=self.vendor_range or None,
                                  **flags, **variants)
