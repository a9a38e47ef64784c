"""The fused linear-cross-entropy on a backend's PyTorch-GEMM route: a thin adapter.

The engine is the backend's: ``Backend.flce_row_passes()`` returns it (the ``cpu`` backend's lives in
``backends/cpu_onednn/flce_engine.py``, with the numerics: float32 logits for 16-bit operands, never
rounded to 16 bits; G rounded once to the operand dtype for the two gradient GEMMs). This module asks
the backend object for it and keeps the names the rest of ``xloss.torch`` uses.
"""

from __future__ import annotations

import math

import torch

from .. import registry
from ..backend import Backend
from ..errors import UnsupportedRequestError

HALF = (torch.bfloat16, torch.float16)
DTYPES = HALF + (torch.float32,)  # what this path serves by default (float64 goes through the backend kernel)
# float64 takes this path too when a call needs what only it computes (softcap, z-loss)


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
    if not math.isfinite(g) or math.frexp(abs(g))[0] != 0.5:
        return False
    return dtype == torch.bfloat16 or abs(g) >= 1.0


def run(sh, want, g_all: torch.Tensor | None, stats: tuple | None, gz_all: torch.Tensor | None = None):
    """The whole batch on the backend's engine (``sh``: an ``xloss.torch.flce_chunks.Shard``). ``g_all``:
    per-token upstream gradient of the cross entropy (compute dtype, BT) or None for no gradients;
    ``gz_all``: that of the z-loss; ``stats``: saved (row max, sum of exponentials) to skip the statistics
    (backward), or None. Returns (per-token loss/z-loss/correct or None, (row max, sum exp), (dx, dw, db))."""
    passes = row_passes(sh.backend)
    engine = passes if passes is not None else _backend(sh.backend).flce_row_passes()
    if engine is None:
        raise UnsupportedRequestError(f"backend {getattr(sh.backend, 'name', sh.backend)!r} offers no "
                                      "PyTorch-GEMM route for fused_linear_cross_entropy")
    return engine.run(sh, want, g_all, stats, gz_all, passes=passes)
