"""What is benchmarked: one workload per kernel × mode × size × dtype, with its inputs and the
work it implies (bytes that must move, or FLOPs for the GEMM-bound FLCE)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as xdt
from .. import memory
from ..errors import XLossValueError
from ..kernels import ALIASES as TABLE_ALIASES
from ..kernels import KERNELS as KERNEL_TABLE

DTYPES = tuple(xdt.FLOAT_DTYPES)


def steps() -> dict:
    """Timed workloads that are not one kernel (a training step): the rows' ``bench_steps``. Read
    on use, not at import: a family's step module may import this one."""
    return {step.name: step for row in KERNEL_TABLE.values() for step in map(row.resolve, row.bench_steps)}


def _by_kernel(of_row, of_step) -> dict:
    return {**{k: of_row(row) for k, row in KERNEL_TABLE.items()}, **{k: of_step(s) for k, s in steps().items()}}


def size_dims() -> dict:
    """Dimensions of a size, per kernel: N; N x C; BT x H x V (lm_step: tokens x hidden x vocab)."""
    return _by_kernel(lambda r: r.bench_dims, lambda s: s.dims)


def default_sizes(quick: bool) -> dict:
    """The sizes a run takes when none are given, per kernel."""
    return _by_kernel(lambda r: [r.bench_sizes[quick]], lambda s: [s.sizes[quick]])


#: the tables read on use, as module attributes (for the CLI and the tests)
_ON_USE = {
    "STEPS": steps,
    "KERNELS": lambda: tuple(KERNEL_TABLE) + tuple(steps()),
    "ALIASES": lambda: {**TABLE_ALIASES, **{k: k for k in steps()}},
    "DIMS": size_dims,
    "FULL_SIZES": lambda: default_sizes(False),
    "QUICK_SIZES": lambda: default_sizes(True),
}


def __getattr__(name):
    if name in _ON_USE:
        return _ON_USE[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cell_weight(kernel: str, quick: bool) -> float:
    """The relative cost of a cell of ``kernel``: its share of the run's budget."""
    found = steps().get(kernel)
    return (found.weight if found else KERNEL_TABLE[kernel].bench_weight)[quick]


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
        return default_sizes(quick)[kernel]
    n = size_dims()[kernel]
    return [s for s in requested if len(s.lower().split("x")) == n]


def check_sizes(sizes: list[str], kernels: list[str], dtype: str = "float32") -> None:
    """Raise :class:`XLossValueError` (one line) for a size that does not parse, that no selected
    kernel takes, or whose cell would need more memory than this machine has available."""
    dims_of = size_dims()
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
        takers = [k for k in kernels if dims_of[k] == n]
        if not takers:
            forms = ", ".join(f"{k} takes {dims_of[k]} dimension(s)" for k in kernels)
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
    n = size_dims()[kernel]
    if n == 1:
        return dims[0] * (3 * isz + 12 * 8)
    if n == 2:
        return dims[0] * dims[1] * (2 * isz + 4 * 8)
    step = steps().get(kernel)
    if step is not None:
        return step.memory_bytes(dims)
    bt, h, v = dims
    return (bt * h + v * h) * (2 * isz + 16) + bt * v * (3 * 4 + 2 * 8)


def build(kernel: str, mode: str, size: str, dtype: str, seed: int = 0) -> Workload:
    """The workload of a kernel of the table (its row's ``workload`` builder)."""
    if kernel not in KERNEL_TABLE:
        raise ValueError(f"unknown kernel {kernel!r}")
    return KERNEL_TABLE[kernel].load("workload")(mode, size, dtype, np.random.default_rng(seed))
