"""``xloss bench``: every backend and the usual alternatives, side by side, in one process.

    from xloss.bench import BenchConfig, run
    result = run(BenchConfig(quick=True))      # a JSON-able dict; see xloss.bench.report

For each workload (kernel × mode × size × dtype) every candidate is called once here (which
compiles or loads it), then all candidates are timed round-robin, each the same number of times
(the cell's rounds are set by its slowest candidate's warm call and the budget, at least 3);
each cell reports the median and p20/p80 with the sample count, the speed-up against the
PyTorch baseline, the bandwidth achieved and its fraction of this machine's measured copy
bandwidth (FLCE: FLOP/s and the fraction of the GEMM peak on a BLAS fixed per run), and the
peak extra memory. The first-call column is measured in a fresh interpreter with empty Numba
and TorchInductor caches, so it includes compilation. ``lm_step`` times a small language-model
training step (stock PyTorch against the fused loss), idle and with a competing busy process.
The result carries warnings when the machine was busy (load, other processes' CPU time, wide
spreads): then trust the ratios (interleaved rounds), not the absolute times.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

from .. import registry
from ..errors import XLossValueError
from . import impls, machine, timing, workloads


@dataclass
class BenchConfig:
    kernels: list[str] = field(default_factory=lambda: list(workloads.KERNELS))
    backends: list[str] | None = None  # None: every registered backend
    sizes: list[str] | None = None  # None: the defaults (quick or full)
    dtype: str = "float32"
    repeat: int | None = None  # None: 5 (quick) or 15
    quick: bool = False
    compile: bool = True
    budget_s: float | None = None  # per cell, for the slowest candidate; None: 3 s (quick) or 12 s
    max_call_s: float | None = None  # skip an xloss backend whose one call would take longer; None: 5 s / 20 s
    cold_start: bool = True  # first calls in a fresh process with empty compiler caches

    def resolved(self) -> BenchConfig:
        """A copy with defaults filled in; a mistake (unknown kernel, backend, size, dtype) raises
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
            workloads.check_sizes(c.sizes, c.kernels)
        if c.repeat is not None and (isinstance(c.repeat, bool) or not isinstance(c.repeat, int) or c.repeat < 1):
            raise XLossValueError(f"repeat must be a positive integer; got {c.repeat!r}")
        # cpu first, the vendor ABIs, the float64 reference last
        c.backends = sorted(c.backends or known, key=lambda n: (n != "cpu", n == "reference", n))
        c.repeat = c.repeat or (5 if c.quick else 15)
        c.budget_s = c.budget_s or (3.0 if c.quick else 12.0)
        c.max_call_s = c.max_call_s or (5.0 if c.quick else 20.0)
        return c


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.perf_counter()

    def step(self, text: str):
        self.done += 1
        self.show(text)

    def show(self, text: str):
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
    if kernel == "focal_loss":
        return ("forward+grad",) if quick else workloads.FOCAL_MODES
    if kernel in workloads.STEPS:
        return workloads.STEPS[kernel]["modes"]
    return ("grad",)


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def run(config: BenchConfig, progress: bool = True) -> dict:
    cfg = config.resolved()
    timing.pin_malloc()
    torch = _torch()
    load_before = machine.load_average()
    others = machine.OtherLoad()
    plan = [(k, m, s) for k in cfg.kernels for s in workloads.sizes_for(k, cfg.sizes, cfg.quick)
            for m in _modes(k, cfg.quick)]
    bar = Progress(len(plan) + 1) if progress else None
    if bar:
        bar.show("measuring this machine's copy bandwidth and GEMM peak")
    bw = machine.copy_bandwidth()
    peak, peak_lib = machine.gemm_peak(torch, cfg.dtype if cfg.dtype != "float64" else "float32")
    if bar:
        bar.step("ceilings measured")
    cells = []
    for kernel, mode, size in plan:
        cell_load = machine.OtherLoad()
        if kernel == "lm_step":
            cell = _lm_cell(mode, size, cfg, torch, bar)
        else:
            cell = _kernel_cell(kernel, mode, size, cfg, torch, bw, peak, bar)
        cell["other_cpus"] = cell_load.cpus()
        cells.append(cell)
        if bar:
            bar.step(f"{kernel} {mode} {size} done")
    if bar:
        bar.close()
    other_cpus = others.cpus()
    return {
        "machine": machine.describe(torch),
        "ceilings": {"copy_bandwidth_bytes_per_s": bw, "gemm_peak_flops": peak, "gemm_peak_library": peak_lib,
                     "gemm_peak_dtype": cfg.dtype},
        "config": asdict(cfg),
        "load": {"load_average_before": load_before, "other_processes_cpus": other_cpus},
        "warnings": machine.busy_warnings(load_before, other_cpus, cells),
        "cells": cells,
    }


