"""The matrix products of the FLCE kernel, on the fastest BLAS at hand.

Two providers with one interface: PyTorch's (MKL / oneDNN on x86 builds, reached through
zero-copy ``torch.from_numpy`` views; it accumulates in place with ``addmm_``) and NumPy's
(OpenBLAS in the wheels; an accumulating product goes through a scratch buffer). ``auto``
takes PyTorch when it is installed: on the reference machine its sgemm ran these shapes
about 12 % faster than NumPy's (``benchmarks/cpu_targets.py --only gemm`` measures it).
Both take transposed operands as views, without copies.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from .access import writeable

CHOICES = ("auto", "torch", "numpy")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


class NumpyGemm:
    name = "numpy"

    def mm(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """out = a @ b"""
        np.matmul(a, b, out=out)

    def mm_add(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
        """out += a @ b (``scratch``: out's shape and dtype)."""
        np.matmul(a, b, out=scratch)
        np.add(out, scratch, out=out)

    def needs_scratch(self) -> bool:
        return True

    def native_bf16(self) -> bool:
        return False  # NumPy has no bf16 GEMM


class TorchGemm:
    name = "torch"

    def __init__(self):
        import torch

        self._torch = torch
        self._bf16 = None

    def _t(self, arr):
        return self._torch.from_numpy(writeable(arr))  # read-only inputs: torch would warn

    def mm(self, a, b, out):
        self._torch.mm(self._t(a), self._t(b), out=self._t(out))

    def mm_add(self, a, b, out, scratch=None):
        self._t(out).addmm_(self._t(a), self._t(b))

    def needs_scratch(self) -> bool:
        return False

    def native_bf16(self) -> bool:
        """Whether PyTorch runs bf16 GEMMs on native bf16 hardware kernels (oneDNN: AVX512-BF16, AMX)."""
        if self._bf16 is None:
            torch = self._torch
            try:
                self._bf16 = bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
            except (AttributeError, RuntimeError):
                self._bf16 = False
        return self._bf16


def make(choice: str):
    """The provider for ``choice`` ("auto", "torch" or "numpy")."""
    if choice not in CHOICES:
        raise ValueError(f"blas must be one of {', '.join(map(repr, CHOICES))}; got {choice!r}")
    if choice == "torch" or (choice == "auto" and torch_available()):
        return TorchGemm()
    return NumpyGemm()
