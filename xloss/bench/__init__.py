"""``xloss bench``: every backend and the usual alternatives, side by side, in one process.

    from xloss.bench import BenchConfig, run
    result = run(BenchConfig(quick=True))      # a JSON-able dict; see xloss.bench.cells

A run has a time budget (``--quick``: 40 s, default: 240 s, so the whole command stays within
a minute and five minutes, busy machine or not); each cell (kernel x mode x size x dtype) gets
a share of what is left. Within it every implementation is called once (compiling or loading),
calibrated (pyperf-style loop counts) and sampled in interleaved rounds as long as the budget
allows (:mod:`xloss.bench.sampling`); a slow implementation gets fewer samples, and one is
skipped only when one call, measured, exceeds the limit. Each speed-up over the PyTorch baseline
comes with a paired bootstrap interval; "faster" or "slower" is said only where it excludes 1
(:mod:`xloss.bench.stats`). Wall time is reported with the CPU time of this process's threads
and the calling thread's. The vendor-ABI backends (xloss's C emulators) are correctness
stand-ins: measured only when asked (``emulators=True`` or by name) and never ranked.
``lm_step`` times a small language-model training step (stock PyTorch against the fused loss),
idle and with a competing busy process. Warnings say when the machine was busy or the spread
wide, with the load seen.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from .. import registry
from ..errors import XLossValueError
from . import cells, impls, machine, report, sampling, timing, workloads

#: Version of the JSON a run writes (2: time budgets, per-sample times, intervals).
SCHEMA = 2
#: The whole run's budget in seconds (--quick, default): the issue's 60 s and 5 minutes, less a
#: margin for starting Python, measuring the machine's ceilings and writing the reports.
RUN_BUDGET_S = {True: 40.0, False: 240.0}
#: A sample lasts at least this long (seconds; --quick, default): a clock reading of a few
#: microseconds would measure the timer, not the kernel.
MIN_SAMPLE_S = {True: 0.01, False: 0.05}
#: A run taking more than this multiple of its budget says so.
OVERRUN = 1.1
#: A cell never gets less than this (seconds), however late the run: every candidate gets one sample.
CELL_FLOOR_S = 0.5


@dataclass
class BenchConfig:
    kernels: list[str] = field(default_factory=lambda: list(workloads.KERNELS))
    backends: list[str] | None = None  # None: the host backends (every registered one with emulators=True)
    sizes: list[str] | None = None  # None: the defaults (quick or full)
    dtype: str = "float32"
    repeat: int | None = None  # at most this many rounds per cell; None: as many as the budget allows
    quick: bool = False
    compile: bool = True
    budget_s: float | None = None  # the whole run; None: RUN_BUDGET_S
    max_call_s: float | None = None  # skip a candidate whose one call takes longer; None: the cell's planned share
    cold_start: bool = False  # also first calls in a fresh process with empty compiler caches (outside the budget)
    emulators: bool = False  # also the vendor-ABI backends (xloss's C emulators), in their own section

    def resolved(self) -> BenchConfig:
        """A copy with defaults filled in; a mistake (unknown kernel, backend, size, dtype, a size
        beyond this machine's memory, a budget or limit that is not a positive number) raises
        :class:`XLossValueError` with a one-line message."""
        c = BenchConfig(**asdict(self))
        c.kernels = [workloads.ALIASES.get(k, k) for k in c.kernels]
        unknown = [k for k in c.kernels if k not in workloads.KERNELS]
        if unknown:
            raise XLossValueError(f"unknown kernel {unknown[0]!r}; choose from {', '.join(workloads.ALIASES)}")
        if c.dtype not in workloads.DTYPES:
            raise XLossValueError(f"unknown dtype {c.dtype!r}; choose from {', '.join(workloads.DTYPES)}")
        known = registry.backend_names()
        if c.backends is not None:
            bad = [b for b in c.backends if b not in known and ":" not in b]
            if bad:
                raise XLossValueError(f"unknown backend {bad[0]!r}; registered: {', '.join(known)}")
        if c.sizes is not None:
            workloads.check_sizes(c.sizes, c.kernels, c.dtype)
        if c.repeat is not None and (isinstance(c.repeat, bool) or not isinstance(c.repeat, int) or c.repeat < 1):
            raise XLossValueError(f"repeat must be a positive integer; got {c.repeat!r}")
        for name in ("budget_s", "max_call_s"):
            value = getattr(c, name)
            if value is not None and not _positive_finite(value):
                raise XLossValueError(f"{name} must be a positive, finite number of seconds; got {value!r}")
        chosen = c.backends or [n for n in known if c.emulators or impls.is_native(n)]
        # cpu first, the float64 reference, then the vendor ABIs
        c.backends = sorted(chosen, key=lambda n: (n != "cpu", not impls.is_native(n), n))
        c.budget_s = c.budget_s or RUN_BUDGET_S[c.quick]
        return c


def _positive_finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0

class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.perf_counter()

    def step(self, text: str):
        self.done += 1
        self.show(text)

    def show(self, text: str, transient: bool = False):
        """``transient``: a detail shown on a terminal only (a log file gets one line per step)."""
        if transient and not self.tty:
            return
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} " \
               f"{time.perf_counter() - self.start:5.0f}s  {text}"
        if self.tty:
            self.stream.write("\r" + line[:118].ljust(118))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")


def _modes(kernel: str, quick: bool):
    step = workloads.steps().get(kernel)
    if step is not None:
        return step.modes
    return workloads.KERNEL_TABLE[kernel].bench_modes[quick]


def _import_dynamo() -> None:
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # torch.compile then reports its own failure as the candidate's skip reason
        pass


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def plan(cfg: BenchConfig) -> list[tuple[str, str, str]]:
    """The cells of a run: (kernel, mode, size)."""
    return [(k, m, s) for k in cfg.kernels for s in workloads.sizes_for(k, cfg.sizes, cfg.quick)
            for m in _modes(k, cfg.quick)]


def run(config: BenchConfig, progress: bool = True, on_cell=None) -> dict:
    """Measure every cell of ``config`` within its budget. ``on_cell(result)`` is called once the
    machine is described and after each cell (the CLI writes its JSON there, so an interrupted run
    keeps what it measured). Ctrl-C ends the run early: the result so far comes back with
    ``"interrupted": true``."""
    cfg = config.resolved()
    started = time.perf_counter()
    timing.pin_malloc()
    torch = _torch()
    load_before = machine.load_average()
    others = machine.OtherLoad()
    cells_plan = plan(cfg)
    weights = [workloads.cell_weight(k, cfg.quick) for k, _, _ in cells_plan]
    bar = Progress(len(cells_plan) + 1) if progress else None
    result = {"schema": SCHEMA, "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine.describe(torch), "config": asdict(cfg),
              "budget": {"total_s": cfg.budget_s, "used_s": None}, "interrupted": False,
              "load": {"load_average_before": load_before}, "warnings": [], "cells": []}
    try:
        if torch is not None and cfg.compile:
            if bar:
                bar.show("importing torch.compile's machinery")
            _import_dynamo()  # seconds of imports, once per process: not charged to the first cell using it
        if bar:
            bar.show("measuring this machine's copy bandwidth and GEMM peak")
        bw = machine.copy_bandwidth()
        peak, peak_lib = machine.gemm_peak(torch, cfg.dtype if cfg.dtype != "float64" else "float32")
        result["ceilings"] = {"copy_bandwidth_bytes_per_s": bw, "gemm_peak_flops": peak,
                              "gemm_peak_library": peak_lib, "gemm_peak_dtype": cfg.dtype}
        if bar:
            bar.step("ceilings measured")
        if on_cell:
            on_cell(result)
        for i, (kernel, mode, size) in enumerate(cells_plan):
            budget = sampling.cell_budget(cfg.budget_s, weights, time.perf_counter() - started, i, CELL_FLOOR_S)
            # the call limit is the cell's planned share: a run behind its plan samples less, skips nothing more
            max_call = cfg.max_call_s or cfg.budget_s * weights[i] / sum(weights)
            cell_load = machine.OtherLoad()
            say = (lambda text, key=f"{kernel} {mode} {size}": bar.show(f"{key}: {text}", transient=True)) \
                if bar else None
            try:
                step = workloads.steps().get(kernel)
                if step is not None:
                    cell = step.run(mode, size, cfg, torch, budget, max_call, say,
                                                       MIN_SAMPLE_S[cfg.quick], CELL_FLOOR_S)
                else:
                    cell = _kernel_cell(kernel, mode, size, cfg, torch, bw, peak, budget, max_call, say)
            except Exception as exc:  # one cell failing (memory, a broken install) leaves the others
                cell = {"kernel": kernel, "mode": mode, "size": size, "dtype": cfg.dtype,
                        "baseline": impls.BASELINE.get(kernel), "error": sampling.reason(exc), "budget_s": budget,
                        "used_s": None, "rounds": 0, "results": [], "ranking": [], "skipped": []}
            cell["load"] = {"load_average": machine.load_average(), "other_cpus": cell_load.cpus()}
            result["cells"].append(cell)
            _finish(result, started, load_before, others)
            if on_cell:
                on_cell(result)
            if bar:
                bar.step(report.cell_header(cell))
    except KeyboardInterrupt:
        result["interrupted"] = True
        _finish(result, started, load_before, others)
        if on_cell:
            on_cell(result)
    finally:
        if bar:
            bar.close()
    return result



def _finish(result, started, load_before, others) -> None:
    result["budget"]["used_s"] = time.perf_counter() - started
    result["load"].update(load_average_after=machine.load_average(), other_processes_cpus=others.cpus())
    result["warnings"] = machine.busy_warnings(load_before, result["load"]["other_processes_cpus"],
                                               result["cells"], result["load"]["load_average_after"])
    used, total = result["budget"]["used_s"], result["budget"]["total_s"]
    if used > total * OVERRUN:
        result["warnings"].append(
            f"the run took {used:.0f} s of its {total:.0f} s budget: every implementation gets at least one "
            "sample, and calls were that slow here (smaller --sizes, or --quick, fit the budget)")


def _kernel_cell(kernel, mode, size, cfg, torch, bw, peak, budget, max_call, say) -> dict:
    t0 = time.perf_counter()
    w = workloads.build(kernel, mode, size, cfg.dtype)
    cands, skips = impls.xloss_candidates(w, cfg.backends)
    more, more_skips = impls.torch_candidates(w, torch, cfg.compile)
    cands, skips = cands + more, skips + more_skips
    spent = time.perf_counter() - t0
    base = impls.BASELINE[w.kernel]
    run_ = sampling.measure({c.name: c.fn for c in cands}, base, max(CELL_FLOOR_S, budget - spent), max_call,
                            min_sample_s=MIN_SAMPLE_S[cfg.quick], max_rounds=cfg.repeat,
                            compiles=frozenset(c.name for c in cands if c.compiles), say=say)
    run_.budget_s, run_.used_s = budget, time.perf_counter() - t0
    cold = _cold_starts(kernel, mode, size, cfg, run_, say) if cfg.cold_start else {}
    return cells.kernel_cell(w, cands, skips, run_, base, bw, peak, cold)


def _cold_starts(kernel, mode, size, cfg, run_, say) -> dict:
    out = {}
    for name in run_.sampled:
        if say:
            say(f"cold first call of {name} (fresh process, empty caches)")
        spec = {"kernel": kernel, "mode": mode, "size": size, "dtype": cfg.dtype, "backends": cfg.backends,
                "candidate": name}
        out[name] = timing.cold_first_call(spec)
    return out
