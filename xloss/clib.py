"""Loading a C library through cffi's ABI mode, for the C backends.

One mechanism serves the in-tree emulator and a vendor's (or port author's) library: the
adapter gives the C declarations and the emulator's path; an explicit path argument or an
environment variable replaces the emulator. Several libraries may be named (separated by
``os.pathsep``), as a vendor's runtime is often split across ``.so`` files; a symbol is
taken from the first that exports it. A symbol nobody exports is reported, not a crash.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import cffi

from .errors import BackendUnavailableError


class MissingSymbolError(BackendUnavailableError, AttributeError):
    """The loaded libraries do not export a declared function (an AttributeError too, so
    ``hasattr``/``getattr(..., default)`` work on a :class:`CLibrary`)."""


def library_paths(explicit, env_var: str, default: Path) -> list[str]:
    """The libraries to load: ``explicit`` (str, path or list), else ``$env_var``, else ``default``."""
    chosen = explicit if explicit is not None else os.environ.get(env_var) or None
    if chosen is None:
        return [str(default)]
    if isinstance(chosen, (str, os.PathLike)):
        chosen = [p for p in str(chosen).split(os.pathsep) if p]
    return [str(p) for p in chosen]


class CLibrary:
    """A set of shared libraries opened with one cffi ``FFI`` (declarations in ``cdef``)."""

    def __init__(self, cdef: str, paths: list[str]):
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef)
        self.paths = paths
        self._libs = []
        self._symbols: dict[str, object] = {}
        self._lock = threading.Lock()
        for p in paths:
            if not Path(p).exists():
                raise BackendUnavailableError(f"library {p} does not exist")
            try:
                self._libs.append(self.ffi.dlopen(p, self.ffi.RTLD_NOW | self.ffi.RTLD_GLOBAL))
            except OSError as exc:
                raise BackendUnavailableError(f"cannot load {p}: {exc}") from exc

    def has(self, name: str) -> bool:
        try:
            self.symbol(name)
            return True
        except BackendUnavailableError:
            return False

    def symbol(self, name: str):
        """The exported function ``name`` (declared in the cdef), from the first library that has it."""
        fn = self._symbols.get(name)
        if fn is not None:
            return fn
        with self._lock:
            for lib in self._libs:
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    continue
                self._symbols[name] = fn
                return fn
        raise MissingSymbolError(f"symbol {name} is not exported by {os.pathsep.join(self.paths)}")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.symbol(name)
