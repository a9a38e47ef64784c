"""Loading a C library through cffi's ABI mode, for the C backends.

One mechanism serves the in-tree emulator and a vendor's (or port author's) library: the
adapter gives the C declarations and the emulator's path; an explicit path argument or an
environment variable replaces the emulator. Several libraries may be named (separated by
``os.pathsep``), as a vendor's runtime is often split across ``.so`` files; a symbol is
taken from the first that exports it. A symbol nobody exports is reported, not a crash.

A library that is not one of xloss's own builds is first loaded in a throwaway child process
(:func:`probe_load`, once per file and process): a library whose constructor aborts, segfaults,
exits or hangs makes the backend unavailable, naming what happened, instead of taking the caller
down (``xloss.list_backends()`` with such a library in ``XLOSS_ASCEND_LIB``, say).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import cffi

from .errors import BackendUnavailableError

#: probe libraries before loading them here (off in xloss check's child, which is the probe itself)
PROBE_LOADS = True
#: seconds a probe may take to load the libraries
PROBE_SECONDS = 60.0
_PROBED: dict[tuple, str | None] = {}
_PROBE = (
    "import ctypes, os, sys\n"
    "for p in sys.argv[1:]:\n"
    "    try:\n"
    "        ctypes.CDLL(p, mode=os.RTLD_NOW | os.RTLD_GLOBAL)\n"
    "    except OSError:\n"
    "        break  # the real load reports it\n"
    "print('loaded', flush=True)\n"
)


def _signal_text(code: int) -> str:
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def probe_load(paths: list[str]) -> str | None:
    """Load ``paths`` (in order, as :class:`CLibrary` does) in a throwaway process; why loading them
    here would end this process (None if it would not). Cached per file (path, size, mtime)."""
    try:
        key = tuple((p, *(lambda st: (st.st_size, st.st_mtime_ns))(os.stat(p))) for p in paths)
    except OSError:
        return None  # a missing file: the real load says so
    if key in _PROBED:
        return _PROBED[key]
    cmd = [sys.executable, "-I", "-S", "-c", _PROBE, *paths]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=PROBE_SECONDS)
        why = None
        if proc.returncode < 0:
            why = f"loading it killed a probe process ({_signal_text(proc.returncode)})"
        elif "loaded" not in out:
            why = f"loading it ended a probe process (exit status {proc.returncode})"
    except subprocess.TimeoutExpired:
        why = f"loading it did not finish within {PROBE_SECONDS:.0f} s in a probe process"
    finally:
        if proc.poll() is None or why:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    _PROBED[key] = why
    return why


def _own_folders() -> tuple:
    """Where xloss's own builds (the emulators) live: they are loaded without a probe."""
    from . import backends

    folders = {Path(__file__).resolve().parent, *(Path(p).resolve() for p in backends.__path__)}
    return tuple(str(p) + os.sep for p in folders)


def _needs_probe(path: str) -> bool:
    return PROBE_LOADS and not os.path.realpath(path).startswith(_own_folders())


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
        if any(_needs_probe(p) for p in paths):
            why = probe_load(paths)
            if why is not None:
                raise BackendUnavailableError(f"{os.pathsep.join(paths)} was not loaded: {why}")
        for p in paths:
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
