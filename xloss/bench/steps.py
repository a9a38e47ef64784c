"""A timed workload that is not one kernel (a training step alternating torch layers and a kernel):
what ``xloss bench`` needs to plan, size and run its cells. A row lists its steps in ``bench_steps``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    name: str  # the bench's name for it, used like a kernel name (``--kernels lm_step``)
    dims: int  # dimensions of a size
    sizes: tuple[str, str]  # (default size, --quick size)
    modes: tuple[str, ...]
    weight: tuple[float, float]  # a cell's share of the budget (default, --quick)
    memory_bytes: Callable[[tuple[int, ...]], int]  # generous peak memory of a cell of these dims
    #: (mode, size, config, torch, budget_s, max_call_s, say, sample_s, floor_s) -> the cell's dict
    run: Callable[..., dict]
