"""The ABI from C: the build of the two libraries, their exported symbols, the headers against the
adapter's cffi declarations, the example program (plain and under ASan/UBSan) and a sanitizer
stress/fuzz program. (Valgrind, the Python suites under ASan/UBSan and ThreadSanitizer: in
tests/hardening/test_ascend_leaks.py and test_ascend_sanitizers.py.)"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xloss.backends import ascend_aclnn
from xloss.backends.ascend_aclnn import _cdef, operators

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
RUNTIME_SYMBOLS = {
    "aclInit", "aclFinalize", "aclnnInit", "aclnnFinalize", "aclGetRecentErrMsg", "aclFloat16ToFloat",
    "aclFloatToFloat16", "aclDataTypeSize",
    "aclrtSetDevice", "aclrtResetDevice", "aclrtGetDevice", "aclrtGetDeviceCount", "aclrtCreateStream",
    "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclrtMemset",
    "aclCreateTensor", "aclDestroyTensor", "aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor",
    "aclGetViewShape", "aclGetViewStrides", "aclGetViewOffset", "aclGetStorageShape", "aclGetDataType",
    "aclGetFormat", "aclGetRawTensorAddr",
    "xlossEmuLiveAllocations", "xlossEmuCast", "xlossEmuVersion", "xlossEmuDescribeTensor", "xlossEmuCreateExecutor",
    "xlossEmuRunExecutor", "xlossEmuSetErrMsg",
}
# every operator the backend's table names, both phases (a family's new operator joins through the table)
OPERATOR_SYMBOLS = {f"{op}{sfx}" for op in operators.OPERATORS for sfx in ("", "GetWorkspaceSize")}


def _example_module():
    return _load("ascend_build_example", ROOT / "examples" / "ascend_build_example.py")


def _exports(lib) -> set:
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in nm.splitlines() if line.split()[1] in "TtWw"}


def test_two_libraries_export_exactly_the_abi_and_need_no_python():
    """The runtime exports no operator; the operators export nothing but the operator
    functions and find the runtime next to themselves."""
    ops, rt = ascend_aclnn.emulator_library_path(), ascend_aclnn.emulator_runtime_path()
    assert _exports(rt) == RUNTIME_SYMBOLS
    assert _exports(ops) == OPERATOR_SYMBOLS
    dyn_ops = subprocess.run(["readelf", "-d", ops], capture_output=True, text=True, check=True).stdout
    dyn_rt = subprocess.run(["readelf", "-d", rt], capture_output=True, text=True, check=True).stdout
    assert "python" not in (dyn_ops + dyn_rt).lower()
    runpath = next((line for line in dyn_ops.splitlines() if "RUNPATH" in line or "RPATH" in line), "")
    assert "Shared library: [libxloss_aclrt.so]" in dyn_ops and "$ORIGIN" in runpath
    assert "Library soname: [libxloss_aclrt.so]" in dyn_rt and "SYMBOLIC" in dyn_rt


def test_setup_extensions_and_script_build(tmp_path):
    rt_ext, ops_ext = lib_build.extensions(sanitize=False)
    assert (rt_ext.name, ops_ext.name) == ("xloss.backends.ascend_aclnn.libxloss_aclrt",
                                           "xloss.backends.ascend_aclnn.libxloss_aclnn")
    assert sorted(Path(s).name for s in rt_ext.sources) == sorted(lib_build.RUNTIME_SOURCES)
    assert sorted(Path(s).name for s in ops_ext.sources) == sorted(lib_build.OPERATOR_SOURCES)
    assert ops_ext.libraries == ["xloss_aclrt"] and ops_ext.xloss_needs == [rt_ext.name]
    assert "-Wl,-rpath,$ORIGIN" in ops_ext.extra_link_args and "-Wl,-soname,libxloss_aclrt.so" in rt_ext.extra_link_args
    for ext in (rt_ext, ops_ext, lib_build.extension(sanitize=False)):
        assert "-fvisibility=hidden" in ext.extra_compile_args and "-DFUNC_VISIBILITY" in ext.extra_compile_args
    assert all("-fsanitize=address,undefined" in e.extra_compile_args for e in lib_build.extensions(sanitize=True))
    # the one-library form setup.py may still call: every source in one self-contained library
    assert sorted(Path(s).name for s in lib_build.extension(sanitize=False).sources) == \
        sorted(lib_build.RUNTIME_SOURCES + lib_build.OPERATOR_SOURCES)
    out = tmp_path / "libxloss_aclnn.so"
    res = subprocess.run([sys.executable, str(Path(lib_build.__file__)), "--out", str(out)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert out.exists() and (tmp_path / "libxloss_aclrt.so").exists() and "warning" not in res.stderr
    # the pair loads from its own folder in a fresh process (RUNPATH $ORIGIN), nothing else on the path
    probe = ("import cffi; f = cffi.FFI(); f.cdef('int aclnnNLLLossBackward(void*, unsigned long, void*, void*);'"
             "'const char *xlossEmuVersion(void);'); l = f.dlopen(%r); print(f.string(l.xlossEmuVersion()).decode())")
    res = subprocess.run([sys.executable, "-c", probe % str(out)], capture_output=True, text=True)
    assert res.returncode == 0 and "xloss aclnn host emulator" in res.stdout, res.stderr


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
    assert "second run of a single-use executor: 561000" in res.stdout  # ACLNN_ERR_INNER, as CANN
    assert "live emulator objects after the checks: 0" in res.stdout
    assert "all checks passed" in res.stdout and "FAIL" not in res.stdout


@pytest.mark.slow  # compiles and runs the C programs under ASan/UBSan: about 6 s
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
