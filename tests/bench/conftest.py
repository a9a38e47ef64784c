"""Synthetic `xloss bench` results (schema 2) for the comparison, report and plot tests."""

import numpy as np
import pytest

from xloss.bench import SCHEMA, cells, impls, stats


def _row(name, kind, samples, base_samples=None, verdict=None):
    s = stats.Summary.of(samples)
    row = {"implementation": name, "kind": kind, "note": "", "median_s": s.median, "p20_s": s.p20, "p80_s": s.p80,
           "samples": s.samples, "loops": 1, "stride": 1, "process_cpu_s": s.median * 1.9,
           "thread_cpu_s": s.median * 0.9, "first_call_s": s.median * 3, "peak_extra_bytes": 2**20,
           "rounds": list(range(len(samples))), "wall_samples_s": [float(v) for v in samples]}
    if kind == impls.VENDOR_ABI:
        row["speedup"], row["verdict"] = None, cells.NOT_RANKED
    elif base_samples is None:
        row["speedup"], row["verdict"] = stats.Ratio(1.0, None, None, s.samples).as_dict(), cells.BASELINE
    else:
        r = stats.paired_ratio(base_samples, samples)
        row["speedup"], row["verdict"] = r.as_dict(), verdict or stats.speed_verdict(r)
    return row


def make_cell(kernel, mode, size, times: dict, kinds: dict | None = None, n=20, seed=0, baseline="torch"):
    """A cell whose implementations take ``times[name]`` seconds per call (lognormal noise, 3%)."""
    rng = np.random.default_rng(seed)
    kinds = kinds or {}
    samples = {k: t * np.exp(rng.normal(0, 0.03, n)) for k, t in times.items()}
    rows = [_row(k, kinds.get(k, impls.PYTORCH if k == baseline else impls.XLOSS), v,
                 None if k == baseline else samples[baseline]) for k, v in samples.items()]
    return {"kernel": kernel, "mode": mode, "size": size, "dtype": "float32", "baseline": baseline,
            "bytes_moved": 4 * 10**6, "flops": None, "floor_s": 1e-4, "budget_s": 5.0, "used_s": 4.9, "rounds": n,
            "sample_s": 0.01, "results": rows, "ranking": [], "skipped": []}


def make_run(cells_):
    return {"schema": SCHEMA, "started_at": "2026-11-26T17:00:00+00:00",
            "machine": {"cpu": "Test CPU", "logical_cpus": 2, "versions": {}, "numba_threads": 2, "torch_threads": 2},
            "config": {"kernels": ["bce_grad"], "sizes": ["2k"], "dtype": "float32", "backends": ["cpu"],
                       "quick": True, "emulators": False},
            "budget": {"total_s": 40.0, "used_s": 39.0}, "interrupted": False,
            "load": {"load_average_before": 1.0, "load_average_after": 1.2, "other_processes_cpus": 0.1},
            "ceilings": {"copy_bandwidth_bytes_per_s": 2e10, "gemm_peak_flops": 1e11, "gemm_peak_library": "torch",
                         "gemm_peak_dtype": "float32"},
            "warnings": [], "cells": cells_}


@pytest.fixture
def synthetic():
    return make_cell, make_run
