"""FLCE gradients for bfloat16 operands on native 16-bit GEMMs (PyTorch's oneDNN kernels).

Used by :mod:`.flce` when the inputs are bfloat16, the BLAS provider is PyTorch's and the CPU
has native bf16 GEMMs (AVX512-BF16 or AMX: about 2.5× float32 on the reference AMD machine).
PyTorch's CPU bf16 products accumulate in float32 but can only return bf16 (there is no float32
output for bf16 operands on CPU), so a partial sum that must stay float32 is taken as two bf16
GEMMs, ``hi + lo`` (:func:`.gemm.product_into`: about 16 significant bits, far below the bf16
rounding of the final result). The logits the softmax is taken of are float32 products of the
widened operands (:func:`.gemm.logits_f32`, as ``xloss.torch``'s engine takes them): never rounded
to 16 bits. Per tile of G (rows × column chunk):

1. logits in float32 (recompute mode), or the given softmax;
2. the Numba pass of :mod:`.flce` turns the tile into G in float32; G is rounded once to bf16
   (as the Ascend kernel rounds it before its products);
3. ``weight_grad[cols] = G.T @ input``: one GEMM when the tile spans every token (the usual
   case), written once; otherwise ``hi + lo`` accumulated in float32;
4. ``input_grad[rows] += G @ weight[cols]``: ``hi + lo`` accumulated in float32 (one GEMM when
   the vocabulary is one column chunk).

Each output is rounded to bf16 once, at the end (or written once by its single GEMM).
"""

from __future__ import annotations

import numpy as np

from . import gemm as _gemm
from .access import convert_into, storage_view, writeable
from .layout import threads_for


def applies(a, gemm) -> bool:
    """bfloat16 operands and a provider with native bf16 GEMMs."""
    return a.input.dtype.itemsize == 2 and a.input.dtype != np.float16 and gemm.native_bf16()


def _to_f32(src, dst) -> None:
    with threads_for(src.size):
        convert_into(src, dst)


def run(a, gemm, rows: int, cols: int, ig_out: np.ndarray, wg_out: np.ndarray, passes) -> None:
    """Fill ``ig_out``/``wg_out`` (bf16 arrays) for a validated FLCEArgs; ``rows``×``cols`` tiles."""
    import torch

    recompute_pass, softmax_pass = passes
    (bt, h), v = a.input.shape, a.weight.shape[0]
    bf = torch.bfloat16

    def t16(arr):  # a bf16 NumPy array as a torch bf16 tensor, zero-copy
        return torch.from_numpy(writeable(storage_view(arr))).view(bf)

    x16, w16 = t16(a.input), t16(a.weight)
    x32 = x16.float() if a.mode == "recompute" else None  # (the input widened once: exact)
    ig32 = torch.empty(bt, h)  # float32 accumulator for the input gradient
    wg16 = t16(wg_out)
    one_col_chunk, one_row_tile = cols >= v, rows >= bt
    wg32 = None if one_row_tile else torch.empty(cols, h)
    tile_np = np.empty(rows * cols, np.float32)
    tile32 = torch.from_numpy(tile_np)
    g16_buf = torch.empty(rows * cols, dtype=bf)

    mask = writeable(a.target_mask).view(np.uint8)
    packed = a.mask_format == "bitpacked"
    mt = writeable(a.masked_target.astype(np.int64, copy=False))
    grad = writeable(a.grad)
    smooth = a.label_smoothing / a.vocab_size if a.label_smoothing else 0.0
    hit = 1.0 - a.label_smoothing

    for c0 in range(0, v, cols):
        nc = min(cols, v - c0)
        wc = w16[c0:c0 + nc]
        for r0 in range(0, bt, rows):
            nr = min(rows, bt - r0)
            tile = tile_np[:nr * nc].reshape(nr, nc)
            xr = x16[r0:r0 + nr]
            if a.mode == "recompute":
                _gemm.logits_f32(tile32[:nr * nc].view(nr, nc), x32[r0:r0 + nr], wc)
                with threads_for(tile.size):
                    recompute_pass(tile, r0, c0, writeable(a.logits_max), writeable(a.sum_exp_logits), grad,
                                   mask, packed, mt, smooth, hit)
            else:
                with threads_for(tile.size):
                    softmax_pass(tile, writeable(a.softmax), r0, c0, grad, mask, packed, mt, smooth, hit)
            g16 = g16_buf[:nr * nc].view(nr, nc)
            g16.copy_(tile32[:nr * nc].view(nr, nc))  # G rounded once to bf16
            _accumulate(ig32[r0:r0 + nr], g16, wc, first=c0 == 0, exact=one_col_chunk)
            if one_row_tile:
                torch.mm(g16.T, xr, out=wg16[c0:c0 + nc])  # one GEMM over every token: rounded once
            else:
                _accumulate(wg32[:nc], g16.T, xr, first=r0 == 0, exact=False)
        if not one_row_tile:
            wg16[c0:c0 + nc].copy_(wg32[:nc])
    t16(ig_out).copy_(ig32)


def _accumulate(acc32, a16, b16, first: bool, exact: bool) -> None:
    """``acc32 (=|+=) a16 @ b16`` in float32; ``exact``: this is the only term, one GEMM suffices
    (its bf16 result is what the output will be rounded to anyway)."""
    if exact:
        acc32.copy_(a16 @ b16) if first else acc32.add_(a16 @ b16)
    else:
        _gemm.product_into(acc32, a16, b16, first)
