"""One benchmark cell as JSON-able data: a row per implementation (times, CPU times, the raw
samples, the speed-up over the baseline with its interval and verdict), the ranking of the
native implementations, and what was skipped and why."""

from __future__ import annotations

from dataclasses import asdict

from . import impls, stats
from .sampling import CellRun, paired

#: A row's ``verdict`` for the baseline itself and for a vendor-ABI backend (never ranked).
BASELINE, NOT_RANKED = "baseline", "not ranked"


def _row(s, kind: str, note: str, base, cold) -> dict:
    t = stats.Summary.of(s.wall_s)
    row = {"implementation": s.name, "kind": kind, "note": note, "median_s": t.median, "p20_s": t.p20,
           "p80_s": t.p80, "samples": t.samples, "loops": s.loops, "stride": s.stride,
           "process_cpu_s": stats.Summary.of(s.process_cpu_s).median,
           "thread_cpu_s": stats.Summary.of(s.thread_cpu_s).median,
           "first_call_s": s.first_call_s, "peak_extra_bytes": s.peak_extra_bytes,
           "rounds": s.rounds, "wall_samples_s": s.wall_s}
    if cold is not None:
        row["cold_first_call_s"], row["cold_first_call_note"] = cold
    if kind == impls.VENDOR_ABI:
        row["speedup"], row["verdict"] = None, NOT_RANKED
    elif base is None:
        row["speedup"], row["verdict"] = None, stats.TOO_FEW
    elif base is s:
        row["speedup"], row["verdict"] = stats.Ratio(1.0, None, None, t.samples).as_dict(), BASELINE
    else:
        ratio = stats.paired_ratio(*paired(base, s))  # baseline time / this time, round by round
        row["speedup"], row["verdict"] = ratio.as_dict(), stats.speed_verdict(ratio)
    return row


def ranking(run: CellRun, names: list[str]) -> list[dict]:
    """Neighbours in the order of their medians (fastest first), each pair's paired speed-up of the
    faster over the slower, with its interval and verdict."""
    order = sorted(names, key=lambda n: stats.Summary.of(run.sampled[n].wall_s).median)
    out = []
    for a, b in zip(order, order[1:]):
        sa, sb = run.sampled[a], run.sampled[b]
        common = paired(sb, sa)
        if not common[0]:
            out.append({"faster": a, "slower": b, "ratio": None, "ci_low": None, "ci_high": None, "pairs": 0,
                        "verdict": stats.TOO_FEW})
            continue
        ratio = stats.paired_ratio(*common)
        out.append({"faster": a, "slower": b, **ratio.as_dict(), "verdict": stats.speed_verdict(ratio)})
    return out


def _timing_fields(run: CellRun) -> dict:
    return {"budget_s": run.budget_s, "used_s": run.used_s, "rounds": run.rounds, "sample_s": run.sample_s}


def kernel_cell(w, cands, skips, run: CellRun, baseline: str, bw, peak, cold: dict) -> dict:
    by_name = {c.name: c for c in cands}
    base = run.sampled.get(baseline)
    rows = []
    for name, s in run.sampled.items():
        c = by_name[name]
        row = _row(s, c.kind, c.note, base, cold.get(name))
        if c.kind != impls.FLOOR:  # a floor moves other bytes than the workload: no throughput of its own
            if w.bytes_moved:
                row["bytes_per_s"] = w.bytes_moved / row["median_s"]
                row["fraction_of_bandwidth"] = row["bytes_per_s"] / bw
            if w.flops:
                row["flops_per_s"] = w.flops / row["median_s"]
                row["fraction_of_gemm_peak"] = row["flops_per_s"] / peak if peak else None
        rows.append(row)
    skipped = [asdict(s) for s in skips] + [{"name": n, "reason": why} for n, why in run.skipped.items()]
    native = [n for n in run.sampled if by_name[n].kind != impls.VENDOR_ABI]
    return {"kernel": w.kernel, "mode": w.mode, "size": w.size, "dtype": w.dtype, "baseline": baseline,
            "bytes_moved": w.bytes_moved, "flops": w.flops,
            "floor_s": (w.bytes_moved / bw) if w.bytes_moved else ((w.flops / peak) if w.flops and peak else None),
            **_timing_fields(run), "results": rows, "ranking": ranking(run, native), "skipped": skipped}


def step_cell(step: str, mode: str, size: str, dtype: str, baseline: str, run: CellRun | None, skips: list,
              what: str) -> dict:
    """The cell of a timed step (not one kernel): ``baseline`` is PyTorch's, every other sampled name
    is ours; ``what`` says what one call does."""
    cell = {"kernel": step, "mode": mode, "size": size, "dtype": dtype, "baseline": baseline,
            "bytes_moved": None, "flops": None, "floor_s": None, "budget_s": None, "used_s": 0.0, "rounds": 0,
            "sample_s": None, "results": [], "ranking": [], "skipped": [asdict(s) for s in skips]}
    if run is None:
        return cell
    base = run.sampled.get(baseline)
    cell.update(_timing_fields(run))
    for name, s in run.sampled.items():
        kind = impls.PYTORCH if name == baseline else impls.XLOSS
        cell["results"].append(_row(s, kind, what, base, None))
    cell["ranking"] = ranking(run, list(run.sampled))
    cell["skipped"] += [{"name": n, "reason": why} for n, why in run.skipped.items()]
    return cell
