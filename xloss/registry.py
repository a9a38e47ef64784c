"""The one backend registry.

Backends are found through the ``xloss.backends`` entry-point group: each entry point's
name is the backend name and its object is a factory ``factory(**options) -> Backend``.
The in-tree backends register exactly that way (see ``pyproject.toml``), so an out-of-tree
port joins by declaring an entry point in its own package. :func:`register_backend` does the
same at run time (tests, ``xloss check --lib``).

An explicitly named backend that is missing, unavailable or unable to do the request raises;
only ``backend=None`` chooses, from :data:`DEFAULT_ORDER`, and warns (once per reason) when it passes
over an installed backend that is unavailable here (e.g. ``cpu`` under ``NUMBA_DISABLE_JIT=1``).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata

from .backend import Backend, KernelCaps, install_rebuild
from .errors import (
    BackendNotFoundError,
    BackendUnavailableError,
    UnsupportedRequestError,
    XLossError,
    XLossTypeError,
    XLossValueError,
)
from .kernel_args import Request

ENTRY_POINT_GROUP = "xloss.backends"
#: Tried in order when no backend is named.
DEFAULT_ORDER = ("cpu", "reference")

_lock = threading.RLock()
_factories: dict[str, Callable[..., Backend] | metadata.EntryPoint] = {}
_defaults: dict[tuple, Backend] = {}  # (name, options key) -> the shared instance
_load_errors: dict[str, str] = {}
_discovered = False


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            _factories.setdefault(ep.name, ep)
        _discovered = True


def register_backend(name: str, factory: Callable[..., Backend], *, replace: bool = False) -> None:
    """Register ``factory(**options) -> Backend`` under ``name``."""
    _discover()
    with _lock:
        if name in _factories and not replace:
            raise ValueError(f"a backend named {name!r} is already registered (pass replace=True)")
        _factories[name] = factory
        _forget(name)
        _load_errors.pop(name, None)


def _forget(name: str) -> None:
    for key in [k for k in _defaults if k[0] == name]:
        del _defaults[key]


def unregister_backend(name: str) -> None:
    with _lock:
        _factories.pop(name, None)
        _forget(name)
        _load_errors.pop(name, None)


def backend_names() -> list[str]:
    _discover()
    return sorted(_factories)


def _import_factory(path: str) -> Callable[..., Backend]:
    """``"package.module:factory"`` -> the factory (a backend that is not registered, e.g. a port under test)."""
    import importlib

    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BackendNotFoundError(f"cannot import backend factory {path!r}: {exc}") from exc


def _factory(name: str) -> Callable[..., Backend]:
    _discover()
    with _lock:
        if name not in _factories and ":" in name:
            _factories[name] = _import_factory(name)
        if name not in _factories:
            raise BackendNotFoundError(
                f"no backend named {name!r}; registered backends: {', '.join(backend_names()) or 'none'}"
            )
        f = _factories[name]
        if isinstance(f, metadata.EntryPoint):
            try:
                f = _factories[name] = f.load()
            except Exception as exc:  # an import failure makes the backend unavailable, not xloss
                _load_errors[name] = f"{type(exc).__name__}: {exc}"
                raise BackendUnavailableError(f"backend {name!r} failed to load: {_load_errors[name]}") from exc
        return f


def _options_key(options: dict):
    """A hashable key for ``options`` (None if a value is unhashable: such a backend is not cached)."""
    try:
        key = tuple(sorted((k, type(v).__name__, v) for k, v in options.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _make(name: str, options: dict) -> Backend:
    """Call the factory, turning a bad option into an XLossError that names the backend."""
    factory = _factory(name)
    try:
        b = factory(**options)
    except XLossError:
        raise
    except TypeError as exc:
        raise XLossTypeError(f"backend {name!r}: bad options {options!r}: {exc}") from exc
    except (ValueError, KeyError, OverflowError) as exc:
        raise XLossValueError(f"backend {name!r}: bad options {options!r}: {exc}") from exc
    if not isinstance(b, Backend):
        raise XLossTypeError(f"backend factory {name!r} returned {type(b).__name__}, not an xloss.Backend")
    b._xloss_made_by = (name, dict(options))  # what pickling and copying rebuild it from
    return b


def backend(name: str, **options) -> Backend:
    """The backend ``name`` configured by ``options``: one shared instance per (name, options).

    Instances are cached (a C backend loads its library once, however often it is asked for) and
    pickle by name and options, so modules holding one can be copied and saved. ``name`` may also
    be ``"package.module:factory"`` for a backend that is not registered.
    """
    if not isinstance(name, str):
        raise XLossTypeError(f"backend name must be a str, got {type(name).__name__}")
    key = (name, _options_key(options))
    if key[1] is None:
        return _make(name, options)
    with _lock:
        if key not in _defaults:
            _defaults[key] = _make(name, options)
        return _defaults[key]


def rebuild(name: str, options: dict) -> Backend:
    """Unpickling hook of :meth:`Backend.__reduce__`."""
    return backend(name, **options)


install_rebuild(rebuild)  # the name pickles keep: xloss.registry.rebuild


def available(b: Backend) -> tuple[bool, str]:
    """``b.availability()``, with a probe that raises read as unavailable (and why)."""
    try:
        return b.availability()
    except Exception as exc:  # availability probes must never take xloss down
        return False, f"{type(exc).__name__}: {exc}"


@functools.cache
def _warn_fallback(why: str, chosen: str) -> None:
    """Once per reason: backend=None passed over an installed backend that cannot run here."""
    warnings.warn(f"xloss: backend=None uses {chosen!r}: the default backend {why}", RuntimeWarning, stacklevel=5)


def resolve(choice, req: Request) -> Backend:
    """The backend that runs ``req``: ``choice`` (a name or Backend) checked, or the default."""
    if isinstance(choice, Backend):
        b = choice
    elif isinstance(choice, str):
        b = backend(choice)
    elif choice is None:
        refusals, refusals_unavailable = [], []
        for name in DEFAULT_ORDER:
            try:
                b = backend(name)
            except (BackendNotFoundError, BackendUnavailableError) as exc:
                refusals.append(f"{name}: {exc}")
                continue
            ok, why = available(b)
            reason = why if not ok else b.refusal(req)
            if reason is None:
                if refusals_unavailable:
                    _warn_fallback(refusals_unavailable[0], name)
                return b
            refusals.append(f"{name}: {reason}")
            if not ok:
                refusals_unavailable.append(f"{name!r} is unavailable: {why}")
        raise UnsupportedRequestError(f"no default backend can run {req.kernel}: " + "; ".join(refusals))
    else:
        raise XLossTypeError(f"backend must be a name, a Backend or None, got {type(choice).__name__}")
    ok, why = available(b)
    if not ok:
        raise BackendUnavailableError(f"backend {b.name!r} is not available here: {why}")
    b.check(req)
    return b


@dataclass(frozen=True, repr=False)
class BackendInfo:
    name: str
    available: bool
    reason: str
    description: str
    capabilities: Mapping[str, KernelCaps]
    info: Mapping[str, str]

    def __repr__(self) -> str:  # one short line; the whole table is `xloss backends`
        state = "available" if self.available else f"unavailable: {_clip(self.reason, 60)}"
        return f"BackendInfo({self.name!r}, {state}, {len(self.capabilities)} kernels)"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


class BackendList(list):
    """What :func:`list_backends` returns: a list of :class:`BackendInfo`, shown one backend a line."""

    def __repr__(self) -> str:
        return "[" + ",\n ".join(map(repr, self)) + "]"


def list_backends() -> list[BackendInfo]:
    """Every registered backend with its availability and declared capabilities (a list; its repr is a
    short line per backend: ``xloss backends`` prints the full table)."""
    out = BackendList()
    for name in backend_names():
        try:
            b = backend(name)
        except Exception as exc:
            out.append(BackendInfo(name, False, str(exc), "", {}, {}))
            continue
        ok, why = available(b)
        try:
            info = dict(b.info())
        except Exception as exc:
            info = {"error": f"{type(exc).__name__}: {exc}"}
        out.append(BackendInfo(name, ok, why, b.description, dict(b.capabilities()), info))
    return out
