"""The matrix products of the FLCE kernel, on the fastest BLAS at hand.

Two providers with one interface: PyTorch's (MKL / oneDNN on x86 builds, reached through
zero-copy ``torch.from_numpy`` views; it accumulates in place with ``addmm_``) and NumPy's
(OpenBLAS in the wheels; an accumulating product goes through a scratch buffer). ``auto``
takes PyTorch when it is installed: on the reference machine its sgemm ran these shapes
about 12 % faster than NumPy's (``benchmarks/cpu_targets.py --only gemm`` measures it).
Both take transposed operands as views, without copies.

The torch-tensor helpers below serve both FLCE entry points (the NumPy API's :mod:`.flce` and
``xloss.torch``'s :mod:`.flce_engine`), so each fact about PyTorch's CPU GEMMs lives here once:

* :func:`native`: whether 16-bit GEMMs run on native hardware kernels (oneDNN: AVX512-BF16, AMX);
* :func:`logits_f32`: float32 logits of 16-bit operands, never rounded to 16 bits. Where the optional
  ``onednn-cpu-gomp`` wheel is installed, bf16 operands go to oneDNN's matmul with a float32
  destination (:mod:`.dnnl_matmul`: 0.8-0.9x the time of ``torch.mm``'s bf16 GEMM on the reference
  machine, 2.3-2.6x as fast as the route below); otherwise, and for float16: PyTorch's CPU
  GEMMs of bfloat16 operands return only bfloat16 (``mm(out_dtype=float32)`` is not implemented on
  CPU; MKL's ``cblas_gemm_bf16bf16f32``, exported by this build, ran at float32 speed on the
  reference AMD machine). The products of 16-bit values are exact in float32, so the operands are
  widened (exactly) and multiplied by oneDNN's float32 kernel (``mkldnn._linear_pointwise``), which
  was 2.0-2.5x as fast as ``torch.mm``'s float32 GEMM (MKL) and as fast as the ``hi + lo`` split
  below, whose logits carry only ~2**-18 relative error (measured at BT 2048, H 1024, V 8000/32000);
* :func:`product_into`: ``acc (=|+=) a @ b``, a float32 accumulator of 16-bit products as ``hi + lo``.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from . import dnnl_matmul as _dnnl_matmul
from .access import writeable

CHOICES = ("auto", "torch", "numpy")
_NATIVE: dict = {}  # torch dtype -> bool


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
        return native(self._torch.bfloat16)


def make(choice: str):
    """The provider for ``choice`` ("auto", "torch" or "numpy")."""
    if choice not in CHOICES:
        raise ValueError(f"blas must be one of {', '.join(map(repr, CHOICES))}; got {choice!r}")
    if choice == "torch" or (choice == "auto" and torch_available()):
        return TorchGemm()
    return NumpyGemm()


# -- torch tensors: shared by both FLCE entry points ------------------------------------------------


def native(dtype) -> bool:
    """True where PyTorch runs ``dtype`` (a torch 16-bit dtype) GEMMs on native 16-bit kernels (oneDNN)."""
    known = _NATIVE.get(dtype)
    if known is None:
        import torch

        check = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}.get(dtype)
        try:
            known = bool(check and torch.backends.mkldnn.is_available() and getattr(torch.ops.mkldnn, check)())
        except (AttributeError, RuntimeError):
            known = False
        _NATIVE[dtype] = known
    return known


def logits_f32(out, x32, w16, b=None, cols: int | None = None) -> None:
    """``out = x32 @ w16.T (+ b)`` in float32 (out: (M, V) float32, may be a column slice; x32: (M, H),
    the 16-bit operand widened to float32, or the 16-bit operand itself; w16: (V, H) 16-bit; b: (V,) or
    None). First route: oneDNN's bf16 matmul with a float32 destination (:mod:`.dnnl_matmul`, where the
    optional library is installed). Otherwise the weight is widened ``cols`` rows at a time (all at
    once by default), so the float32 copy stays a tile, and multiplied in float32."""
    import torch

    if w16.dtype == torch.bfloat16 and _dnnl_matmul.available():
        x16 = _narrowed(x32, w16.dtype)
        if x16 is not None and _dnnl_matmul.logits(out, x16, w16, b):
            return
    if x32.dtype != torch.float32:
        x32 = x32.float()
    v = w16.shape[0]
    step = v if not cols else max(1, cols)
    for c0 in range(0, v, step):
        c1 = min(v, c0 + step)
        w32 = w16[c0:c1].float()
        b32 = None if b is None else b[c0:c1].float()
        _linear_f32(out[:, c0:c1], x32, w32, b32, torch)
        del w32, b32  # (before the next tile's: one float32 tile at a time)


def _narrowed(x, dt):
    """``x`` in the 16-bit ``dt``: itself, or its float32 widening narrowed back (exactly), else None."""
    import torch

    if x.dtype == dt:
        return x
    if x.dtype != torch.float32:
        return None
    x16 = x.to(dt)
    return x16 if torch.equal(x16.float(), x) else None  # (a float32 operand that was not a widening: declined)


def _linear_f32(out, x32, w32, b32, torch) -> None:
    if x32.shape[1] and out.numel() and torch.backends.mkldnn.is_available():
        try:  # oneDNN's float32 inner product (AVX-512 on AMD too, where MKL's sgemm takes AVX2 paths)
            out.copy_(torch.ops.mkldnn._linear_pointwise(x32, w32, b32, "none", [], ""))
            return
        except (AttributeError, RuntimeError, NotImplementedError):
            pass
    torch.mm(x32, w32.T, out=out) if b32 is None else torch.addmm(b32, x32, w32.T, out=out)


def product_into(acc, a, b, first: bool) -> None:
    """``acc (=|+=) a @ b``. A 16-bit ``acc`` is written by one GEMM; a float32 ``acc`` takes a 16-bit
    product as ``hi + lo`` — ``hi`` the rounded product, ``lo = round(a @ b - hi)`` from a second GEMM
    that subtracts ``hi`` inside its float32 accumulator (``addmm`` with beta -1), so ``hi + lo``
    carries about 16 significant bits — and a float32 (float64) product directly."""
    import torch

    if acc.dtype == a.dtype and a.dtype in (torch.float32, torch.float64):
        torch.mm(a, b, out=acc) if first else acc.addmm_(a, b)
    elif a.dtype in (torch.float32, torch.float64):  # a wider accumulator (accum_dtype)
        p = torch.mm(a, b)
        acc.copy_(p) if first else acc.add_(p)
    elif acc.dtype == a.dtype:
        torch.mm(a, b, out=acc)
    else:
        hi = torch.mm(a, b)
        acc.copy_(hi) if first else acc.add_(hi)  # (a float32 add: not add(out=), which adds in 16 bits)
        acc.add_(hi.addmm_(a, b, beta=-1))  # lo, in hi's buffer