def _skip_reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _kernel_cell(kernel, mode, size, cfg, torch, bw, peak, bar) -> dict:
    w = workloads.build(kernel, mode, size, cfg.dtype)
    cands, skips = impls.xloss_candidates(w, cfg.backends)
    too_slow = _too_slow(kernel, mode, size, cfg, [c.name for c in cands])
    skips += [impls.Skip(name, why) for name, why in too_slow.items()]
    cands = [c for c in cands if c.name not in too_slow]
    more, more_skips = impls.torch_candidates(w, torch, cfg.compile)
    cands, skips = cands + more, skips + more_skips
    for c in list(cands):  # the first call here compiles or loads; it is not what is reported
        if bar:
            bar.show(f"{w.key}: first call of {c.name}")
        try:
            c.fn()
        except Exception as exc:
            cands.remove(c)
            skips.append(impls.Skip(c.name, _skip_reason(exc)))
    first, first_notes = {}, {}
    if cfg.cold_start:
        for c in cands:
            if bar:
                bar.show(f"{w.key}: cold first call of {c.name} (fresh process, empty caches)")
            spec = {"kernel": kernel, "mode": mode, "size": size, "dtype": cfg.dtype, "backends": cfg.backends,
                    "candidate": c.name}
            first[c.name], first_notes[c.name] = timing.cold_first_call(spec)
    # one warm call each tells the cell's cost; every candidate then gets the same rounds
    cost = {c.name: timing.first_call_seconds(c.fn) for c in cands}
    rounds = timing.common_rounds(max(cost.values(), default=0.0), cfg.repeat, cfg.budget_s)
    if bar:
        bar.show(f"{w.key}: timing {len(cands)} implementations, {rounds} rounds each")
    times = timing.race({c.name: c.fn for c in cands}, rounds)
    # one more call measures memory, unless a call is expensive
    mem = {c.name: timing.peak_extra_bytes(c.fn) if times[c.name].median * 4 < cfg.max_call_s else None
           for c in cands}
    return _cell(w, cands, skips, times, first, first_notes, mem, bw, peak)


PROBE_FACTOR = 64
PROBE_REPEAT = 3


def _too_slow(kernel, mode, size, cfg, names) -> dict:
    """{candidate: reason} for xloss backends whose one call, extrapolated from a problem with
    1/64 of the work, would exceed ``cfg.max_call_s`` (the C emulators on big GEMMs). The probe
    is timed 3 times after its first call and the fastest counts, so a moment of load elsewhere
    does not skip a backend."""
    probe = workloads.build(kernel, mode, workloads.scaled(kernel, size, PROBE_FACTOR), cfg.dtype)
    calls = {c.name: c.fn for c in impls.xloss_candidates(probe, cfg.backends)[0] if c.name in names}
    out = {}
    for name, fn in calls.items():
        fn()  # compile / load first
        estimate = min(timing.first_call_seconds(fn) for _ in range(PROBE_REPEAT)) * PROBE_FACTOR
        if estimate > cfg.max_call_s:
            out[name] = (f"one call would take about {estimate:.0f} s (extrapolated from the fastest of "
                         f"{PROBE_REPEAT} calls on a 1/{PROBE_FACTOR} problem); "
                         f"limit {cfg.max_call_s:.0f} s (--max-call)")
    return out


