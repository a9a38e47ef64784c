"""`xloss bench` on a tiny run: the table, JSON, CSV and PNG it writes have the promised structure;
the baseline is sampled in every round and every other implementation paired with it; mistakes
raise XLossValueError with one line."""

import csv
import json
import subprocess
import sys

import pytest

from xloss.bench import BenchConfig, machine, plot, report, run, timing, workloads
from xloss.errors import XLossValueError


@pytest.fixture(scope="module")
def result():
    cfg = BenchConfig(kernels=["focal", "nll", "flce"], backends=["cpu", "reference"],
                      sizes=["4k", "64x10", "8x16x40"], repeat=2, compile=False, cold_start=False)
    return run(cfg, progress=False)


def test_every_cell_has_the_promised_columns(result):
    assert {"cpu", "logical_cpus", "versions", "numba_threads", "torch_threads"} <= set(result["machine"])
    assert result["ceilings"]["copy_bandwidth_bytes_per_s"] > 0 and result["ceilings"]["gemm_peak_flops"] > 0
    cells = {(c["kernel"], c["mode"]): c for c in result["cells"]}
    assert set(cells) == {("focal_loss", "forward"), ("focal_loss", "grad"), ("focal_loss", "forward+grad"),
                          ("nll_loss_grad", "grad"), ("nll_loss_grad", "grad NCHW"),
                          ("fused_linear_cross_entropy_grad", "recompute")}
    for cell in result["cells"]:
        names = {r["implementation"] for r in cell["results"]}
        assert {"xloss:cpu", "xloss:reference", cell["baseline"]} <= names
        base = next(r for r in cell["results"] if r["implementation"] == cell["baseline"])
        assert base["speedup"]["ratio"] == 1.0 and base["verdict"] == "baseline"
        assert base["samples"] == cell["rounds"] == 2 and base["rounds"] == [0, 1]  # in every round
        for r in cell["results"]:
            assert 0 < r["p20_s"] <= r["median_s"] <= r["p80_s"] and 1 <= r["samples"] <= 2
            assert len(r["wall_samples_s"]) == len(r["rounds"]) == r["samples"] and r["loops"] >= 1
            assert r["process_cpu_s"] >= 0 and r["thread_cpu_s"] >= 0 and r["first_call_s"] > 0
            assert "cold_first_call_s" not in r  # cold start is opt-in
            floor = r["kind"] == "floor"
            assert ("fraction_of_bandwidth" in r) == (cell["kernel"] != "fused_linear_cross_entropy_grad"
                                                      and not floor)
            if r is not base:
                sp = r["speedup"]
                assert sp["pairs"] == r["samples"] and sp["ci_low"] is None  # 2 pairs: no interval
                assert r["verdict"] == "too few samples"
        assert cell["load"]["other_cpus"] is None or cell["load"]["other_cpus"] >= 0
        assert cell["budget_s"] > 0 and cell["used_s"] > 0
    assert result["ceilings"]["gemm_peak_library"] == "torch"  # fixed: torch when installed
    assert isinstance(result["warnings"], list) and "load" in result
    focal = cells[("focal_loss", "forward+grad")]
    assert any(s["name"] == "torch.compile (A.1)" and "disabled" in s["reason"] for s in focal["skipped"])
    nll = {r["implementation"] for r in cells[("nll_loss_grad", "grad")]["results"]}
    assert {"xloss:cpu out=", "memset of the output"} <= nll
    nd = cells[("nll_loss_grad", "grad NCHW")]  # the same 64 positions x 10 classes as (1, 10, 1, 64)
    assert {"xloss:cpu out=", "torch aten backward", "torch eager"} <= {r["implementation"] for r in nd["results"]}
    assert any(s["name"] == "torch.compile" and "disabled" in s["reason"] for s in nd["skipped"])
    flce = {r["implementation"] for r in cells[("fused_linear_cross_entropy_grad", "recompute")]["results"]}
    assert {"torch materialised", "3 bare GEMMs"} <= flce


