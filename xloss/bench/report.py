"""Rendering benchmark results: a readable table, JSON, CSV and a PNG plot."""

from __future__ import annotations

import csv
import json


def _ms(s):
    return "-" if s is None else (f"{s * 1e3:.2f} ms" if s < 10 else f"{s:.1f} s")


def _mb(b):
    return "-" if b is None else f"{b / 2**20:.0f} MB"


def table(result: dict) -> str:
    m, c = result["machine"], result["ceilings"]
    lines = [f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, numba threads {m.get('numba_threads', '-')}, "
             f"torch threads {m.get('torch_threads', '-')}",
             f"measured: copy bandwidth {c['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
             f"{c['gemm_peak_dtype']} GEMM peak {c['gemm_peak_flops'] / 1e9:.0f} GFLOP/s ({c['gemm_peak_library']}, "
             f"fixed per run)"]
    load = result.get("load", {})
    if load.get("load_average_before") is not None:
        oc = load.get("other_processes_cpus")
        lines.append(f"load: average {load['load_average_before']:.2f} before the run; other processes used "
                     f"{'-' if oc is None else f'{oc:.2f}'} CPUs during it")
    for w in result.get("warnings", []):
        lines.append(f"WARNING: busy machine: {w} (compare ratios from the same cell, not absolute times)")
    lines.append("n: timed samples per implementation (the same for every implementation of a cell); first call: "
                 "a fresh process with empty Numba/TorchInductor caches, compilation and the backend's lazy imports "
                 "included")
    lines.append("")
    head = ("implementation", "median", "p20..p80", "n", "speed-up", "throughput", "of roofline", "peak extra",
            "first call")
    for cell in result["cells"]:
        floor = f"floor {_ms(cell['floor_s'])}" if cell["floor_s"] else ""
        lines.append(f"{cell['kernel']} {cell['mode']}, size {cell['size']}, {cell['dtype']}"
                     f"  (speed-up vs {cell['baseline']}; {floor})")
        rows = [head]
        for r in sorted(cell["results"], key=lambda r: r["median_s"]):
            if "bytes_per_s" in r:
                thr, frac = f"{r['bytes_per_s'] / 1e9:.1f} GB/s", f"{r['fraction_of_bandwidth']:.2f} of bw"
            elif "flops_per_s" in r:
                thr = f"{r['flops_per_s'] / 1e9:.0f} GFLOP/s"
                frac = f"{r['fraction_of_gemm_peak']:.2f} of peak" if r.get("fraction_of_gemm_peak") else "-"
            else:
                thr = frac = "-"
            sp = r["speedup_vs_baseline"]
            rows.append((r["implementation"], _ms(r["median_s"]), f"{_ms(r['p20_s'])}..{_ms(r['p80_s'])}",
                         str(r["samples"]), "-" if sp is None else f"{sp:.2f}x", thr, frac, _mb(r["peak_extra_bytes"]),
                         _ms(r["first_call_s"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        for row in rows:
            lines.append("  " + "  ".join(col.ljust(w) for col, w in zip(row, widths)).rstrip())
        for r in cell["results"]:
            note = r.get("first_call_note")
            if note and r.get("first_call_s") is None and note != "cold start disabled":
                lines.append(f"  first call of {r['implementation']}: {note}")
        for s in cell["skipped"]:
            lines.append(f"  skipped {s['name']}: {s['reason']}")
        lines.append("")
    return "\n".join(lines)


def write_json(result: dict, path) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)


CSV_FIELDS = ("kernel", "mode", "size", "dtype", "implementation", "kind", "median_s", "p20_s", "p80_s", "samples",
              "first_call_note",
              "speedup_vs_baseline", "bytes_per_s", "fraction_of_bandwidth", "flops_per_s", "fraction_of_gemm_peak",
              "peak_extra_bytes", "first_call_s", "note")


def write_csv(result: dict, path) -> None:
    m = result["machine"]
    with open(path, "w", newline="") as f:
        f.write(f"# {m['cpu']}; {m['logical_cpus']} CPUs; numba threads {m.get('numba_threads')}; "
                f"torch threads {m.get('torch_threads')}; versions {json.dumps(m['versions'])}\n")
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for cell in result["cells"]:
            for r in cell["results"]:
                w.writerow({**{k: cell[k] for k in ("kernel", "mode", "size", "dtype")}, **r})


#: Colours told apart by most readers (Okabe-Ito), then hatches once they run out.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")


def _ratio_label(v: float) -> str:
    return f"{v:.0f}x" if v >= 10 else (f"{v:.1f}x" if v >= 1 else f"{v:.2f}x")


def plot(result: dict, path) -> None:
    """One group per workload, one bar per implementation: speed-up over the PyTorch baseline
    (log scale, ticks labelled as ratios), each bar labelled with its value and sample count;
    the legend sits outside the plot, below it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    cells = result["cells"]
    names = []
    for cell in cells:
        for r in cell["results"]:
            if r["implementation"] not in names:
                names.append(r["implementation"])
    style = {n: (PALETTE[j % len(PALETTE)], HATCHES[(j // len(PALETTE)) % len(HATCHES)]) for j, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(max(9, 2.6 * len(cells)), 6.5))
    values = []
    for i, cell in enumerate(cells):
        rows = [r for r in cell["results"] if r["speedup_vs_baseline"]]
        width = 0.84 / max(len(rows), 1)
        for k, r in enumerate(rows):
            v = r["speedup_vs_baseline"]
            values.append(v)
            colour, hatch = style[r["implementation"]]
            x = i + (k - (len(rows) - 1) / 2) * width
            # bars grow from the 1x line: up is faster than the baseline, down is slower
            ax.bar(x, v - 1.0, width * 0.95, bottom=1.0, color=colour, hatch=hatch,
                   edgecolor="white" if not hatch else "black", linewidth=0.5)
            if abs(v - 1.0) < 0.02:  # the baseline itself (or level with it): a thick mark on the line
                ax.plot([x - width * 0.45, x + width * 0.45], [1.0, 1.0], color=colour, linewidth=5,
                        solid_capstyle="butt")
            up = v >= 1.0
            ax.annotate(f"{_ratio_label(v)}\nn={r['samples']}", (x, v), xytext=(0, 2 if up else -2),
                        textcoords="offset points", ha="center", va="bottom" if up else "top", fontsize=7,
                        rotation=90 if len(rows) > 4 else 0)
    ax.axhline(1.0, color="black", linewidth=1.0)
    ax.set_yscale("log")
    if values:
        lo, hi = min(min(values), 1.0), max(max(values), 1.0)
        ax.set_ylim(lo / 2.2, hi * 3.5)  # room for the labels beyond the longest bars
        ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                 if lo / 2.2 <= t <= hi * 3.5]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _ratio_label(v)))
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"{c['kernel']}\n{c['mode']} {c['size']}\n{c['dtype']}" for c in cells], fontsize=8)
    ax.set_ylabel("speed-up over the PyTorch baseline (log scale; above 1x = faster)")
    m = result["machine"]
    busy = " — BUSY MACHINE: compare bars within a group" if result.get("warnings") else ""
    ax.set_title(f"xloss bench — {m['cpu']}, {m['logical_cpus']} CPUs{busy}", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=style[n][0], hatch=style[n][1], ec="black", lw=0.5) for n in names]
    ax.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(4, max(1, len(names))),
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
