"""What is benchmarked: one workload per kernel × mode × size × dtype, with its inputs and the
work it implies (bytes that must move, or FLOPs for the GEMM-bound FLCE)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as xdt
from .. import memory
from ..errors import XLossValueError
from ..kernels import ALIASES as TABLE_ALIASES
from ..kernels import KERNELS as KERNEL_TABLE

#: Timed workloads that are not one kernel (a training step): the rows' ``bench_steps``.
STEPS = {step.name: step for row in KERNEL_TABLE.values() for step in map(row.resolve, row.bench_steps)}
KERNELS = tuple(KERNEL_TABLE) + tuple(STEPS)
ALIASES = {**TABLE_ALIASES, **{k: k for k in STEPS}}
DTYPES = tuple(xdt.FLOAT_DTYPES)
#: Dimensions of a size, per kernel: N; N x C; BT x H x V (lm_step: tokens x hidden x vocab).
DIMS = {**{k: row.bench_dims for k, row in KERNEL_TABLE.items()}, **{k: s.dims for k, s in STEPS.items()}}

#: Default sizes (full, --quick), from the kernel table.
FULL_SIZES = {**{k: [row.bench_sizes[0]] for k, row in KERNEL_TABLE.items()},
              **{k: [s.sizes[0]] for k, s in STEPS.items()}}
QUICK_SIZES = {**{k: [row.bench_sizes[1]] for k, row in KERNEL_TABLE.items()},
               **{k: [s.sizes[1]] for k, s in STEPS.items()}}


def cell_weight(kernel: str, quick: bool) -> float:
    """The relative cost of a cell of ``kernel``: its share of the run's budget."""
    return (STEPS[kernel].weight if kernel in STEPS else KERNEL_TABLE[kernel].bench_weight)[quick]


@dataclass
class Workload:
    kernel: str
    mode: str
    size: str
    dtype: str
    inputs: dict = field(repr=False)
    bytes_moved: int | None = None  # every operand read or written once (the bandwidth floor)
    flops: int | None = None  # for GEMM-bound kernels

    @property
    def key(self) -> str:
        return f"{self.kernel} {self.mode} {self.size} {self.dtype}"


def parse_count(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not m:
        raise XLossValueError(f"not a size: {text!r} (e.g. 8M, 4096, 32768x1000, 2048x1024x32000)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def parse_dims(text: str, n: int) -> tuple[int, ...]:
    parts = [parse_count(p) for p in text.lower().split("x")]
    if len(parts) != n:
        raise XLossValueError(f"size {text!r} needs {n} dimensions separated by 'x'")
    return tuple(parts)


def sizes_for(kernel: str, requested: list[str] | None, quick: bool) -> list[str]:
    """The sizes of ``kernel`` among ``requested`` (by form: N, NxC, BTxHxV), else the defaults."""
    if not requested:
        return (QUICK_SIZES if quick else FULL_SIZES)[kernel]
    return [s for s in requested if len(s.lower().split("x")) == DIMS[kernel]]


def check_sizes(sizes: list[str], kernels: list[str], dtype: str = "float32") -> None:
    """Raise :class:`XLossValueError` (one line) for a size that does not parse, that no selected
    kernel takes, or whose cell would need more memory than this machine has available."""
    for text in sizes:
        if not isinstance(text, str):
            raise XLossValueError(f"size must be a string such as 8M or 2048x1024x32000; got {text!r}")
        n = len(text.lower().split("x"))
        try:
            dims = parse_dims(text, n)
        except ValueError as exc:
            raise XLossValueError(f"bad size {text!r}: {exc}") from None
        if n > 3 or min(dims) < 1:
            raise XLossValueError(f"bad size {text!r}: give N, NxC or BTxHxV with every dimension at least 1")
        takers = [k for k in kernels if DIMS[k] == n]
        if not takers:
            forms = ", ".join(f"{k} takes {DIMS[k]} dimension(s)" for k in kernels)
            raise XLossValueError(f"size {text!r} fits none of the selected kernels ({forms})")
        available = memory.available_bytes()
        need = max(memory_bytes(k, dims, dtype) for k in takers)
        if available is not None and need > available:
            raise XLossValueError(f"size {text!r} needs about {need / 2**30:.3g} GiB in {dtype} (inputs, outputs and "
                                  f"the alternatives' temporaries); {available / 2**30:.1f} GiB is available here")


def memory_bytes(kernel: str, dims: tuple[int, ...], dtype: str) -> int:
    """A generous estimate of a cell's memory at its peak: the inputs, the outputs, and the largest
    alternative's temporaries (autograd's, the float64 reference's, materialised logits)."""
    isz = xdt.FLOAT_DTYPES[dtype].itemsize
    if DIMS[kernel] == 1:
        return dims[0] * (3 * isz + 12 * 8)
    if DIMS[kernel] == 2:
        return dims[0] * dims[1] * (2 * isz + 4 * 8)
    if kernel in STEPS:
        return STEPS[kernel].memory_bytes(dims)
    bt, h, v = dims
    return (bt * h + v * h) * (2 * isz + 16) + bt * v * (3 * 4 + 2 * 8)


def build(kernel: str, mode: str, size: str, dtype: str, seed: int = 0) -> Workload:
    """The workload of a kernel of the table (its row's ``workload`` builder)."""
    if kernel not in KERNEL_TABLE:
        raise ValueError(f"unknown kernel {kernel!r}")
    return KERNEL_TABLE[kernel].load("workload")(mode, size, dtype, np.random.default_rng(seed))


def focal(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n = parse_count(size)
    x = (rng.standard_normal(n, dtype=np.float32) * 3).astype(dt)
    y = (rng.random(n, dtype=np.float32) < 0.1).astype(dt)
    writes = {"forward": 0, "grad": 1, "forward+grad": 1}[mode]  # mean: the loss is a scalar
    return Workload("focal_loss", mode, size, dtype, {"x": x, "y": y}, bytes_moved=(2 + writes) * n * dt.itemsize)


def bce(mode: str, size: str, dtype: str, rng) -> Workload:
    dt = xdt.FLOAT_DTYPES[dtype]
    n = parse_count(size)
    x = rng.uniform(0.001, 0.999, n).astype(np.float32).astype(dt)
    y = (rng.random(n, dtype=np.float32) < 0.5).astype(dt)
    w = rng.uniform(0, 2, n).astype(np.float32).astype(dt)
    return Workload("bce_grad", mode, size, dtype, {"x": x, "y": y, "weight": w}, bytes_moved=4 * n * dt.itemsize)


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
