"""The vocabulary-parallel forward on the CPU: one shard's online max/sum (CANN's
aclnnFusedLinearOnlineMaxSum) and the loss from the all-reduced statistics
(aclnnFusedCrossEntropyLossWithMaxSum).

The shard's logits are produced a vocabulary tile at a time (the FLCE tile budget) by the
backend's GEMM in the compute dtype, and the row statistics are merged across tiles online
(running max, sum rescaled to it), so memory stays bounded unless the caller asks for the
logits. Every statistic accumulates in float32 (float64 for float64 input) and each output is
rounded once.
"""

from __future__ import annotations

import numpy as np

from .flce import plan


def _widened(arr: np.ndarray, cdt) -> np.ndarray:
    return arr if arr.dtype == cdt else arr.astype(cdt)


def online_max_sum(a, backend) -> None:
    """Fill the outputs of a validated :class:`~xloss.kernel_args.OnlineMaxSumArgs`."""
    (bt, _), v = a.input.shape, a.weight.shape[0]
    cdt = a.logits_max_out.dtype
    t = a.target.astype(np.int64, copy=False)
    masked = (t < a.vocab_start) | (t >= a.vocab_end)
    local = np.where(masked, 0, t - a.vocab_start)
    a.masked_target_out[...] = local
    if a.mask_format == "bool":
        a.target_mask_out[...] = masked
    else:  # LSB first, the padding bits of the last byte set
        a.target_mask_out[...] = np.packbits(np.concatenate([masked, np.ones(-bt % 8, bool)]), bitorder="little")
    if bt == 0:
        return
    gemm = backend.gemm()
    inp = _widened(a.input, cdt)
    rows, cols = plan(bt, v, cdt.itemsize, backend.flce_chunk_bytes())
    tile = np.empty((rows, cols), cdt)
    running_max = np.full(bt, -np.inf, cdt)
    running_sum = np.zeros(bt, cdt)
    target_logit = np.zeros(bt, cdt)
    for c0 in range(0, v, cols):
        c1 = min(v, c0 + cols)
        w = _widened(a.weight[c0:c1], cdt)
        for r0 in range(0, bt, rows):
            r1 = min(bt, r0 + rows)
            z = tile[: r1 - r0, : c1 - c0]
            gemm.mm(inp[r0:r1], w.T, z)
            if a.logits_out is not None:
                a.logits_out[r0:r1, c0:c1] = z
            m_old = running_max[r0:r1]
            m_new = np.maximum(m_old, z.max(axis=1))
            with np.errstate(invalid="ignore"):  # -inf - -inf on the first tile: its sum is 0 anyway
                scale = np.where(np.isneginf(m_old), 0.0, np.exp(m_old - m_new))
            running_sum[r0:r1] = running_sum[r0:r1] * scale + np.exp(z - m_new[:, None]).sum(axis=1, dtype=cdt)
            running_max[r0:r1] = m_new
            here = ~masked[r0:r1] & (local[r0:r1] >= c0) & (local[r0:r1] < c1)
            idx = np.flatnonzero(here)
            target_logit[r0 + idx] = z[idx, local[r0 + idx] - c0]
    a.logits_max_out[...] = running_max
    a.sum_exp_out[...] = running_sum
    a.predicted_out[...] = np.where(masked, 0.0, target_logit - running_max)


def loss_with_max_sum(a, backend) -> None:
    """Fill the outputs of a validated :class:`~xloss.kernel_args.LossWithMaxSumArgs`."""
    cdt = a.loss_out.dtype
    with np.errstate(divide="ignore", invalid="ignore"):
        np.subtract(np.log(a.sum_exp_logits), a.predicted_logits, out=a.loss_out)
        if a.softmax_out is None:
            return
        inv = (1.0 / a.sum_exp_logits).astype(cdt)
        np.subtract(_widened(a.vocab_parallel_logits, cdt), a.logits_max[:, None], out=a.softmax_out)
        np.exp(a.softmax_out, out=a.softmax_out)
        np.multiply(a.softmax_out, inv[:, None], out=a.softmax_out)