def test_writers(result, tmp_path):
    back = json.loads(report.json_text(result))
    assert back["cells"][0]["results"][0]["implementation"] and back["schema"] == 2
    lines = report.csv_text(result).splitlines()
    assert lines[0].startswith("# ") and "numba threads" in lines[0]
    rows = list(csv.DictReader(lines[1:]))
    assert len(rows) == sum(len(c["results"]) for c in result["cells"])
    assert {"kernel", "implementation", "median_s", "speedup", "speedup_ci_low", "verdict"} <= set(rows[0])
    plot.plot(result, tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = report.table(result)
    assert "focal_loss forward+grad" in text and "n x loops" in text


@pytest.mark.slow  # 134 s at load 15: two cold-start interpreters (compiling, importing torch)
def test_cli_quick_flags(tmp_path):
    out = subprocess.run([sys.executable, "-m", "xloss.cli", "bench", "--kernels", "bce", "--sizes", "2k",
                          "--backends", "cpu", "--repeat", "2", "--no-compile", "--no-progress", "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "bce_grad grad, size 2k, float32" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["config"]["repeat"] == 2


def test_sizes():
    assert workloads.parse_count("8M") == 8_000_000 and workloads.parse_dims("2048x1024x32000", 3) == (2048, 1024,
                                                                                                        32000)
    with pytest.raises(ValueError, match="not a size"):
        workloads.parse_count("lots")
    assert workloads.sizes_for("nll_loss_grad", ["8M", "10x20"], quick=False) == ["10x20"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(backends=["cpuu"]), "unknown backend 'cpuu'"),
    (dict(sizes=["4X"]), "bad size '4X'"),
    (dict(sizes=["lots"]), "bad size 'lots'"),
    (dict(kernels=["focal"], sizes=["10x20"]), "fits none of the selected kernels"),
    (dict(kernels=["focul"]), "unknown kernel 'focul'"),
    (dict(dtype="float8"), "unknown dtype"),
    (dict(repeat=0), "repeat must be a positive integer"),
    (dict(max_call_s=float("nan")), "max_call_s must be a positive, finite number"),
    (dict(max_call_s=-1.0), "max_call_s must be a positive, finite number"),
    (dict(budget_s=float("inf")), "budget_s must be a positive, finite number"),
    (dict(kernels=["bce"], sizes=["999999999G"]), "needs about .* GiB"),
])
def test_mistakes_raise_one_line_xloss_value_errors(kwargs, match):
    with pytest.raises(XLossValueError, match=match) as info:
        run(BenchConfig(**kwargs), progress=False)
    assert "\n" not in str(info.value)


@pytest.mark.slow  # a fresh interpreter compiles the BCE kernel from an empty cache
def test_cold_first_call_includes_compilation_in_a_fresh_process():
    """The cold first call runs in another interpreter with empty caches: it must take at least
    as long as a warm call here (it compiles), and report a time, not an error."""
    spec = {"kernel": "bce_grad", "mode": "grad", "size": "2k", "dtype": "float32", "backends": ["cpu"],
            "candidate": "xloss:cpu"}
    seconds, why = timing.cold_first_call(spec, timeout_s=300)
    assert why == "" and seconds is not None, why
    w = workloads.build("bce_grad", "grad", "2k", "float32")
    from xloss.bench import impls

    fn = impls.xloss_candidates(w, ["cpu"])[0][0].fn
    warm = min(timing.first_call_seconds(fn) for _ in range(3))
    assert seconds > warm
    bad = dict(spec, candidate="no such candidate")
    assert timing.cold_first_call(bad, timeout_s=300)[1].startswith("no candidate")


def test_busy_warnings():
    cells = [{"kernel": "k", "mode": "m", "size": "s",
              "results": [{"implementation": "a", "p20_s": 1.0, "p80_s": 2.0}]}]
    cpus = __import__("os").cpu_count()
    warns = machine.busy_warnings(load_before=10.0 * cpus, other_cpus=1.5, cells=cells)
    assert len(warns) == 3 and "load average" in warns[0] and "other processes" in warns[1] and "spread" in warns[2]
    assert machine.busy_warnings(0.0, 0.0, [{"kernel": "k", "mode": "m", "size": "s", "results": [
        {"implementation": "a", "p20_s": 1.0, "p80_s": 1.1}]}]) == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_step_workload_runs_both_steps_with_the_same_loss(dtype):
    """The stock and the fused step of one seeded model compute the same loss (the fused loss is
    the same cross entropy), and both update the parameters."""
    from xloss.bench import training

    lm = training.LM(training.parse_step("64x16x100", dtype))
    head = lm.head.weight.detach().clone()
    stock = lm.stock_step()
    assert not torch_equal(head, lm.head.weight)
    lm2 = training.LM(training.parse_step("64x16x100", dtype))
    fused = lm2.fused_step("cpu")
    tol = 1e-5 if dtype == "float32" else 2e-2
    assert fused == pytest.approx(stock, rel=tol)


def torch_equal(a, b):
    import torch

    return bool(torch.equal(a, b))


@pytest.mark.slow  # 25 s on the shared 2-core machine at load 15 (a few seconds when quiet)
def test_lm_step_cells_idle_and_busy_with_the_baseline_in_every_round(monkeypatch):
    pytest.importorskip("torch")
    # the machine's ceilings, which this test does not read, fixed (test_every_cell_has_the_promised_columns measures)
    monkeypatch.setattr(machine, "copy_bandwidth", lambda: 1e10)
    monkeypatch.setattr(machine, "gemm_peak", lambda torch, dtype: (1e11, "torch"))
    r = run(BenchConfig(kernels=["lm_step"], backends=["cpu", "reference"], sizes=["64x16x100"], repeat=2,
                        cold_start=False), progress=False)
    cells = {c["mode"]: c for c in r["cells"]}
    assert set(cells) == {"idle", "busy"}
    for cell in cells.values():
        names = {x["implementation"] for x in cell["results"]}
        assert names == {"torch stock step", "xloss fused step (cpu)"}
        assert {x["samples"] for x in cell["results"]} <= {1, 2} and cell["rounds"] == 2
        assert any(s["name"] == "xloss fused step (reference)" for s in cell["skipped"])
    with pytest.raises(XLossValueError, match="training-step size"):
        __import__("xloss.bench.training", fromlist=["x"]).parse_step("64x16", "float32")


def test_vocab_parallel_kernels_bench_with_the_baseline_in_every_round(monkeypatch):
    """A tiny run of the two vocabulary-parallel kernels: every candidate (cpu, the float64
    reference, PyTorch eager, the floor) timed, the baseline in every round; GEMM FLOPs for the
    shard's statistics, bytes moved for the loss and softmax. (The machine's ceilings, measured
    by the module's run, are fixed here: seconds of measuring that this test does not check.)"""
    monkeypatch.setattr(machine, "copy_bandwidth", lambda: 1e10)
    monkeypatch.setattr(machine, "gemm_peak", lambda torch, dtype: (1e11, "torch"))
    r = run(BenchConfig(kernels=["online_max_sum", "loss_with_max_sum"], backends=["cpu", "reference"],
                        sizes=["16x8x300", "16x300"], repeat=2, compile=False, cold_start=False), progress=False)
    cells = {c["kernel"]: c for c in r["cells"]}
    assert set(cells) == {"fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"}
    floors = {"fused_linear_online_max_sum": "bare GEMM", "fused_cross_entropy_loss_with_max_sum":
              "memset of the softmax"}
    for kernel, cell in cells.items():
        names = {row["implementation"] for row in cell["results"]}
        assert {"xloss:cpu", "xloss:reference", "torch eager", floors[kernel]} == names
        assert cell["baseline"] == "torch eager"
        assert cell["rounds"] == 2 and {row["samples"] for row in cell["results"]} <= {1, 2}
        assert ("flops_per_s" in cell["results"][0]) == (kernel == "fused_linear_online_max_sum")
        assert ("bytes_per_s" in cell["results"][0]) == (kernel != "fused_linear_online_max_sum")
    assert cells["fused_linear_online_max_sum"]["mode"] == "forward"
    assert cells["fused_cross_entropy_loss_with_max_sum"]["mode"] == "softmax"
