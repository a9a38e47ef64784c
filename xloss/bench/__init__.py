"""``xloss bench``: every backend and the usual alternatives, side by side, in one process.

    from xloss.bench import BenchConfig, run
    result = run(BenchConfig(quick=True))      # a JSON-able dict; see xloss.bench.report

For each workload (kernel × mode × size × dtype) every candidate is called once (its first-call
time — compilation, ``torch.compile`` — is reported separately), then all candidates are timed
round-robin after warm-up; each cell reports the median and p20/p80, the speed-up against the
PyTorch baseline, the bandwidth achieved and its fraction of this machine's measured copy
bandwidth (FLCE: FLOP/s and the fraction of the measured GEMM peak), and the peak extra memory.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

from .. import registry
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
    budget_s: float | None = None  # per candidate and cell; None: 1.5 s (quick) or 6 s
    max_call_s: float | None = None  # skip an xloss backend whose one call would take longer; None: 5 s / 20 s

    def resolved(self) -> "BenchConfig":
        c = BenchConfig(**asdict(self))
        c.kernels = [workloads.ALIASES.get(k, k) for k in c.kernels]
        unknown = [k for k in c.kernels if k not in workloads.KERNELS]
        if unknown:
            raise ValueError(f"unknown kernels {unknown}; choose from {', '.join(workloads.ALIASES)}")
        # cpu first, the vendor ABIs, the float64 reference last
        c.backends = sorted(c.backends or registry.backend_names(), key=lambda n: (n != "cpu", n == "reference", n))
        c.repeat = c.repeat or (5 if c.quick else 15)
        c.budget_s = c.budget_s or (1.5 if c.quick else 6.0)
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
        w = workloads.build(kernel, mode, size, cfg.dtype)
        cands, skips = impls.xloss_candidates(w, cfg.backends)
        too_slow = _too_slow(kernel, mode, size, cfg, [c.name for c in cands])
        skips += [impls.Skip(name, why) for name, why in too_slow.items()]
        cands = [c for c in cands if c.name not in too_slow]
        more, more_skips = impls.torch_candidates(w, torch, cfg.compile)
        cands, skips = cands + more, skips + more_skips
        first = {}
        for c in list(cands):
            if bar:
                bar.show(f"{w.key}: first call of {c.name}")
            try:
                first[c.name] = timing.first_call_seconds(c.fn)
            except Exception as exc:
                cands.remove(c)
                skips.append(impls.Skip(c.name, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
        if bar:
            bar.show(f"{w.key}: timing {len(cands)} implementations")
        # the first call's cost decides how often a candidate is timed and whether it is warmed up
        # again (the first call already warmed it) and measured for memory in a call of its own
        rounds = {c.name: timing.plan_rounds(first[c.name], cfg.repeat, cfg.budget_s) for c in cands}
        cheap = {c.name for c in cands if first[c.name] * 4 < cfg.budget_s}
        times = timing.race({c.name: c.fn for c in cands}, rounds, warmup=cheap)
        # one more call measures memory, unless a call is expensive (judged by its timed median,
        # not the first call, which includes compilation)
        mem = {c.name: timing.peak_extra_bytes(c.fn) if times[c.name].median * 4 < cfg.max_call_s else None
               for c in cands}
        cells.append(_cell(w, cands, skips, times, first, mem, bw, peak))
        if bar:
            bar.step(f"{w.key} done")
    if bar:
        bar.close()
    return {
        "machine": machine.describe(torch),
        "ceilings": {"copy_bandwidth_bytes_per_s": bw, "gemm_peak_flops": peak, "gemm_peak_library": peak_lib,
                     "gemm_peak_dtype": cfg.dtype},
        "config": asdict(cfg),
        "cells": cells,
    }


PROBE_FACTOR = 64


def _too_slow(kernel, mode, size, cfg, names) -> dict:
    """{candidate: reason} for xloss backends whose one call, extrapolated from a probe on a
    problem with 1/64 of the work, would exceed ``cfg.max_call_s`` (the C emulators on big GEMMs)."""
    probe = workloads.build(kernel, mode, workloads.scaled(kernel, size, PROBE_FACTOR), cfg.dtype)
    calls = {c.name: c.fn for c in impls.xloss_candidates(probe, cfg.backends)[0] if c.name in names}
    out = {}
    for name, fn in calls.items():
        fn()  # compile / load first
        estimate = timing.first_call_seconds(fn) * PROBE_FACTOR
        if estimate > cfg.max_call_s:
            out[name] = (f"one call would take about {estimate:.0f} s (extrapolated from a 1/{PROBE_FACTOR} problem); "
                         f"limit {cfg.max_call_s:.0f} s (--max-call)")
    return out


def _cell(w, cands, skips, times, first, mem, bw, peak) -> dict:
    base_name = impls.BASELINE[w.kernel]
    base = times.get(base_name)
    rows = []
    for c in cands:
        t = times[c.name]
        row = {"implementation": c.name, "kind": c.kind, "note": c.note, "median_s": t.median, "p20_s": t.p20,
               "p80_s": t.p80, "samples": t.samples, "first_call_s": first.get(c.name),
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
