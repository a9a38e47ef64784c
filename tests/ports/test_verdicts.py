"""Issue 23: a report the port author can act on (the replay that failed, the call the library received,
the failing example's err/tol) and ports written from the manual checked as written.

The FT78NE/MT7004 test ports (tests/ports/ft78ne/, built by its build.py) are the subjects; everything
runs in this process (``xloss check --in-process``), with a fixed seed and few examples.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

import xloss
from xloss.cli import main as xloss_main
from xloss.conformance import runner

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def dsp_ports(port_harness) -> dict[str, str]:
    if shutil.which(os.environ.get("CC", "gcc").split()[0]) is None:
        pytest.skip("no C compiler")
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build")
    return {v: str(p) for v, p in port_harness.build(build.build_all, ["correct", "bce_eps_clamp"]).items()}


def _check(capsys, *argv):
    code = xloss_main(["check", "--in-process", "--no-large", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_empty_lib_is_a_usage_error(capsys, tmp_path):
    for lib in ("", " ", f"{tmp_path}/libx.so{os.pathsep}"):
        code, out, err = _check(capsys, "--backend", "ft78ne", "--lib", lib, "--kernels", "bce")
        assert code == 2 and "--lib names no library" in err and len(err.strip().splitlines()) == 1, (lib, err)
        assert "PASSED" not in out


def test_the_replay_hint_replays_exactly_what_failed(capsys, tmp_path, dsp_ports):
    lib = dsp_ports["bce_eps_clamp"]
    code, out, _ = _check(capsys, "--backend", "mt7004", "--lib", lib, "--option", "core_mask=0x07", "--kernels",
                          "bce", "--max-examples", "10", "--failures-dir", tmp_path / "fail", "--json",
                          tmp_path / "report.json")
    assert code == 1
    # the minimal case is also shown as the call the library received
    assert "as the library received it:\n    fp_binarycrossentropygrad_s(input_size=" in out
    assert "core_mask=0x07)" in out
    hints = [line.split("replay: ", 1)[1] for line in out.splitlines() if line.strip().startswith("replay: ")]
    assert hints, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["replay_command"] for r in report["results"] if r["replay_command"]] == hints
    argv = shlex.split(hints[0])
    assert argv[:2] == ["xloss", "check"]
    assert argv[argv.index("--backend") + 1] == "mt7004" and argv[argv.index("--lib") + 1] == lib
    assert argv[argv.index("--option") + 1] == "core_mask=7"
    assert xloss_main(argv[1:]) == 1  # run verbatim, the replay fails as the check did
    replay_out = capsys.readouterr().out
    assert "FAIL" in replay_out
    # without --lib the replay would run the in-tree emulator and pass: it refuses, naming the library
    i = argv.index("--lib")
    assert xloss_main(argv[1:i] + argv[i + 2:]) == 2
    err = capsys.readouterr().err
    assert f"recorded with library {lib}: pass --lib" in err and len(err.strip().splitlines()) == 1


def test_a_fail_row_shows_the_failing_examples_error_over_tolerance(dsp_ports):
    backend = xloss.backend("mt7004", lib=dsp_ports["bce_eps_clamp"], core_mask=0x07)
    r = runner.run_target(backend, "bce_grad", "float32", "add", max_examples=10, seed=0)
    assert r.status == "fail"
    assert r.max_ratio > 1 and r.tolerance > 0, (r.max_ratio, r.tolerance)
    # the worst error shown is at least the failing example's (not only the passing ones')
    assert r.max_abs >= r.max_ratio * r.tolerance * 0.999


def test_check_leaves_no_hypothesis_folder_in_the_working_directory(tmp_path, xloss_cli):
    res = xloss_cli("check", "--backend", "reference", "--kernels", "bce", "--max-examples", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (tmp_path / ".hypothesis").exists()


# ---- item 1: the tolerance contract admits every legal float32 evaluation order ---------------------

@pytest.fixture(scope="session")
def aclnn_ports(port_harness) -> dict[str, str]:
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    return {v: str(p) for v, p in port_harness.build(build.build, ["correct", "drivingsdk"]).items()}


def test_the_issues_float32_bce_port_is_not_accused(dsp_ports):
    """FT78NE BCE mean computed as grad / n in float32: a subnormal grad over n = 2 underflows to zero
    where the float64 oracle has 7e-34 (the false alarm of issue 23)."""
    import numpy as np

    from xloss.conformance import DESCRIPTORS
    from xloss.conformance.descriptor import Case
    from xloss.conformance.execute import check_case

    backend = xloss.backend("ft78ne", lib=dsp_ports["correct"]).checked()
    g = float(np.float32(1.4e-45))
    kwargs = dict(x=np.array([0.0, 0.5], np.float32), y=np.array([1.0, 0.0], np.float32), grad=g, reduction="mean",
                  eps=1e-12, eps_mode="add")
    case = Case("bce_grad", "add", "float32", kwargs)
    outputs, comparisons, _ = check_case(DESCRIPTORS["bce_grad"], case, backend)
    assert outputs[0][0] == 0.0  # the port really did underflow: the legal order, not a double one
    assert all(c.ok for c in comparisons)


def _declared(backend):
    return [t for t in runner.universe() if runner.declared_caps(backend, *t) is not None]


SLOW = pytest.mark.slow  # the other configurations: CI runs them (-m slow), the default suite one of each


# (the configurations the port tests already pass with more examples are left out: mt7004 on three cores,
# test_ft78ne_ports::test_correct_port_passes_everything_it_implements; the aclnn port contiguous,
# test_ascend_ports::test_correct_port_passes_everything_it_declares_through_the_cli; DrivingSDK's,
# test_ascend_ports::test_a_drivingsdk_only_port_is_checked_on_binary_targets_and_passes)
@pytest.mark.parametrize("chip, options", [
    ("ft78ne", {"core_mask": 0x07}),
    pytest.param("mt7004", {"memory": "private", "private_bytes": 8192}, marks=SLOW)])
def test_pure_float32_dsp_port_passes_every_configuration(dsp_ports, chip, options):
    backend = xloss.backend(chip, lib=dsp_ports["correct"], **options)
    results = runner.run_suite(backend, targets=_declared(backend), max_examples=6, seed=3)
    assert results and all(r.status == runner.PASS for r in results), \
        [(r.kernel, r.dtype, r.mode, r.status, r.message) for r in results if r.status != runner.PASS]


@pytest.mark.parametrize("variant, layout", [("correct", "strided")])
def test_pure_float32_aclnn_port_passes_every_configuration(aclnn_ports, variant, layout):
    backend = xloss.backend("ascend", lib=aclnn_ports[variant], layout=layout)
    results = runner.run_suite(backend, targets=_declared(backend), max_examples=6, seed=3)
    assert results and all(r.status == runner.PASS for r in results), \
        [(r.kernel, r.dtype, r.mode, r.status, r.message) for r in results if r.status != runner.PASS]


def test_the_ports_compute_in_float_only():
    """No double in the test ports' arithmetic: a double is allowed only as a printf argument of an
    error message or as the aclnn ABI's own scalar parameter type (gamma, alpha, labelSmoothing,
    lseSquareScaleForZloss)."""
    import re

    allowed = re.compile(r"\(double\)\w+\)|double (gamma|alpha|labelSmoothing|lseSquareScaleForZloss)\b")
    offending = []
    for path in sorted((HERE / "ascend").glob("*.c")) + sorted((HERE / "ft78ne").glob("*.c")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if re.search(r"\bdouble\b", allowed.sub("", code)) and not code.lstrip().startswith(("*", "/*")):
                offending.append(f"{path.name}:{number}: {line.strip()}")
    assert not offending, offending


# ---- item 7: ports written from the manual are checked as written ----------------------------------

@pytest.fixture(scope="session")
def manual_ports(tmp_path_factory) -> dict[str, str]:
    """tests/ports/ft78ne/manual.c under both readings of nlllossgrad's codes: no helper, no shim."""
    import subprocess

    import xloss.backends.ft78ne_shim as dsp

    cc = os.environ.get("CC", "gcc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("manual_ports")
    libs = {}
    for reading, defines in (("text", []), ("parameter_list", ["-DMANUAL_NLL_PARAMETER_LIST"])):
        lib = out / f"libmanual_{reading}.so"
        subprocess.run([*cc, "-std=c11", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Werror",
                        "-Wdouble-promotion", *defines, f"-I{dsp.include_dir()}", str(HERE / "ft78ne" / "manual.c"),
                        "-o", str(lib)], check=True, capture_output=True)
        libs[reading] = str(lib)
    return libs


def test_a_manual_written_port_runs_in_private_memory_without_a_shim_on_the_command_line(manual_ports, capsys):
    lib = manual_ports["text"]
    backend = xloss.backend("ft78ne", lib=lib, memory="private", private_bytes=4096)
    assert backend.availability() == (True, "")
    assert "xloss's private-memory shim" in backend.info()["private memory"]
    code, out, err = _check(capsys, "--backend", "ft78ne", "--lib", lib, "--option", "memory=private", "--option",
                            "private_bytes=4096", "--kernels", "bce", "nll", "--max-examples", "8")
    assert code == 0 and "PASSED: 2 pass" in out, out + err


@pytest.mark.parametrize("reading, option, other", [
    ("parameter_list", None, "nll_reduction_codes=sum,mean,none"),
    ("text", "nll_reduction_codes=sum,mean,none", "nll_reduction_codes=none,sum,mean"),
])
@pytest.mark.parametrize("memory", ["shared", pytest.param("private", marks=SLOW)])
def test_a_manual_reading_nll_port_gets_wrong_numbers_not_a_crash_and_the_reading_is_named(
        manual_ports, reading, option, other, memory):
    """The page's codes contradict each other: called under the other reading, the port reads a real
    total_weight and batch upstream values (wrong numbers, never a NULL or short buffer), and the
    report names the reading its results match and the option that selects it."""
    options = {"memory": memory, "core_mask": 0x07}
    if option:
        key, value = option.split("=")
        options[key] = value
    backend = xloss.backend("ft78ne", lib=manual_ports[reading], **options)
    r = runner.run_target(backend, "nll_loss_grad", "float32", None, max_examples=6, seed=0)
    assert r.status == runner.FAIL and "outside tolerance" in r.message, r.message
    assert "match another reading of the vendor's page" in r.message and f"pass --option {other}" in r.message
    key, value = other.split("=")
    right = xloss.backend("ft78ne", lib=manual_ports[reading], **dict(options, **{key: value}))
    assert runner.run_target(right, "nll_loss_grad", "float32", None, max_examples=6, seed=0).status == runner.PASS


def test_the_minimal_case_is_shown_as_the_abi_call(manual_ports, aclnn_ports):
    """xloss's reduction='none' with a scalar upstream gradient crosses the ABI as its sum: the report
    shows the ABI function, the reduction code as sent and every scalar and buffer size."""
    import numpy as np

    from xloss.conformance import DESCRIPTORS
    from xloss.conformance.descriptor import Case
    from xloss.conformance.execute import check_case

    x = np.array([0.25, 0.5, 0.75], np.float32)
    case = Case("bce_grad", "add", "float32", dict(x=x, y=np.array([0.0, 1.0, 0.0], np.float32), grad=2.0,
                                                   reduction="none", eps=1e-12, eps_mode="add"))
    # a library reading the codes another way (here: told 1 is sum, it reads 1 as mean) fails the case
    backend = xloss.backend("ft78ne", lib=manual_ports["text"], core_mask=0x05,
                            bce_reduction_codes="none,sum,mean").checked()
    with pytest.raises(AssertionError) as info:
        check_case(DESCRIPTORS["bce_grad"], case, backend)
    assert info.value.abi_calls == ["fp_binarycrossentropygrad_s(input_size=3, reduction=1 (sum), input_x=float[3] "
                                    "{0.25, 0.5, 0.75}, input_y=float[3] {0.0, 1.0, 0.0}, weight=NULL, dloss=float[1] "
                                    "{2.0}, dx=float[3], weight_defined=0, core_mask=0x05)"]
    r = runner.run_target(xloss.backend("mt7004", lib=manual_ports["text"], memory="private", private_bytes=4096,
                                        bce_reduction_codes="none,sum,mean"), "bce_grad", "float32", "add",
                          max_examples=5, seed=0)
    assert r.status == runner.FAIL and r.abi_calls and all("_p(" in c and "(private)" in c for c in r.abi_calls)
    # Ascend: the two-phase call's first phase, every tensor's dtype and shape
    ascend = xloss.backend("ascend", lib=aclnn_ports["correct"]).checked()
    from xloss import abi_log

    abi_log.begin()
    xloss.bce_grad(x, case.kwargs["y"], 2.0, reduction="sum", backend=ascend)
    assert abi_log.taken() == ["aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(gradOutput=FLOAT[], self=FLOAT[3], "
                               "target=FLOAT[3], weightOptional=NULL, reduction=2 (sum), out=FLOAT[3])"]
