"""The PNG of ``xloss bench --plot``: one panel per kernel, a horizontal bar per native
implementation (the speed-up over the cell's PyTorch baseline, log scale, with its 95% interval
and its value written beside it), one colour per implementation in every panel, at most
1600 px wide. The vendor-ABI backends (C emulators) are not ranked, so not drawn."""

from __future__ import annotations

import math

from . import impls, stats
from .cells import BASELINE

#: Distinct colours (Okabe-Ito first, then others told apart in print); hatches once they run out.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#8C564B",
           "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD", "#F0E442", "#1B9E77", "#A6761D", "#E7298A")
HATCHES = ("", "//", "..", "xx")
WIDTH_IN, DPI = 13.2, 120  # 1584 px
ROW_IN = 0.26


def colours(result: dict) -> dict:
    """{implementation: (colour, hatch)}, by first appearance in the run: the same in every panel."""
    names = []
    for cell in result["cells"]:
        for r in cell["results"]:
            if r["implementation"] not in names and r["kind"] != impls.VENDOR_ABI:
                names.append(r["implementation"])
    return {n: (PALETTE[i % len(PALETTE)], HATCHES[(i // len(PALETTE)) % len(HATCHES)]) for i, n in enumerate(names)}


def _panels(result: dict) -> dict:
    out = {}
    for cell in result["cells"]:
        rows = [r for r in cell["results"] if r["kind"] != impls.VENDOR_ABI and r.get("speedup")]
        if rows:
            out.setdefault(cell["kernel"], []).append((cell, sorted(rows, key=lambda r: -r["speedup"]["ratio"])))
    return out


def _label(v: float) -> str:
    return f"{v:.0f}x" if v >= 10 else (f"{v:.1f}x" if v >= 1 else f"{v:.2f}x")


def _draw_panel(ax, kernel: str, groups, style) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    y, labels, ys, lows, highs = 0, [], [], [], []
    for cell, rows in groups:
        if len(groups) > 1:
            labels.append(f"{cell['mode']}, {cell['size']}")
            ys.append(y)
            y += 1
        for r in rows:
            sp = r["speedup"]
            v = sp["ratio"]
            lo, hi = sp["ci_low"] or v, sp["ci_high"] or v
            colour, hatch = style[r["implementation"]]
            hatch = "//" if r["kind"] == impls.FLOOR and not hatch else hatch  # a floor, not an implementation
            ax.barh(y, v - 1.0, left=1.0, height=0.75, color=colour, hatch=hatch, edgecolor="black", linewidth=0.4)
            if sp["ci_low"] is not None:
                ax.errorbar(v, y, xerr=[[v - lo], [hi - v]], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
            text = "baseline" if r["verdict"] == BASELINE else _label(v) + {
                stats.INDISTINGUISHABLE: " (=)", stats.TOO_FEW: " (n<3)"}.get(r["verdict"], "")
            ax.text(max(hi, 1.0) * 1.08, y, text, va="center", ha="left", fontsize=7)
            labels.append(r["implementation"])
            ys.append(y)
            lows.append(min(lo, 1.0))
            highs.append(max(hi, 1.0))
            y += 1
    ax.set_xscale("log")
    lo, hi = min(lows), max(highs)
    ax.set_xlim(lo / 1.6, hi * 4.0)  # room for the value labels right of the longest bar
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    for tick, text in zip(ax.get_yticklabels(), labels):
        if len(groups) > 1 and text in {f"{c['mode']}, {c['size']}" for c, _ in groups}:
            tick.set_fontweight("bold")
    ax.set_ylim(y - 0.4, -0.6)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _label(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    cell = groups[0][0]
    one = f", {cell['mode']} {cell['size']}" if len(groups) == 1 else ""
    ax.set_title(f"{kernel}{one}, {cell['dtype']} (vs {cell['baseline']})", fontsize=8)


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(result)
    if not panels:
        return
    style = colours(result)
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    heights = [sum(len(rows) + (len(g) > 1) for _, rows in g) for g in panels.values()]
    row_h = [max(heights[i * ncols:(i + 1) * ncols]) * ROW_IN + 0.9 for i in range(nrows)]
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH_IN, sum(row_h) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": row_h})
    for ax, (kernel, groups) in zip(axes.flat, panels.items()):
        _draw_panel(ax, kernel, groups, style)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    m, load = result["machine"], result.get("load", {})
    la = load.get("load_average_before")
    busy = "; BUSY MACHINE" if result.get("warnings") else ""
    fig.suptitle(f"xloss bench: speed-up over the PyTorch baseline (log scale; right of 1x = faster; bars: 95% "
                 f"intervals; (=): indistinguishable; hatched: a floor)\n{m['cpu']}, {m['logical_cpus']} CPUs, "
                 f"load average {'-' if la is None else f'{la:.1f}'}{busy}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
