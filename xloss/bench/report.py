"""Rendering benchmark results: a readable table and CSV (the plot: :mod:`xloss.bench.plot`).

Every time column of a cell is in one unit, named in its header (µs, ms or s, chosen from the
column's largest value; CPU time in the median's unit, so the two compare at a glance);
speed-ups carry their 95% interval and a verdict.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict

from . import impls, stats
from .cells import BASELINE, NOT_RANKED


def unit(values) -> tuple[str, float]:
    """(unit, scale) for a column of seconds: the largest value decides."""
    top = max((v for v in values if v is not None), default=0.0)
    if top < 1e-3:
        return "µs", 1e6
    if top < 10:
        return "ms", 1e3
    return "s", 1.0


def num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}")


def times(values, scale: float) -> list[str]:
    return ["-" if v is None else num(v * scale) for v in values]


def ratio_text(r: dict | None) -> str:
    if r is None:
        return "-"
    if r["ci_low"] is None:
        return f"{num(r['ratio'])}x"
    return f"{num(r['ratio'])}x [{num(r['ci_low'])}, {num(r['ci_high'])}]"


def _mb(b):
    return "-" if b is None else f"{b / 2**20:.0f}"


def _columns(rows: list[dict], cell: dict, ranked: bool) -> list[tuple[str, list[str]]]:
    """(header, values) for each column of ``rows``."""
    cols = [("implementation", [r["implementation"] for r in rows])]
    u, k = unit([r["median_s"] for r in rows] + [r["p80_s"] for r in rows])
    cols.append((f"median ({u})", times([r["median_s"] for r in rows], k)))
    cols.append((f"p20..p80 ({u})", [f"{a}..{b}" for a, b in zip(times([r["p20_s"] for r in rows], k),
                                                                   times([r["p80_s"] for r in rows], k))]))
    cols.append((f"CPU ({u})", times([r["process_cpu_s"] for r in rows], k)))  # in the median's unit
    cols.append(("n x loops", [f"{r['samples']}x{r['loops']}" for r in rows]))
    if ranked:
        cols.append((f"speed-up vs {cell['baseline']} [95% CI]",
                     ["1 (baseline)" if r["verdict"] == BASELINE else ratio_text(r["speedup"]) for r in rows]))
        cols.append(("verdict", ["" if r["verdict"] == BASELINE else r["verdict"] for r in rows]))
    if cell.get("bytes_moved") or cell.get("flops"):
        gb = bool(cell.get("bytes_moved"))
        thr = [r.get("bytes_per_s") if gb else r.get("flops_per_s") for r in rows]
        frac = [r.get("fraction_of_bandwidth") if gb else r.get("fraction_of_gemm_peak") for r in rows]
        cols.append(("GB/s" if gb else "GFLOP/s", ["-" if v is None else num(v / 1e9) for v in thr]))
        cols.append(("of copy bw" if gb else "of GEMM peak",
                     ["-" if v is None else f"{v:.2f}" + ("*" if v > 1 else "") for v in frac]))
    if any(r.get("peak_extra_bytes") is not None for r in rows):
        cols.append(("peak extra (MB)", [_mb(r.get("peak_extra_bytes")) for r in rows]))
    fu, fk = unit([r.get("first_call_s") for r in rows])
    cols.append((f"first call ({fu})", times([r.get("first_call_s") for r in rows], fk)))
    if any("cold_first_call_s" in r for r in rows):
        cu2, ck2 = unit([r.get("cold_first_call_s") for r in rows])
        cols.append((f"cold first call ({cu2})", times([r.get("cold_first_call_s") for r in rows], ck2)))
    return cols


def _render(cols) -> list[str]:
    widths = [max(len(h), *(len(v) for v in vals)) for h, vals in cols]
    lines = ["  " + "  ".join(h.ljust(w) for (h, _), w in zip(cols, widths)).rstrip()]
    for i in range(len(cols[0][1])):
        lines.append("  " + "  ".join(vals[i].ljust(w) for (_, vals), w in zip(cols, widths)).rstrip())
    return lines


def _ranking_lines(cell: dict) -> list[str]:
    out = []
    for p in cell.get("ranking", ()):
        if p["verdict"] == stats.FASTER:
            out.append(f"    {p['faster']}  faster than  {p['slower']}  ({ratio_text(p)})")
        elif p["verdict"] == stats.INDISTINGUISHABLE:
            out.append(f"    {p['faster']}  indistinguishable from  {p['slower']}  ({ratio_text(p)})")
        else:
            out.append(f"    {p['faster']}  ?  {p['slower']}  ({p['verdict']})")
    return ["  ranking (paired speed-up of each over the next, 95% interval):", *out] if out else []


def _skip_lines(cell: dict) -> list[str]:
    """One line per reason: the same reason for several implementations is said once."""
    by_reason = defaultdict(list)
    for s in cell["skipped"]:
        by_reason[s["reason"]].append(s["name"])
    return [f"  skipped {', '.join(names)}: {reason}" for reason, names in by_reason.items()]


def cell_header(cell: dict) -> str:
    parts = []
    if cell.get("results"):
        parts.append(f"baseline {cell['baseline']}")
    if cell.get("budget_s") is not None and cell.get("used_s") is not None:
        parts.append(f"{cell['rounds']} rounds in {cell['used_s']:.1f} s of a {cell['budget_s']:.1f} s budget")
    if cell.get("floor_s"):
        u, k = unit([cell["floor_s"]])
        parts.append(f"{'bandwidth' if cell.get('bytes_moved') else 'GEMM'} floor {num(cell['floor_s'] * k)} {u}")
    head = f"{cell['kernel']} {cell['mode']}, size {cell['size']}, {cell['dtype']}"
    return head + (f"  ({'; '.join(parts)})" if parts else "")


def cell_lines(cell: dict) -> list[str]:
    lines = [cell_header(cell)]
    if cell.get("error"):
        lines.append(f"  not measured: {cell['error']}")
    rows = sorted(cell["results"], key=lambda r: r["median_s"])
    native = [r for r in rows if r["kind"] != impls.VENDOR_ABI]
    vendor = [r for r in rows if r["kind"] == impls.VENDOR_ABI]
    if native:
        lines += _render(_columns(native, cell, ranked=True))
        if any((r.get("fraction_of_bandwidth") or r.get("fraction_of_gemm_peak") or 0) > 1 for r in native):
            lines.append("  * above the measured ceiling: the operands fit in cache")
        lines += _ranking_lines(cell)
    if vendor:
        lines.append(f"  vendor-ABI backends (xloss's C emulators: correctness stand-ins, {NOT_RANKED}):")
        lines += _render(_columns(vendor, cell, ranked=False))
    lines += _skip_lines(cell)
    return lines


def table(result: dict) -> str:
    m = result["machine"]
    lines = [f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, numba threads {m.get('numba_threads', '-')}, "
             f"torch threads {m.get('torch_threads', '-')}"]
    c = result.get("ceilings")
    if c:
        lines.append(f"measured: copy bandwidth {c['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
                     f"{c['gemm_peak_dtype']} GEMM peak {c['gemm_peak_flops'] / 1e9:.0f} GFLOP/s "
                     f"({c['gemm_peak_library']}, fixed per run)")
    b = result.get("budget", {})
    if b.get("used_s") is not None:
        lines.append(f"budget: {b['total_s']:.0f} s for the whole run, {b['used_s']:.0f} s used"
                     + ("; INTERRUPTED: the cells measured so far" if result.get("interrupted") else ""))
    load = result.get("load", {})
    seen = [f"{label} {load[k]:.2f}" for label, k in (("load average before", "load_average_before"),
                                                      ("after", "load_average_after")) if load.get(k) is not None]
    if load.get("other_processes_cpus") is not None:
        seen.append(f"other processes used {load['other_processes_cpus']:.2f} CPUs during the run")
    if seen:
        lines.append("load: " + ", ".join(seen))
    for w in result.get("warnings", []):
        lines.append(f"WARNING: {w} (trust the paired ratios and their intervals, not the absolute times)")
    lines.append("n x loops: samples x calls per sample (times are per call); CPU: CPU time of all this process's "
                 "threads per call (the calling thread's alone is in the JSON); speed-up: median of per-round "
                 "paired ratios, 95% bootstrap interval; faster/slower only where the interval excludes 1; "
                 "first call: in this process (compilation included on a cold cache)")
    lines.append("")
    for cell in result["cells"]:
        lines += cell_lines(cell)
        lines.append("")
    return "\n".join(lines)


CSV_FIELDS = ("kernel", "mode", "size", "dtype", "implementation", "kind", "median_s", "p20_s", "p80_s", "samples",
              "loops", "process_cpu_s", "thread_cpu_s", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict",
              "bytes_per_s", "fraction_of_bandwidth", "flops_per_s", "fraction_of_gemm_peak", "peak_extra_bytes",
              "first_call_s", "cold_first_call_s", "note")


def csv_text(result: dict) -> str:
    m = result["machine"]
    f = io.StringIO()
    f.write(f"# {m['cpu']}; {m['logical_cpus']} CPUs; numba threads {m.get('numba_threads')}; "
            f"torch threads {m.get('torch_threads')}; versions {json.dumps(m['versions'])}\n")
    w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for cell in result["cells"]:
        for r in cell["results"]:
            sp = r.get("speedup") or {}
            w.writerow({**{k: cell[k] for k in ("kernel", "mode", "size", "dtype")}, **r,
                        "speedup": sp.get("ratio"), "speedup_ci_low": sp.get("ci_low"),
                        "speedup_ci_high": sp.get("ci_high")})
    return f.getvalue()


def json_text(result: dict) -> str:
    return json.dumps(result, indent=1, default=str)
