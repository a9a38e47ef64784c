"""The ``cpu`` backend: fused, parallel, vectorized Numba kernels (see this folder's README).

Importing this package needs only NumPy: Numba (and, for the FLCE products, PyTorch or
NumPy's BLAS) is imported when a kernel first runs, so a machine without Numba sees the
backend as unavailable (:meth:`CpuBackend.availability`) instead of failing to import.
"""

from __future__ import annotations

from .cpu_backend import CpuBackend


def make_backend(**options) -> CpuBackend:
    """The ``cpu`` backend. Options: ``threads`` (Numba threads for its calls; default: Numba's
    current setting), ``blas`` ("auto", "torch" or "numpy": the FLCE matrix products),
    ``flce_chunk_bytes`` (the FLCE tile budget, bytes)."""
    return CpuBackend(**options)


__all__ = ["CpuBackend", "make_backend"]
