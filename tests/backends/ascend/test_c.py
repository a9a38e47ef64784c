"""The ABI from C: the build, the exported symbols, the headers against the adapter's cffi
declarations, the example program (plain, under valgrind, under ASan/UBSan), a sanitizer
stress/fuzz program, and the Python ABI tests against a sanitized emulator."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xloss.backends import ascend_aclnn
from xloss.backends.ascend_aclnn import _cdef

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
# The sources and headers of this checkout (the installed package may be a non-editable copy).
PKG = ROOT / "backends" / "ascend_aclnn"
INCLUDE = PKG / "include"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


lib_build = _load("ascend_lib_build", PKG / "build.py")
EXPECTED_SYMBOLS = {
    "aclInit", "aclFinalize", "aclGetRecentErrMsg", "aclFloat16ToFloat", "aclFloatToFloat16", "aclDataTypeSize",
    "aclrtSetDevice", "aclrtResetDevice", "aclrtGetDevice", "aclrtGetDeviceCount", "aclrtCreateStream",
    "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclrtMemset",
    "aclCreateTensor", "aclDestroyTensor", "aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor",
    "xlossEmuLiveAllocations", "xlossEmuCast", "xlossEmuVersion",
} | {f"aclnn{op}{sfx}" for op in ("SigmoidFocalLoss", "SigmoidFocalLossBackward", "BinaryCrossEntropyBackward",
                                  "NLLLossBackward", "FusedLinearCrossEntropyLossGrad")
     for sfx in ("", "GetWorkspaceSize")}


def _example_module():
    return _load("ascend_build_example", ROOT / "examples" / "ascend_build_example.py")


def _sanitizer_runtime(name: str) -> str:
    return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()


def test_exports_exactly_the_abi_and_needs_no_python():
    lib = ascend_aclnn.emulator_library_path()
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in nm.splitlines() if line.split()[1] in "TtWw"}
    assert exported == EXPECTED_SYMBOLS
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    assert "python" not in needed.lower()


def test_setup_extension_and_script_build(tmp_path):
    ext = lib_build.extension(sanitize=False)
    assert ext.name == "xloss.backends.ascend_aclnn.libxloss_aclnn"
    assert sorted(Path(s).name for s in ext.sources) == sorted(p.name for p in lib_build.sources())
    assert "-fvisibility=hidden" in ext.extra_compile_args and "-DFUNC_VISIBILITY" in ext.extra_compile_args
    assert "-fsanitize=address,undefined" in lib_build.extension(sanitize=True).extra_compile_args
    out = tmp_path / "libxloss_aclnn.so"
    res = subprocess.run([sys.executable, str(Path(lib_build.__file__)), "--out", str(out)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert out.exists() and "warning" not in res.stderr


def test_headers_match_the_adapter_declarations(tmp_path, helpers):
    """Every function the adapter declares to cffi must have exactly the header's type."""
    protos = re.findall(r"^([\w\s\*]+?\b)(\w+)\((.*)\);$", _cdef.CDEF, flags=re.M)
    assert len(protos) > 30
    lines = ["#include <acl/acl.h>", "#include <aclnn/acl_meta.h>", "#include <xloss_aclnn_emu.h>"]
    lines += [f"#include <aclnnop/{h.name}>" for h in sorted((INCLUDE / "aclnnop").glob("*.h"))]
    for ret, name, args in protos:
        lines.append(f"{ret.strip()} (*check_{name})({args}) = {name};")
    src = tmp_path / "check.c"
    src.write_text("\n".join(lines) + "\n")
    helpers.compile_c(["-std=c11", "-c", "-Werror=incompatible-pointer-types", "-Wall", "-Wno-unused-const-variable",
                       f"-I{INCLUDE}", str(src), "-o", str(tmp_path / "check.o")])
    # and the headers are plain C++ too (extern "C")
    if shutil.which("g++"):
        cpp = tmp_path / "check.cpp"
        cpp.write_text("\n".join(lines[:-len(protos)]) + "\nint main() { return aclnnNLLLossBackward == 0; }\n")
        res = subprocess.run(["g++", "-fsyntax-only", f"-I{INCLUDE}", str(cpp)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return _example_module().build(tmp_path_factory.mktemp("example") / "ascend_nll_loss_backward", include=INCLUDE)


def test_c_example_runs_the_documented_flow(example):
    res = subprocess.run([str(example)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "reduction=0 result: [-3.41, 0, 0; 0, 0, -8.45]" in res.stdout
    assert "second run of a single-use executor: 161002" in res.stdout
    assert "live emulator objects after the checks: 0" in res.stdout
    assert "all checks passed" in res.stdout and "FAIL" not in res.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_c_example_under_valgrind(example):
    res = subprocess.run(["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
                          "--errors-for-leak-kinds=definite,indirect", str(example)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_c_example_and_stress_under_sanitizers(tmp_path, helpers):
    mod = _example_module()
    exe = tmp_path / "example_asan"
    subprocess.run(mod.build_command(exe, sanitize=True, include=INCLUDE, emulator_sources=PKG), check=True,
                   capture_output=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all checks passed" in res.stdout

    stress = tmp_path / "abi_stress"
    helpers.compile_c(["-std=c11", "-O1", "-g", *lib_build.SANITIZE, "-D_POSIX_C_SOURCE=200809L",
                       f"-I{INCLUDE}", f"-I{PKG / 'csrc'}", str(HERE / "c" / "abi_stress.c"),
                       *map(str, lib_build.sources()), "-o", str(stress), "-lm", "-pthread"])
    res = subprocess.run([str(stress), "20000"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    accepted, runs = map(int, re.search(r"(\d+) accepted by phase one, (\d+) runs", res.stdout).groups())
    assert accepted > 2000 and runs > 2000  # the fuzz reaches the kernels, not only the checks


def test_python_abi_suite_against_a_sanitized_emulator(tmp_path):
    """test_abi.py and test_strided.py (hypothesis, strided views) with the ASan/UBSan build preloaded."""
    asan, ubsan = _sanitizer_runtime("libasan.so"), _sanitizer_runtime("libubsan.so")
    if not os.path.isabs(asan) or not os.path.isabs(ubsan):
        pytest.skip("the compiler has no sanitizer runtimes")
    lib = lib_build.build(sanitize=True, out=tmp_path / "libxloss_aclnn.so")
    env = dict(os.environ, LD_PRELOAD=f"{asan}:{ubsan}", ASAN_OPTIONS="detect_leaks=0",
               XLOSS_ASCEND_TEST_EMULATOR=str(lib))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          str(HERE / "test_abi.py"), str(HERE / "test_strided.py")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert res.returncode == 0 and "Sanitizer" not in res.stdout + res.stderr, res.stdout[-4000:] + res.stderr[-4000:]
