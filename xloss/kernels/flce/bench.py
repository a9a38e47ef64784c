"""The FLCE family's bench: the workload builders (one per kernel of the family) and the candidates each
is timed on (:class:`xloss.bench.impls.KernelImpls`, linked as the rows' ``workload`` and ``bench``)."""

from __future__ import annotations

import math

import numpy as np

from xloss import dtypes as xdt
from xloss.bench.impls import FLOOR, PYTORCH, Candidate, KernelImpls
from xloss.bench.workloads import Workload, parse_dims

from . import api

# -- workloads ---------------------------------------------------------------------------------------


def flce(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    bt, h, v = parse_dims(size, 3)
    x = (rng.standard_normal((bt, h), dtype=np.float32) / math.sqrt(h)).astype(dt)
    w = rng.standard_normal((v, h), dtype=np.float32).astype(dt)
    t = rng.integers(0, v, bt)
    logits = x.astype(np.float32) @ w.astype(np.float32).T
    m = logits.max(axis=1)
    se = np.exp(logits - m[:, None]).sum(axis=1)
    del logits
    inputs = {"grad": np.full(bt, 1.0 / bt, np.float32), "input": x, "weight": w,
              "target_mask": np.zeros(bt, bool), "masked_target": t, "logits_max": m.astype(np.float32),
              "sum_exp_logits": se.astype(np.float32), "target": t}
    return Workload("fused_linear_cross_entropy_grad", "recompute", size, dtype, inputs, flops=3 * 2 * bt * h * v)


def online_max_sum(mode: str, size: str, dtype: str, rng) -> Workload:
    """One vocabulary shard (rows 0..V of a vocabulary of 2V: half the targets fall outside it)."""
    dt = xdt.FLOAT_DTYPES[dtype]
    bt, h, v = parse_dims(size, 3)
    x = (rng.standard_normal((bt, h), dtype=np.float32) / math.sqrt(h)).astype(dt)
    w = rng.standard_normal((v, h), dtype=np.float32).astype(dt)
    inputs = {"input": x, "weight": w, "target": rng.integers(0, 2 * v, bt)}
    return Workload("fused_linear_online_max_sum", "forward", size, dtype, inputs, flops=2 * bt * h * v)


def loss_with_max_sum(mode: str, size: str, dtype: str, rng) -> Workload:
    """The loss and the softmax of one shard's logits (BT, V) from all-reduced statistics (a global
    max above the shard's, a sum above its own, as after a reduction over shards)."""
    dt = xdt.FLOAT_DTYPES[dtype]
    cdt = xdt.compute_dtype(dtype)
    bt, v = parse_dims(size, 2)
    logits = (rng.standard_normal((bt, v), dtype=np.float32) * 3).astype(dt)
    z = logits.astype(cdt)
    m = z.max(axis=1) + rng.uniform(0, 1, bt).astype(cdt)
    se = np.exp(z - m[:, None]).sum(axis=1, dtype=cdt) * 2
    predicted = z[np.arange(bt), rng.integers(0, v, bt)] - m
    del z
    inputs = {"logits": logits, "logits_max": m.astype(cdt), "sum_exp_logits": se.astype(cdt),
              "predicted_logits": predicted.astype(cdt)}
    moved = bt * v * (dt.itemsize + np.dtype(cdt).itemsize) + 4 * bt * np.dtype(cdt).itemsize
    return Workload("fused_cross_entropy_loss_with_max_sum", "softmax", size, dtype, inputs, bytes_moved=moved)


# -- fused linear cross-entropy gradient ----------------------------------------------------------------


def _flce_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_linear_cross_entropy_grad(
        i["grad"], i["input"], i["weight"], i["target_mask"], i["masked_target"], logits_max=i["logits_max"],
        sum_exp_logits=i["sum_exp_logits"], backend=b))]


def _flce_torch(w: Workload, i, torch, compile_):
    import torch.nn.functional as F

    def materialised():
        xg, wg = i["input"].detach().requires_grad_(), i["weight"].detach().requires_grad_()
        F.cross_entropy(xg @ wg.T, i["target"], reduction="mean").backward()
        return xg.grad, wg.grad

    def bare_gemms():
        logits = i["input"] @ i["weight"].T
        return logits @ i["weight"], logits.T @ i["input"]

    return [Candidate("torch materialised", materialised, PYTORCH, "input @ weight.T + cross_entropy"),
            Candidate("3 bare GEMMs", bare_gemms, FLOOR, "the GEMM floor (torch.mm)")], []


# -- vocabulary-parallel online max/sum (one shard) -----------------------------------------------------


def _online_max_sum_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_linear_online_max_sum(i["input"], i["weight"], i["target"], 0, backend=b))]


def _online_max_sum_torch(w: Workload, i, torch, compile_):
    x, wt, t = i["input"], i["weight"], i["target"]
    v = wt.shape[0]

    def eager():  # the shard's statistics in float32 (float64 for float64), as the kernel returns them
        with torch.no_grad():
            logits = x @ wt.T
            z = logits if logits.dtype == torch.float64 else logits.float()
            m = z.amax(dim=1)
            sum_exp = torch.exp(torch.logsumexp(z, dim=1) - m)
            masked = (t < 0) | (t >= v)
            local = torch.where(masked, 0, t)
            predicted = torch.where(masked, 0.0, z.gather(1, local[:, None]).squeeze(1) - m)
            return m, sum_exp, predicted, masked, local

    return [Candidate("torch eager", eager, PYTORCH,
                      "x @ w.T (logits in the input dtype), amax, logsumexp, gather; mask as bool"),
            Candidate("bare GEMM", lambda: x @ wt.T, FLOOR, "the GEMM floor (torch.mm, input dtype)")], []


# -- vocabulary-parallel loss with max/sum ----------------------------------------------------------


def _loss_with_max_sum_xloss(w: Workload, b):
    i = w.inputs
    return [("", lambda: api.fused_cross_entropy_loss_with_max_sum(
        i["logits_max"], i["sum_exp_logits"], i["predicted_logits"], vocab_parallel_logits=i["logits"], backend=b))]


def _loss_with_max_sum_torch(w: Workload, i, torch, compile_):
    m, se, p, z = i["logits_max"], i["sum_exp_logits"], i["predicted_logits"], i["logits"]

    def eager():
        loss = torch.log(se) - p
        return loss, torch.exp(z.to(m.dtype) - m[:, None]) / se[:, None]

    out = np.empty(w.inputs["logits"].shape, w.inputs["logits_max"].dtype)
    return [Candidate("torch eager", eager, PYTORCH, "log(sum_exp) - predicted; exp(logits - max) / sum_exp"),
            Candidate("memset of the softmax", lambda: out.fill(0), FLOOR, "writing the (BT, V) softmax")], []


FLCE_IMPLS = KernelImpls("torch materialised", _flce_xloss, _flce_torch)
ONLINE_MAX_SUM_IMPLS = KernelImpls("torch eager", _online_max_sum_xloss, _online_max_sum_torch)
LOSS_WITH_MAX_SUM_IMPLS = KernelImpls("torch eager", _loss_with_max_sum_xloss, _loss_with_max_sum_torch)
