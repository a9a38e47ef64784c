"""What `xloss bench` prints and draws, on synthetic results: one unit per column, no throughput
for a floor, the vendor-ABI backends in their own unranked section, one line per skip reason, a
header without dangling separators, and a plot with one panel per kernel, one colour per
implementation in every panel, at most 1600 px wide."""

import pytest

from xloss.bench import impls, plot, report


def _lines_of(text, cell_head):
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(cell_head))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_one_unit_per_column(synthetic):
    make_cell, make_run = synthetic
    cell = make_cell("fused_linear_cross_entropy_grad", "recompute", "2048x1024x32000",
                     {"torch": 8.468, "xloss:cpu": 22.7})
    for r in cell["results"]:
        r["first_call_s"] = {"torch": 8.468, "xloss:cpu": 22.7}[r["implementation"]]
    lines = _lines_of(report.table(make_run([cell])), "fused_linear_cross_entropy_grad")
    head = lines[1]
    assert "median (s)" in head and "first call (s)" in head and " ms" not in "\n".join(lines)
    cpu = next(x for x in lines if x.strip().startswith("xloss:cpu")).split()
    torch_row = next(x for x in lines if x.strip().startswith("torch ")).split()
    assert float(torch_row[1]) == pytest.approx(8.468, rel=0.01) and float(cpu[1]) == pytest.approx(22.7, rel=0.01)
    assert report.unit([5e-4]) == ("µs", 1e6) and report.unit([0.5, 9.0]) == ("ms", 1e3)


def test_floor_has_no_throughput_and_emulators_are_apart(synthetic):
    make_cell, make_run = synthetic
    cell = make_cell("nll_loss_grad", "grad", "32768x1000",
                     {"torch": 0.030, "xloss:cpu": 0.012, "memset of the output": 0.004, "xloss:ascend": 0.05},
                     kinds={"memset of the output": impls.FLOOR, "xloss:ascend": impls.VENDOR_ABI})
    for r in cell["results"]:
        if r["kind"] not in (impls.FLOOR,):
            r["bytes_per_s"] = cell["bytes_moved"] / r["median_s"]
            r["fraction_of_bandwidth"] = r["bytes_per_s"] / 2e10
    cell["skipped"] = [{"name": "a", "reason": "cpu backend only"}, {"name": "b", "reason": "cpu backend only"}]
    lines = _lines_of(report.table(make_run([cell])), "nll_loss_grad")
    memset = next(x for x in lines if x.strip().startswith("memset")).split()
    assert memset[memset.index("faster") + 1:memset.index("faster") + 3] == ["-", "-"]  # no GB/s, no fraction
    section = next(i for i, x in enumerate(lines) if "vendor-ABI backends" in x)
    assert "not ranked" in lines[section]
    assert [x.split()[0] for x in lines[section + 2:section + 3]] == ["xloss:ascend"]
    assert all("xloss:ascend" not in x for x in lines[:section])  # not ranked among the natives
    assert "speed-up" not in lines[section + 1]
    skips = [x for x in lines if "skipped" in x]
    assert skips == ["  skipped a, b: cpu backend only"]


def test_header_has_no_dangling_separator(synthetic):
    make_cell, _ = synthetic
    cell = make_cell("lm_step", "idle", "4096x256x32000", {"torch": 2.6, "xloss fused step (cpu)": 1.6})
    cell.update(bytes_moved=None, floor_s=None)
    head = report.cell_header(cell)
    assert head.startswith("lm_step idle, size 4096x256x32000, float32  (baseline torch; 20 rounds in 4.9 s")
    assert "; )" not in head and not head.endswith("; )")
    cell.update(results=[], budget_s=None)
    assert report.cell_header(cell) == "lm_step idle, size 4096x256x32000, float32"


def test_plot_one_panel_per_kernel_fixed_colours_and_width(synthetic, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    import matplotlib.image

    make_cell, make_run = synthetic
    kernels = ["focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad",
               "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum", "lm_step"]
    cells = [make_cell(k, m, "1M", {"torch": 0.01, "xloss:cpu": 0.004 + i * 1e-4, "xloss:reference": 0.02,
                                    "xloss:ascend": 0.1}, kinds={"xloss:ascend": impls.VENDOR_ABI}, seed=i)
             for i, k in enumerate(kernels) for m in (("forward", "grad") if k == "focal_loss" else ("grad",))]
    result = make_run(cells)
    style = plot.colours(result)
    assert set(style) == {"torch", "xloss:cpu", "xloss:reference"}  # the emulator is not drawn
    assert len({c for c, _ in style.values()}) == len(style)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    real_close = plt.close
    plt.close = lambda fig=None: drawn.append(fig)
    try:
        plot.plot(result, tmp_path / "p.png")
    finally:
        plt.close = real_close
    fig = drawn[0]
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(kernels)  # one panel per kernel (focal's two modes share one)
    for ax in axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        bars = [p for p in ax.patches]
        names = [x for x in labels if x in style]
        assert len(bars) == len(names)
        for bar, name in zip(bars, names):
            assert matplotlib.colors.to_hex(bar.get_facecolor()) == style[name][0].lower()
    real_close(fig)
    height, width = matplotlib.image.imread(tmp_path / "p.png").shape[:2]
    assert width <= 1600
