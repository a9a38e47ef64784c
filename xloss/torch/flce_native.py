"""The FLCE's PyTorch-GEMM route: whether a call takes it, and an adapter to the engine that
``Backend.flce_row_passes()`` returns (the ``cpu`` backend's, with the numerics: ``cpu_onednn/flce_engine.py``)."""

from __future__ import annotations

import math
import weakref

import torch

from .. import registry
from ..backend import Backend
from ..errors import BackendUnavailableError, UnsupportedRequestError

HALF = (torch.bfloat16, torch.float16)
# what this route serves by default; float64 only when it needs what only this route computes (softcap, z-loss)
DTYPES = HALF + (torch.float32,)
_ROUTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # backend -> (offers, available, why)


def gemm_route(backend) -> bool:
    """Whether a call takes this route: the backend it resolves to (None: as the registry resolves) offers
    row passes (``Backend.flce_row_passes``). One that offers them but cannot run here raises."""
    made_by = getattr(backend, "_xloss_made_by", (backend, None))
    if isinstance(backend, Backend) and (made_by[1] is None or made_by[1]):  # an instance of its own
        return not torch.compiler.is_compiling() and _offers_row_passes(backend, backend.name)
    return _named_route(made_by[0])


@torch._dynamo.assume_constant_result  # fixed per backend: torch.compile reads it once, untraced
def _named_route(name: str | None) -> bool:
    if name is None:  # the registry's default: the first of its order that can run here
        name = next((n for n in registry.DEFAULT_ORDER if n in registry.backend_names()
                     and registry.available(registry.backend(n))[0]), None)
    return name is not None and _offers_row_passes(registry.backend(name), name)


def _offers_row_passes(b: Backend, name: str) -> bool:
    if b not in _ROUTES:  # availability is fixed for a backend object (Numba reads its settings once)
        _ROUTES[b] = (type(b).flce_row_passes is not Backend.flce_row_passes, *registry.available(b))
    offers, ok, why = _ROUTES[b]
    if offers and not ok:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {why}")
    return offers and ok


def _backend(backend) -> Backend:
    return backend if isinstance(backend, Backend) else registry.backend(backend or registry.DEFAULT_ORDER[0])


def row_passes(backend=None):
    """The row passes ``backend`` offers (a name, a Backend, or None for the default's), or None where
    it offers none or they cannot be loaded (Numba missing or broken): the PyTorch ops serve then."""
    try:
        return _backend(backend).flce_row_passes()
    except Exception:
        return None


def native_gemm(dtype: torch.dtype, backend=None) -> bool:
    """True where ``backend``'s engine runs ``dtype``'s gradient GEMMs on native 16-bit kernels (oneDNN)."""
    engine = row_passes(backend)
    return bool(engine is not None and dtype in HALF and engine.native(dtype))


def exact_scale(dtype: torch.dtype, g: float) -> bool:
    """True when ``round(v) * g == round(v * g)`` for every finite 16-bit ``v``: g is 0 or a power of two,
    and for float16 (narrow exponent range) not below 1, so no result drops into the subnormals."""
    return g == 0.0 or (math.isfinite(g) and math.frexp(abs(g))[0] == 0.5
                        and (dtype == torch.bfloat16 or abs(g) >= 1.0))


def run(sh, want, g_all, stats, gz_all=None):
    """The whole batch on the backend's engine (``flce_engine.run``'s arguments and result), with
    :func:`row_passes`' passes (None: PyTorch ops in their place)."""
    passes = row_passes(sh.backend)
    engine = passes or _backend(sh.backend).flce_row_passes()
    if engine is None:
        raise UnsupportedRequestError(f"backend {getattr(sh.backend, 'name', sh.backend)!r} offers no "
                                      "PyTorch-GEMM route for fused_linear_cross_entropy")
    return engine.run(sh, want, g_all, stats, gz_all, passes=passes)
