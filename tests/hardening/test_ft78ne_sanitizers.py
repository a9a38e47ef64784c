"""The FT78NE/MT7004 backend's Python-level tests against an ASan+UBSan build of the emulator (issue 9).

scripts/ft78ne_sanitized.py builds the sanitized library and runs, each in a child process with
libasan preloaded (detect_leaks=0 for CPython) and the sanitized library standing in for the
emulator: the generic conformance tests in shared and in private memory, the ABI fuzzer and the
thread tests. Any sanitizer report fails the run. Here the run is bounded (of the conformance
tests mt7004's property tests, which reach every operator in fp16 and fp32, with few examples);
the script without --sample runs all of it (CI: ``python scripts/ft78ne_sanitized.py``).
The C-level sanitizer runs (the stress driver under ASan/UBSan and TSan) are in
tests/backends/ft78ne/test_c.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xloss.backends.ft78ne_shim import abi

pytestmark = pytest.mark.slow  # rebuilds the emulator instrumented and reruns suites under it: about 25 s

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ft78ne_sanitized.py"


@pytest.mark.skipif(bool(os.environ.get(abi.ENV_VAR)), reason=f"{abi.ENV_VAR} selects another library")
def test_conformance_fuzz_and_threads_under_asan_ubsan():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ft78ne_sanitized", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if mod.libasan(os.environ.get("CC", "gcc").split()[0]) is None:
        pytest.skip("the C compiler has no libasan")
    res = subprocess.run([sys.executable, str(SCRIPT), "--sample", "--examples", "2", "--fuzz-examples", "8",
                          "--timeout", "300"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-30000:] + res.stderr[-5000:]
    lines = res.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if ": ok (" in line] == ["shared", "private"], res.stdout
