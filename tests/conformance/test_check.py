"""`xloss check`: statistics, shrunk failures, replay, JSON, undeclared probes, crash isolation."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xloss
from xloss.conformance import runner
from xloss.conformance.casefile import case_from_json, load_cases, save_cases
from xloss.conformance.report import table, write_failures

BUGGY = textwrap.dedent('''
    """Backends for the check tests: one with a seeded bug, one that crashes on a given input size."""
    import ctypes

    import numpy as np

    from xloss import reference as ref
    from xloss.backend import Backend, KernelCaps


    class EpsAddedInsteadOfClamped(Backend):
        def __init__(self, **options):
            super().__init__(name="eps-bug", options=options)

        def capabilities(self):
            return {"bce_grad": KernelCaps.declare("bce_grad", dtypes=["float32"], eps_mode="clamp")}

        def bce_grad(self, a):  # the bug: x(1-x) + eps where max(x(1-x), eps) is declared
            a.out[...] = ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction, eps=a.eps,
                                      eps_mode="add")


    class KernelsFromATable(Backend):
        """Kernels looked up in a table, as the cpu backend keeps them (no method per kernel);
        declares the clamp form only, but computes either."""

        def __init__(self, **options):
            super().__init__(name="table", options=options)

        def capabilities(self):
            return {"bce_grad": KernelCaps.declare("bce_grad", dtypes=["float32"], eps_mode="clamp")}

        def kernel(self, name):
            return {"bce_grad": self._bce}.get(name)

        def _bce(self, a):
            a.out[...] = ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction, eps=a.eps,
                                      eps_mode=a.eps_mode)


    class CrashesOnMoreThanFourElements(Backend):
        def __init__(self, **options):
            super().__init__(name="crashy", options=options)

        def capabilities(self):
            return {"bce_grad": KernelCaps.declare("bce_grad", dtypes=["float32"]),
                    "nll_loss_grad": KernelCaps.declare("nll_loss_grad", dtypes=["float32"])}

        def bce_grad(self, a):
            if a.x.size > 4:
                ctypes.string_at(0)  # a segfault, as a broken C port would produce
            a.out[...] = ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction, eps=a.eps,
                                      eps_mode=a.eps_mode)

        def nll_loss_grad(self, a):
            a.out[...] = ref.nll_loss_grad(a.grad, a.self, a.target, weight=a.weight, reduction=a.reduction,
                                           ignore_index=a.ignore_index, total_weight=a.total_weight)
    ''')


@pytest.fixture
def buggy_module(tmp_path, monkeypatch):
    (tmp_path / "xloss_check_buggy.py").write_text(BUGGY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "xloss_check_buggy"


def test_seeded_bug_is_caught_with_a_small_replayable_input(buggy_module, tmp_path):
    b = xloss.backend(f"{buggy_module}:EpsAddedInsteadOfClamped")
    r = runner.run_target(b, "bce_grad", "float32", "clamp", max_examples=50, seed=1)
    assert r.status == "fail" and r.declared
    case = case_from_json(r.case)
    assert case.kwargs["x"].size <= 16, "the failing input should be small (edge case or shrunk)"
    assert "outside tolerance" in r.message
    saved = write_failures([r], tmp_path, "eps-bug", None)
    cases, meta = load_cases(saved[("bce_grad", "float32", "clamp")])
    np.testing.assert_array_equal(cases[0].kwargs["x"], case.kwargs["x"])
    assert meta["backend"] == "eps-bug" and meta["status"] == "fail"


def test_undeclared_targets_are_probed(buggy_module):
    b = xloss.backend(f"{buggy_module}:EpsAddedInsteadOfClamped")
    add = runner.run_target(b, "bce_grad", "float32", "add", max_examples=5)
    assert not add.declared and add.status == "fail" and "works but is not declared" in add.message
    f64 = runner.run_target(b, "bce_grad", "float64", "clamp", max_examples=5)
    assert f64.status == "wrong if forced"
    focal = runner.run_target(b, "focal_loss", "float32", "forward", max_examples=5)
    assert focal.status == "not implemented"


def test_undeclared_targets_are_probed_through_the_backends_own_kernel_lookup(buggy_module):
    b = xloss.backend(f"{buggy_module}:KernelsFromATable")
    add = runner.run_target(b, "bce_grad", "float32", "add", max_examples=5)
    assert add.status == "fail" and "works but is not declared" in add.message, add.message
    assert runner.run_target(b, "nll_loss_grad", "float32", "mean", max_examples=5).status == "not implemented"


def test_case_files_round_trip_exactly(tmp_path):
    from xloss.conformance import DESCRIPTORS

    cases = [c for d in DESCRIPTORS.values() for dt in ("bfloat16", "float16", "float32", "float64")
             for c in d.edge_cases(dt, d.modes()[-1])[:3]]
    path = save_cases(tmp_path / "cases.json", cases, backend="reference")
    back, meta = load_cases(path)
    assert meta == {"backend": "reference"} and len(back) == len(cases)
    for a, b in zip(cases, back):
        assert (a.kernel, a.mode, a.dtype, a.label) == (b.kernel, b.mode, b.dtype, b.label)
        for k, v in a.kwargs.items():
            if isinstance(v, np.ndarray):
                assert v.dtype == b.kwargs[k].dtype and v.shape == b.kwargs[k].shape
                np.testing.assert_array_equal(v.astype(np.float64), b.kwargs[k].astype(np.float64))
            else:
                assert v == b.kwargs[k]


def _xloss(*args, cwd):
    return subprocess.run([sys.executable, "-m", "xloss.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_cli_reports_a_crash_and_keeps_going(buggy_module, tmp_path):
    out = _xloss("check", "--backend", f"{buggy_module}:CrashesOnMoreThanFourElements", "--kernels", "bce", "nll",
                 "--max-examples", "15", "--no-large", "--json", str(tmp_path / "r.json"),
                 "--failures-dir", str(tmp_path / "f"),
                 cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    by_target = {(r["kernel"], r["dtype"], r["mode"]): r for r in report["results"]}
    crash = by_target[("bce_grad", "float32", "clamp")]
    assert crash["status"] == "crash" and "SIGSEGV" in crash["message"]
    assert case_from_json(crash["case"]).kwargs["x"].size > 4
    assert by_target[("nll_loss_grad", "float32", None)]["status"] == "pass"
    assert "CRASH: bce_grad float32" in out.stdout and "input that crashed" in out.stdout
    assert not report["passed"]
    replay = _xloss("check", "--replay", crash["replay_file"], "--backend", "reference", cwd=tmp_path)
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_cli_passes_a_correct_backend_and_writes_json(tmp_path):
    out = _xloss("check", "--backend", "reference", "--kernels", "nll", "--max-examples", "5", "--json",
                 str(tmp_path / "r.json"), "--in-process", "--no-large", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] and report["backend"] == "reference"
    assert {r["dtype"] for r in report["results"]} == {"float16", "bfloat16", "float32", "float64"}
    assert all(r["status"] == "pass" and r["examples"] > 5 for r in report["results"])
    assert "nll_loss_grad" in out.stdout and "PASSED" in out.stdout


def test_table_lists_every_target_with_tolerance_and_ratio():
    rows = [runner.TargetResult("bce_grad", "float32", "add", True, "pass", 3, 1e-7, 1e-7, 0.5, max_ratio=0.25,
                                tolerance=4e-7),
            runner.TargetResult("bce_grad", "float64", "add", True, "pass", 3, 0.0, 0.0, 0.0, tolerance=1e-15),
            runner.TargetResult("bce_grad", "float16", "add", False, "not implemented", 0),
            runner.TargetResult("focal_loss", "float32", "grad", True, "pass", 4, 1e-7, 1e-7, 0.5, group="large")]
    text = table(rows)
    lines = text.splitlines()
    assert "bce_grad" in text and "float32" in text and "tolerance" in lines[1] and "err/tol" in lines[1]
    f32 = next(line for line in lines if " float32 " in line and "bce_grad" in line).split()
    assert "4.00e-07" in f32 and "0.250" in f32
    f64 = next(line for line in lines if " float64 " in line).split()
    assert f64[5] == "0"  # zero error is 0 ...
    f16 = next(line for line in lines if " float16 " in line).split()
    assert "n/a" in f16 and "-" not in f16[4:]  # ... and not run is n/a
    assert "large cases" in text and text.index("large cases") < text.index("focal_loss")
