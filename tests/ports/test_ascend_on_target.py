"""On-target conformance for the Ascend aclnn ports (xloss check --export / --judge, docs/on-target.md).

What this layer must show: the verdicts of the on-target flow (export the check's calls, build the exported C runner
with the host compiler against the port and the emulator's runtime, AscendCL: aclrtMalloc, aclrtMemcpy,
aclCreateTensor, two-phase calls with workspace; run it, judge its results) are those of the host check
(`xloss check --lib`) on the same port with the same settings: per target, the status and the example it first
fails at. A port reaches a verdict only through the bytes the runner writes for each recorded call; the rest is the
host check's own code, run by the export on the emulator and by the judge. So the equality holds for any port once
these are shown, each by the cheapest port that shows it (ON_TARGET below: one export each, at one example):

1. every operator is called with the host's arguments (tensors with their layouts, the int64, double, float,
   ``char *`` and ``bool`` records) and its results come back where the host's do: the correct port on every kernel
   passes on target, and the DrivingSDK-ABI port on focal loss (its own two operators);
2. a wrong result of every operator reaches the judge as the port's: for each kernel (its operators), one port whose
   bug lives there fails on target where it fails on the host;
3. every kind of difference a port can make is carried and judged as on the host: output values, and half results
   rounded the wrong way (half_output_trunc: exact bits); bytes past a buffer (nll_zero_fill_rounded, the guards);
   an input written (focal_grad_scratch_in_self); an output element never written, left as the poison the host
   adapter put there (nll_zero_fill_short); a bug only a strided layout shows (bce_contiguous_fast_path); an
   operator left out (no_focal_backward: the declarations); a port within the vendor kernel's own range only
   (drivingsdk_vendor_numerics: that status).

Another buggy port of a kernel shown adds nothing: its bug changes only its own bytes, and 1-3 show that bytes of
each kind arrive as the host's. (Each port used to run here, on the kernels its code changes: 63 s of CI, three
suite runs per port.) Each entry names a status its port must show on target: a bug the settings miss would show
nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import xloss
from xloss.backends.ascend_aclnn import emulator_runtime_path
from xloss.conformance import runner
from xloss.conformance.export import export
from xloss.conformance.judge import judge_results

HERE = Path(__file__).resolve().parent
CC = os.environ.get("CC", "gcc").split()[0]
FLCE = "fused_linear_cross_entropy_grad"
VP = ("fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum")


@pytest.fixture(scope="module")
def build_mod(port_harness):
    return port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build_on_target")


@pytest.fixture(scope="module")
def ports(port_harness, build_mod) -> dict[str, str]:
    if shutil.which(CC) is None:
        pytest.skip("no C compiler")
    return {v: str(p) for v, p in port_harness.build(build_mod.build).items()}


def _settings(kernels, max_examples, repeat=3):
    return {"max_examples": max_examples, "seed": 0, "kernels": kernels, "large": False, "repeat": repeat,
            "repeat_given": False}


def build_runner(folder: Path, lib: str, *extra) -> None:
    rt = emulator_runtime_path()
    res = subprocess.run([str(folder / "build.sh"), lib, rt, f"-Wl,-rpath,{Path(rt).parent}", *extra],
                         capture_output=True, text=True, env=dict(os.environ, CC=CC), check=False)
    assert res.returncode == 0, res.stderr


def on_target(folder, lib, kernels, max_examples, repeat=3, **options):
    export(folder, "ascend", dict(options, lib=lib), _settings(kernels, max_examples, repeat))
    build_runner(folder, lib)
    res = subprocess.run([str(folder / "xloss_runner"), str(folder)], capture_output=True, text=True, check=False,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in judge_results(folder)[1]}


def on_host(lib, kernels, max_examples, **options):
    """The host check on the port, in the judge's flow: unshrunk (the judge reports the first failure as found; a
    shrunk one may be another example) and without the leak measurement (which the judge leaves out)."""
    results = runner.run_suite(xloss.backend("ascend", lib=lib, **options), kernels=kernels,
                               max_examples=max_examples, seed=0, shrink=False, leaks=False)
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in results}


def assert_same_verdicts(target, host):
    """Per target: the same status, first failing at the same example, after the same number of examples (a target
    the judge passes without running it shows as a difference in the count)."""
    got = {k: (r.status, r.found_at, r.examples) for k, r in target.items()}
    want = {k: (r.status, r.found_at, r.examples) for k, r in host.items()}
    assert got == want, "\n".join(f"{k}: on target {got.get(k)}, host {want.get(k)}: {target[k].message}"
                                  for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k))


BCE, NLL, FOCAL = "bce_grad", "nll_loss_grad", "focal_loss"
CE, CE_GRAD = "cross_entropy_loss", "cross_entropy_loss_grad"
FAILS = "fail"  # some target fails (any failing status); otherwise no target fails and the status named is shown


def entry(variant, kernels, shows, marks=(), **options):
    """One port on target (see the module docstring): ``kernels`` None is every kernel; ``shows``, a status the port
    must show on target (FAILS: some failing one; else none fails)."""
    return pytest.param(variant, kernels, options, shows, marks=marks,
                        id=variant + "".join(f"-{k}={v}" for k, v in options.items()))


ON_TARGET = [
    # 1. every operator: the correct ports pass everything
    entry("correct", None, runner.PASS, marks=pytest.mark.slow),  # every kernel: about 15 s
    entry("drivingsdk", [FOCAL], runner.PASS),
    # 2. one bug per kernel: a wrong result arrives as the port's
    entry("focal_mean_padded_count", [FOCAL], FAILS),  # aclnnXlossSigmoidFocalLoss
    entry("focal_grad_scratch_in_self", [FOCAL], FAILS),  # ...Backward; 3. also: an input written
    entry("drivingsdk_grad_alpha_swapped", [FOCAL], FAILS),  # aclnnSigmoidFocalLossGrad
    entry("half_output_trunc", [BCE], FAILS),  # aclnnBinaryCrossEntropyBackward; 3. also: exact half bits
    entry("nll_zero_fill_rounded", [NLL], FAILS),  # aclnnNLLLossBackward; 3. also: bytes past a buffer
    entry("flce_mask_from_target", [FLCE], FAILS),
    entry("vp_end_inclusive", [VP[0]], FAILS),
    entry("vp_softmax_half_inv", [VP[1]], FAILS),
    entry("nllf_mean_by_n", ["nll_loss"], FAILS),  # aclnnNLLLoss
    entry("nll2d_target_column_major", ["nll_loss"], FAILS),  # aclnnNLLLoss2d
    entry("bcef_log_unclamped", ["binary_cross_entropy"], FAILS),
    entry("ce_no_max_shift", [CE], FAILS),  # aclnnCrossEntropyLoss (a char * reduction, a bool)
    entry("ce_grad_mean_counts_ignored", [CE, CE_GRAD], FAILS),  # ...Grad fails, the forward passes
    # 3. the kinds of difference
    entry("nll_zero_fill_short", [NLL], FAILS, marks=pytest.mark.slow),  # an element never written: about 10 s
    entry("bce_contiguous_fast_path", [BCE], FAILS, layout="strided"),
    entry("no_focal_backward", [FOCAL], "not implemented"),
    entry("drivingsdk_vendor_numerics", [FOCAL], runner.PASS_IN_VENDOR_RANGE),
]


@pytest.mark.parametrize("variant,kernels,options,shows", ON_TARGET)
def test_on_target_verdict_equals_host(variant, kernels, options, shows, ports, tmp_path):
    target = on_target(tmp_path / "x", ports[variant], kernels, 1, **options)
    assert_same_verdicts(target, on_host(ports[variant], kernels, 1, **options))
    statuses = {r.status for r in target.values()}
    if shows == FAILS:
        assert statuses & set(runner.FAILING), statuses
    else:
        assert shows in statuses and not statuses & set(runner.FAILING), statuses


def test_runner_builds_warning_free(ports, tmp_path):
    folder = tmp_path / "x"
    export(folder, "ascend", {"lib": ports["correct"]}, _settings(["bce_grad"], 1))
    write_runner_for_every_operator(folder)
    for compiler in (["gcc", "-std=c99", "-pedantic"], ["g++", "-x", "c++", "-pedantic"]):
        if shutil.which(compiler[0]) is None:
            continue
        res = subprocess.run([*compiler, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{folder / 'src'}",
                              str(folder / "src" / "xloss_runner.c")], capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr


def write_runner_for_every_operator(folder: Path) -> None:
    """runner_calls.h with a line for every operator the ABI has (not only those the cases call)."""
    import json

    from xloss.backends.ascend_aclnn import ontarget
    m = json.loads((folder / "manifest.json").read_text())
    ontarget.write_runner(folder, m["port"], [{"fname": op, "buffers": []} for op in ontarget.ON_TARGET_OPERATORS])


@pytest.mark.slow  # the runner with the sanitizers over every kernel of the correct port: about 20 s
def test_runner_is_sanitizer_clean(ports, tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    folder = tmp_path / "x"
    # export and judge through the command line, each in a fresh process, as an author runs them
    cli = [sys.executable, "-c", "import sys; from xloss.cli import main; sys.exit(main(sys.argv[1:]))", "check"]
    res = subprocess.run([*cli, "--export", str(folder), "--backend", "ascend", "--lib", ports["correct"],
                          "--option", "layout=strided", "--max-examples", "2", "--no-large"],
                         capture_output=True, text=True, check=False, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    build_runner(folder, ports["correct"], "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")
    res = subprocess.run([str(folder / "xloss_runner"), str(folder)], capture_output=True, text=True, check=False,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"), timeout=300)
    assert res.returncode == 0 and "runtime error" not in res.stderr, res.stderr[-3000:]
    res = subprocess.run([*cli, "--judge", str(folder), "--failures-dir", str(tmp_path / "f")], capture_output=True,
                         text=True, check=False, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
