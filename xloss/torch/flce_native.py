"""The fused linear-cross-entropy on a backend's PyTorch-GEMM route: a thin adapter to the engine that
``Backend.flce_row_passes()`` returns (the ``cpu`` backend's: ``backends/cpu_onednn/flce_engine.py``, with
the numerics: float32 logits for 16-bit operands; G rounded once to the operand dtype for the two GEMMs).
"""

from __future__ import annotations

import math

import torch

from .. import registry
from ..backend import Backend
from ..errors import UnsupportedRequestError

HALF = (torch.bfloat16, torch.float16)
# what this path serves by default; float64 goes through the backend kernel unless it needs what only this
# path computes (softcap, z-loss)
DTYPES = HALF + (torch.float32,)


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
    """True where ``backend``'s engine (the default backend's for None) runs ``dtype``'s gradient GEMMs on
    native 16-bit hardware kernels (oneDNN)."""
    engine = row_passes(backend)
    return bool(engine is not None and dtype in HALF and engine.native(dtype))


def exact_scale(dtype: torch.dtype, g: float) -> bool:
    """True when ``round(v) * g == round(v * g)`` for every finite 16-bit ``v``: g is 0 or a power of two,
    and for float16 (narrow exponent range) not below 1, so no result drops into the subnormals."""
    if g == 0.0:
        return True
    return math.isfinite(g) and math.frexp(abs(g))[0] == 0.5 and (dtype == torch.bfloat16 or abs(g) >= 1.0)


def run(sh, want, g_all, stats, gz_all=None):
    """The whole batch on the backend's engine (``sh``: a :class:`.flce_chunks.Shard`; the arguments and
    result: ``backends/cpu_onednn/flce_engine.run``). The row passes are :func:`row_passes`' (None: the
    engine runs PyTorch ops in their place)."""
    passes = row_passes(sh.backend)
    engine = passes if passes is not None else _backend(sh.backend).flce_row_passes()
    if engine is None:
        raise UnsupportedRequestError(f"backend {getattr(sh.backend, 'name', sh.backend)!r} offers no "
                                      "PyTorch-GEMM route for fused_linear_cross_entropy")
    return engine.run(sh, want, g_all, stats, gz_all, passes=passes)