def _lm_cell(mode, size, cfg, torch, bar) -> dict:
    """One training-step cell: stock PyTorch step (baseline) against the fused step on each
    selected backend that can keep up (cpu); ``mode`` idle or busy (a spinning competitor)."""
    from . import training

    key = {"kernel": "lm_step", "mode": mode, "size": size, "dtype": cfg.dtype, "baseline": training.BASELINE,
           "bytes_moved": None, "flops": None, "floor_s": None, "results": [], "skipped": []}
    if torch is None:
        key["skipped"].append(asdict(impls.Skip("lm_step", "torch is not installed (pip install torch)")))
        return key
    if cfg.dtype not in training.DTYPES:
        why = f"the training step runs in {' or '.join(training.DTYPES)}"
        key["skipped"].append(asdict(impls.Skip("lm_step", why)))
        return key
    shape = training.parse_step(size, cfg.dtype)
    lm = training.LM(shape)
    calls = {training.BASELINE: lm.stock_step}
    for name in cfg.backends:
        if name in training.FUSED_BACKENDS:
            calls[f"xloss fused step ({name})"] = lambda name=name: lm.fused_step(name)
        else:
            key["skipped"].append(asdict(impls.Skip(f"xloss fused step ({name})",
                                                    "a training step is timed on the cpu backend only")))
    first = {}
    for name, fn in list(calls.items()):
        if bar:
            bar.show(f"lm_step {mode} {size}: first step of {name}")
        try:
            first[name] = timing.first_call_seconds(fn)
        except Exception as exc:
            del calls[name]
            key["skipped"].append(asdict(impls.Skip(name, _skip_reason(exc))))
    rounds = timing.common_rounds(max(first.values(), default=0.0), cfg.repeat, cfg.budget_s * 4)
    if bar:
        bar.show(f"lm_step {mode} {size}: {rounds} rounds, competitor {'on' if mode == 'busy' else 'off'}")
    if mode == "busy":
        with training.Competitor(training.competitor_cpu()):
            times = timing.race(calls, rounds)
    else:
        times = timing.race(calls, rounds)
    base = times.get(training.BASELINE)
    for name in calls:
        t = times[name]
        key["results"].append({
            "implementation": name, "kind": "pytorch" if name == training.BASELINE else "xloss",
            "note": "forward + backward + SGD update", "median_s": t.median, "p20_s": t.p20, "p80_s": t.p80,
            "samples": t.samples, "first_call_s": None, "first_call_note": "not measured cold for a training step",
            "peak_extra_bytes": None, "speedup_vs_baseline": (base.median / t.median) if base else None})
    return key


def _cell(w, cands, skips, times, first, first_notes, mem, bw, peak) -> dict:
    base_name = impls.BASELINE[w.kernel]
    base = times.get(base_name)
    rows = []
    for c in cands:
        t = times[c.name]
        row = {"implementation": c.name, "kind": c.kind, "note": c.note, "median_s": t.median, "p20_s": t.p20,
               "p80_s": t.p80, "samples": t.samples, "first_call_s": first.get(c.name),
               "first_call_note": first_notes.get(c.name) or ("" if c.name in first else "cold start disabled"),
               "peak_extra_bytes": mem.get(c.name),
               "speedup_vs_baseline": (base.median / t.median) if base else None}
        if w.bytes_moved:
            row["bytes_per_s"] = w.bytes_moved / t.median
            row["fraction_of_bandwidth"] = w.bytes_moved / t.median / bw
        if w.flops:
            row["flops_per_s"] = w.flops / t.median
            row["fraction_of_gemm_peak"] = w.flops / t.median / peak if peak else None
        rows.append(row)
    return {"kernel": w.kernel, "mode": w.mode, "size": w.size, "dtype": w.dtype, "baseline": base_name,
            "bytes_moved": w.bytes_moved, "flops": w.flops,
            "floor_s": (w.bytes_moved / bw) if w.bytes_moved else ((w.flops / peak) if w.flops and peak else None),
            "results": rows, "skipped": [asdict(s) for s in skips]}
