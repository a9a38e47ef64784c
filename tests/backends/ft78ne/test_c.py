"""The C side on its own: the manual's example, the build script and setuptools extension, and
the emulator under AddressSanitizer/UndefinedBehaviorSanitizer and ThreadSanitizer."""

from __future__ import annotations

import os
import subprocess

import pytest

from xloss.backends.ft78ne_shim import abi

HERE = os.path.dirname(__file__)
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SHIM = os.path.join(REPO, "backends", "ft78ne_shim")
EMU_SOURCES = sorted(os.path.join(SHIM, "csrc", f) for f in os.listdir(os.path.join(SHIM, "csrc")) if f.endswith(".c"))
EXAMPLE = os.path.join(REPO, "examples", "ft78ne_bce.c")
SANITIZE = ("-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined")


def _run(cmd, **kw):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, **kw)


def test_the_manuals_example_against_the_emulator(cc, tmp_path):
    res = _run(["sh", os.path.join(REPO, "examples", "ft78ne_build.sh"), str(tmp_path / "ft78ne_bce")],
               cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("shared ") and lines[1].startswith("private ") and lines[-1] == "OK"
    assert "error 4 (fp_binarycrossentropygrad_p: dx [" in lines[2] and lines[2].endswith("dx untouched: yes")


@pytest.fixture(scope="module")
def asan_emulator(cc, tmp_path_factory):
    """The emulator's objects built once with ASan+UBSan, for the programs below to link."""
    out = tmp_path_factory.mktemp("asan")
    res = _run([cc, "-std=c11", "-O1", "-pthread", *SANITIZE, f"-I{SHIM}/include", f"-I{SHIM}/csrc", "-c",
                *EMU_SOURCES], cwd=out)
    assert res.returncode == 0, res.stderr
    return sorted(str(p) for p in out.glob("*.o"))


@pytest.mark.slow  # an instrumented emulator build
def test_example_and_emulator_under_asan_ubsan(compile_c, asan_emulator, tmp_path):
    exe = compile_c([EXAMPLE, *asan_emulator], tmp_path / "example", *SANITIZE)
    res = _run([str(exe)])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "OK", res.stdout + res.stderr
    assert "runtime error" not in res.stderr


@pytest.mark.slow  # an instrumented emulator build
def test_abi_stress_under_asan_ubsan(compile_c, asan_emulator, tmp_path):
    """Exact-size buffers at every boundary size, private-arena writes confined to the outputs,
    refused calls writing nothing (see c/abi_stress.c)."""
    exe = compile_c([os.path.join(HERE, "c", "abi_stress.c"), *asan_emulator], tmp_path / "stress", *SANITIZE)
    res = _run([str(exe)])
    assert res.returncode == 0 and "abi_stress: OK" in res.stdout, res.stdout + res.stderr
    assert "runtime error" not in res.stderr


@pytest.mark.slow  # an instrumented emulator build
def test_concurrent_callers_under_tsan(cc, tmp_path):
    exe = tmp_path / "stress_tsan"
    cmd = [cc, "-std=c11", "-O1", "-g", "-pthread", "-fsanitize=thread", f"-I{SHIM}/include", f"-I{SHIM}/csrc",
           os.path.join(HERE, "c", "abi_stress.c"), *EMU_SOURCES, "-o", str(exe), "-lm"]
    if _run(cmd).returncode:
        pytest.skip("this compiler cannot build with -fsanitize=thread")
    res = _run([str(exe), "--threads-only"])
    if "ThreadSanitizer: unexpected memory mapping" in res.stderr or "FATAL: ThreadSanitizer" in res.stderr:
        pytest.skip("ThreadSanitizer cannot run in this environment")
    assert res.returncode == 0 and "abi_stress: OK" in res.stdout, res.stdout + res.stderr
    assert "WARNING: ThreadSanitizer" not in res.stderr, res.stderr


def test_build_script_builds_the_same_library(cc, tmp_path):
    import sys

    out = tmp_path / "libxloss_ft78ne.so"
    res = _run([sys.executable, os.path.join(SHIM, "build.py"), "--out", str(out)])
    assert res.returncode == 0, res.stderr
    lib = abi.load([str(out)])
    assert all(lib.has(f"{p}_{op}_{f}") for p in ("fp", "hp") for op in abi.OPS for f in ("s", "p"))
    assert lib.has("ft78ne_emu_last_error") and not lib.has("nonexistent_symbol")
    ldd = _run(["ldd", str(out)]).stdout
    assert "libpython" not in ldd


def test_setuptools_extension(tmp_path):
    """What setup.py builds: the extension compiles and links with setuptools' own compiler driver."""
    import importlib.util

    from setuptools import Distribution

    spec = importlib.util.spec_from_file_location("ft78ne_build", os.path.join(SHIM, "build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    ext = build.extension(sanitize=False)
    assert ext.name == "xloss.backends.ft78ne_shim.libxloss_ft78ne"
    assert "-fvisibility=hidden" in ext.extra_compile_args
    assert "-fsanitize=address,undefined" not in ext.extra_compile_args
    assert "-fsanitize=address,undefined" in build.extension(sanitize=True).extra_compile_args
    assert sorted(os.path.basename(s) for s in ext.sources) == sorted(os.path.basename(s) for s in EMU_SOURCES)
    cwd = os.getcwd()
    os.chdir(REPO)  # setup.py runs from the repository root; the paths are relative to it
    try:
        dist = Distribution({"name": "ft78ne-test", "ext_modules": [ext]})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "tmp")
        cmd.ensure_finalized()
        cmd.run()
    finally:
        os.chdir(cwd)
    built = list((tmp_path / "lib").rglob("libxloss_ft78ne*.so"))
    assert len(built) == 1
    lib = abi.load([str(built[0])])
    assert lib.has("fp_binarycrossentropygrad_s") and lib.has("ft78ne_emu_private_alloc")


def test_manual_nll_example_runs_on_the_emulator(compile_c, tmp_path):
    """examples/ft78ne_nll.c: the manual's nlllossgrad signature, shared fp_ and private hp_ calls."""
    exe = compile_c([os.path.join(REPO, "examples", "ft78ne_nll.c")], tmp_path / "nll", f"-L{abi.EMULATOR.parent}",
                    "-lxloss_ft78ne", f"-Wl,-rpath,{abi.EMULATOR.parent}")
    res = _run([str(exe)])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "OK", res.stdout + res.stderr
    assert "error 7 (fp_nlllossgrad_s: labels[3] = 4 is out of range" in res.stdout
