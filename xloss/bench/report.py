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
             f"{c['gemm_peak_dtype']} GEMM peak {c['gemm_peak_flops'] / 1e9:.0f} GFLOP/s ({c['gemm_peak_library']})",
             ""]
    head = ("implementation", "median", "p20..p80", "speed-up", "throughput", "of roofline", "peak extra", "first call")
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
                         "-" if sp is None else f"{sp:.2f}x", thr, frac, _mb(r["peak_extra_bytes"]),
                         _ms(r["first_call_s"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        for row in rows:
            lines.append("  " + "  ".join(col.ljust(w) for col, w in zip(row, widths)).rstrip())
        for s in cell["skipped"]:
            lines.append(f"  skipped {s['name']}: {s['reason']}")
        lines.append("")
    return "\n".join(lines)


def write_json(result: dict, path) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)


CSV_FIELDS = ("kernel", "mode", "size", "dtype", "implementation", "kind", "median_s", "p20_s", "p80_s", "samples",
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


def plot(result: dict, path) -> None:
    """One group per workload, one bar per implementation: speed-up over the PyTorch baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = result["cells"]
    names = []
    for cell in cells:
        for r in cell["results"]:
            if r["implementation"] not in names:
                names.append(r["implementation"])
    fig, ax = plt.subplots(figsize=(max(8, 2.2 * len(cells)), 5))
    cmap = plt.get_cmap("tab20")
    color = {name: cmap(j % 20) for j, name in enumerate(names)}
    labelled = set()
    for i, cell in enumerate(cells):  # bars packed within each group, one colour per implementation
        rows = [r for r in cell["results"] if r["speedup_vs_baseline"]]
        width = 0.8 / max(len(rows), 1)
        for k, r in enumerate(rows):
            name = r["implementation"]
            ax.bar(i + (k - (len(rows) - 1) / 2) * width, r["speedup_vs_baseline"], width, color=color[name],
                   label=None if name in labelled else name)
            labelled.add(name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"{c['kernel']}\n{c['mode']} {c['size']}\n{c['dtype']}" for c in cells], fontsize=8)
    ax.set_ylabel("speed-up over the PyTorch baseline (log)")
    ax.set_title(f"xloss bench — {result['machine']['cpu']}, {result['machine']['logical_cpus']} CPUs")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
