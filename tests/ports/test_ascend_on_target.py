"""On-target conformance for the Ascend aclnn ports (xloss check --export / --judge, docs/on-target.md).

For each port: export the check's calls, build the exported C runner with the host compiler against
the port and the emulator's runtime (AscendCL: aclrtMalloc, aclrtMemcpy, aclCreateTensor, two-phase
calls with workspace), run it, judge its results, and compare the verdict per target with the host
check (`xloss check --lib`) on the same port. The slow sweep runs every port.
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
#: variant name prefix -> the kernels its code changes (the sweep tests those only)
#: the cross-entropy kernels (a char * reduction, a bool: their own records) have their own small on-target test
#: (test_cross_entropy_on_target), so the sweep of every port leaves them out
OWN_TEST = ("cross_entropy_loss", "cross_entropy_loss_grad")


def reach(build_mod, variant):
    """The kernels whose code the port's switches change (every kernel for the correct port): the others
    link the correct port's very objects."""
    changed = build_mod.changed_kernels(variant) or list(xloss.kernels.KERNELS)
    return [k for k in changed if k not in OWN_TEST]


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
    results = runner.run_suite(xloss.backend("ascend", lib=lib, **options), kernels=kernels,
                               max_examples=max_examples, seed=0)
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in results}


def assert_same_verdicts(target, host):
    got = {k: r.status for k, r in target.items()}
    want = {k: r.status for k, r in host.items()}
    assert got == want, "\n".join(f"{k}: on target {got.get(k)}, host {want.get(k)}: {target[k].message}"
                                  for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k))


SLOW = pytest.mark.slow  # BCE's undeclared eps mode is probed and shrunk three times over: about 25 s each
CASES = [  # (variant, kernels, options)
    pytest.param("correct", ["focal_loss"], {}, id="correct"),
    pytest.param("focal_grad_scratch_in_self", ["focal_loss"], {}, id="input-written"),
    pytest.param("bce_eps_added", ["bce_grad"], {}, id="numerics", marks=SLOW),
    pytest.param("bce_contiguous_fast_path", ["bce_grad"], {"layout": "strided"}, id="strided", marks=SLOW),
]


@pytest.mark.parametrize("variant,kernels,options", CASES)
def test_on_target_verdict_equals_host(variant, kernels, options, ports, tmp_path):
    target = on_target(tmp_path / "x", ports[variant], kernels, 2, **options)
    assert_same_verdicts(target, on_host(ports[variant], kernels, 2, **options))
    assert (variant == "correct") != any(r.status in runner.FAILING for r in target.values())


@pytest.mark.slow  # the NLL edge cases (N=4097, C=300) through the runner: about 15 s
def test_an_output_element_never_written_fails_on_target(ports, tmp_path):
    """nll_zero_fill_short leaves one element of out as the device gave it (the poison)."""
    target = on_target(tmp_path / "x", ports["nll_zero_fill_short"], ["nll_loss_grad"], 2)
    assert_same_verdicts(target, on_host(ports["nll_zero_fill_short"], ["nll_loss_grad"], 2))
    assert any(r.status == runner.FAIL for r in target.values())


def test_cross_entropy_on_target(ports, tmp_path):
    """aclnnCrossEntropyLoss[Grad] through the runner: their `char *` reduction and `bool` returnZloss cross as the
    records' strings and bools, and a port whose gradient divides the mean by every row gets the host's verdicts:
    the gradient fails, the forward passes. One example and one repeat: the edge cases carry the bug."""
    lib, kernels = ports["ce_grad_mean_counts_ignored"], ["cross_entropy_loss", "cross_entropy_loss_grad"]
    target = on_target(tmp_path / "x", lib, kernels, 1, repeat=1)
    # the host check's verdicts on this port (test_ascend_ports: the bug fails the gradient in every dtype)
    declared = {k: r.status for k, r in target.items() if r.status != runner.REFUSED}
    assert declared == {(k, dt, "None", runner.DRAWN): "fail" if k.endswith("grad") else "pass"
                        for k in kernels for dt in ("bfloat16", "float16", "float32")}, declared


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


#: the ports the tests above already check on target, with no options, on the kernels their code changes,
#: with more examples than the sweep: the sweep leaves them out
ELSEWHERE = {(c.values[0], tuple(c.values[1])) for c in CASES if not c.values[2]} | {
    ("nll_zero_fill_short", ("nll_loss_grad",))}


@pytest.mark.slow  # every port (23), the kernels its code changes (all for the correct port): 2-4 minutes
def test_every_port_on_target(ports, build_mod, tmp_path):
    for variant, lib in ports.items():
        if variant.startswith("ce_"):  # their bugs live in the cross-entropy operators: test_cross_entropy_on_target
            continue
        kernels = reach(build_mod, variant)
        if (variant, tuple(kernels)) in ELSEWHERE:
            continue
        folder = tmp_path / variant
        assert_same_verdicts(on_target(folder, lib, kernels, 1), on_host(lib, kernels, 1))
        shutil.rmtree(folder)


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
