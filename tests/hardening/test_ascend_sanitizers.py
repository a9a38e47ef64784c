"""The ascend emulator under sanitizers (issue 9).

* AddressSanitizer + UndefinedBehaviorSanitizer: the emulator is rebuilt with
  ``build.py --sanitize`` (both libraries) and this backend's conformance tests
  (``tests/conformance/test_backends.py -k ascend``, bounded examples), the ABI fuzz tests (the first
  operators' and issue 30's), the thread tests and the ABI/strided-view tests run against it in a child
  pytest with libasan and libubsan preloaded. ASan aborts on the first invalid access and UBSan on the
  first undefined operation (``-fno-sanitize-recover``); any sanitizer report fails the test.
* ThreadSanitizer: the C stress program (tests/backends/ascend/c/abi_stress.c: threads running
  repeatable executors while others allocate, free and destroy) compiled with the emulator's
  sources and ``-fsanitize=thread``; any data race report fails the test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import xloss
from xloss.conformance import targets

pytestmark = pytest.mark.slow  # rebuilds the emulator instrumented and reruns suites under it: about 25 s

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "backends" / "ascend_aclnn"
STRESS = ROOT / "tests" / "backends" / "ascend" / "c" / "abi_stress.c"
# the child run's budgets: a sample, not the full suites
CONFORMANCE_EXAMPLES = "5"
FUZZ_SCALE = "0.25"
SANITIZER_WORDS = ("Sanitizer", "runtime error:", "LeakSanitizer")


def _build_module():
    spec = importlib.util.spec_from_file_location("ascend_build_for_sanitizers", PKG / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runtime(name: str) -> str:
    return subprocess.run([os.environ.get("CC", "gcc"), f"-print-file-name={name}"], capture_output=True,
                          text=True).stdout.strip()


def test_conformance_fuzz_and_abi_suites_under_asan_and_ubsan(tmp_path):
    asan, ubsan = _runtime("libasan.so"), _runtime("libubsan.so")
    if not os.path.isabs(asan) or not os.path.isabs(ubsan):
        pytest.skip("the compiler has no ASan/UBSan runtimes")
    lib = _build_module().build(sanitize=True, out=tmp_path / "libxloss_aclnn.so")
    counts, loss_counts = tmp_path / "fuzz_counts.json", tmp_path / "loss_fuzz_counts.json"
    env = dict(os.environ, LD_PRELOAD=f"{asan}:{ubsan}",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1",  # Python itself leaks
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               XLOSS_ASCEND_TEST_EMULATOR=str(lib), XLOSS_ASCEND_LIB=str(lib),
               XLOSS_MAX_EXAMPLES=CONFORMANCE_EXAMPLES, XLOSS_ASCEND_FUZZ_SCALE=FUZZ_SCALE,
               XLOSS_ASCEND_FUZZ_COUNTS=str(counts), XLOSS_ASCEND_LOSS_FUZZ_COUNTS=str(loss_counts))
    # the large ladder is left out: checked mode already guards every buffer at those sizes, and under
    # ASan its FLCE case alone costs half a minute
    tests = ["tests/conformance/test_backends.py", "tests/hardening/test_ascend_fuzz.py",
             "tests/hardening/test_ascend_loss_fuzz.py",
             "tests/hardening/test_ascend_threads.py", "tests/backends/ascend/test_abi.py",
             "tests/backends/ascend/test_strided.py", "tests/backends/ascend/test_nll2d_backward_abi.py"]
    # from a scratch folder, with absolute paths: `python -m` puts the working directory on sys.path,
    # and the repository root would shadow the installed package with the source tree
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-k", "ascend",
                          *(str(ROOT / t) for t in tests)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert not any(w in out for w in SANITIZER_WORDS), out[-6000:]
    summary = res.stdout.strip().splitlines()[-1]
    ran = int(re.search(r"(\d+) passed", summary).group(1))
    assert not re.search(r"\d+ (skipped|xfailed|xpassed|errors?)\b", summary), res.stdout[-2000:]
    # every conformance target the backend declares ran, and the fuzz, thread and ABI tests beside them
    assert ran > len(targets(xloss.backend("ascend"))), res.stdout[-2000:]
    fuzz = json.loads(counts.read_text())
    assert len(fuzz) >= 13 and min(fuzz.values()) > 0, fuzz  # every fuzz category ran under the sanitizers
    loss_fuzz = json.loads(loss_counts.read_text())
    assert len(loss_fuzz) >= 11 and min(loss_fuzz.values()) > 0, loss_fuzz
    print(f"under ASan+UBSan: {ran} tests; fuzz cases per category: {fuzz}; issue 30's operators: {loss_fuzz}")


def test_stress_program_under_thread_sanitizer(tmp_path):
    tsan = _runtime("libtsan.so")
    if not os.path.isabs(tsan):
        pytest.skip("the compiler has no ThreadSanitizer runtime")
    build = _build_module()
    exe = tmp_path / "abi_stress_tsan"
    cmd = [os.environ.get("CC", "gcc"), "-std=c11", "-O1", "-g", "-fsanitize=thread", "-D_POSIX_C_SOURCE=200809L",
           f"-I{PKG / 'include'}", f"-I{PKG / 'csrc'}", str(STRESS), *map(str, build.sources()), "-o", str(exe),
           "-lm", "-pthread"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([str(exe), "2000"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66"))
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "ThreadSanitizer" not in out, out[-6000:]
    assert "stress passed" in res.stdout
