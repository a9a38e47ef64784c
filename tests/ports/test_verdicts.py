"""Issue 23: a report the port author can act on (the replay that failed, the call the library received,
the failing example's err/tol) and ports written from the manual checked as written.

The FT78NE/MT7004 test ports (tests/ports/ft78ne/, built by its build.py) are the subjects; everything
runs in this process (``xloss check --in-process``), with a fixed seed and few examples.
"""

from __future__ import annotations

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
def dsp_ports(tmp_path_factory, port_harness) -> dict[str, str]:
    if shutil.which(os.environ.get("CC", "gcc").split()[0]) is None:
        pytest.skip("no C compiler")
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build")
    out = tmp_path_factory.mktemp("verdict_ports")
    return {v: str(p) for v, p in build.build_all(out, ["correct", "bce_eps_clamp"]).items()}


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
                          "bce", "--max-examples", "10", "--failures-dir", tmp_path / "fail")
    assert code == 1
    hints = [line.split("replay: ", 1)[1] for line in out.splitlines() if line.strip().startswith("replay: ")]
    assert hints, out
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
def aclnn_ports(tmp_path_factory, port_harness) -> dict[str, str]:
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    out = tmp_path_factory.mktemp("verdict_aclnn_ports")
    return {v: str(p) for v, p in build.build(out, ["correct", "drivingsdk"]).items()}


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


@pytest.mark.parametrize("chip, options", [("ft78ne", {"core_mask": 0x07}), ("mt7004", {"core_mask": 0x07}),
                                           ("mt7004", {"memory": "private", "private_bytes": 8192})])
def test_pure_float32_dsp_port_passes_every_configuration(dsp_ports, chip, options):
    backend = xloss.backend(chip, lib=dsp_ports["correct"], **options)
    results = runner.run_suite(backend, targets=_declared(backend), max_examples=6, seed=3)
    assert results and all(r.status == runner.PASS for r in results), \
        [(r.kernel, r.dtype, r.mode, r.status, r.message) for r in results if r.status != runner.PASS]


@pytest.mark.parametrize("variant, layout", [("correct", "contiguous"), ("correct", "strided"),
                                             ("drivingsdk", "contiguous")])
def test_pure_float32_aclnn_port_passes_every_configuration(aclnn_ports, variant, layout):
    backend = xloss.backend("ascend", lib=aclnn_ports[variant], layout=layout)
    results = runner.run_suite(backend, targets=_declared(backend), max_examples=6, seed=3)
    assert results and all(r.status == runner.PASS for r in results), \
        [(r.kernel, r.dtype, r.mode, r.status, r.message) for r in results if r.status != runner.PASS]


def test_the_ports_compute_in_float_only():
    """No double in the test ports' arithmetic: a double is allowed only as a printf argument of an
    error message or as the aclnn ABI's own scalar parameter type (gamma, alpha, labelSmoothing)."""
    import re

    allowed = re.compile(r"\(double\)\w+\)|double (gamma|alpha|labelSmoothing)\b")
    offending = []
    for path in sorted((HERE / "ascend").glob("*.c")) + sorted((HERE / "ft78ne").glob("*.c")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if re.search(r"\bdouble\b", allowed.sub("", code)) and not code.lstrip().startswith(("*", "/*")):
                offending.append(f"{path.name}:{number}: {line.strip()}")
    assert not offending, offending
