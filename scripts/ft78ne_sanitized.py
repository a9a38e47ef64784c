#!/usr/bin/env python3
"""Run the FT78NE/MT7004 backend's Python-level tests against an AddressSanitizer +
UndefinedBehaviorSanitizer build of the emulator; fail on any sanitizer report.

    python scripts/ft78ne_sanitized.py                  # build, then every suite below
    python scripts/ft78ne_sanitized.py --examples 3 --fuzz-examples 10 --suites conformance fuzz
    python scripts/ft78ne_sanitized.py --lib /tmp/libsan.so   # an existing sanitized build

Two pytest runs, each in a child process with libasan preloaded, the sanitized library in place
of the in-tree emulator (driven exactly as it: direct writes into the caller's arrays), and
``detect_leaks=0`` (CPython itself does not free everything):

* ``shared``: ``tests/conformance/test_backends.py -k "ft78ne or mt7004"`` (default memory: shared),
  ``tests/hardening/test_ft78ne_abi_fuzz.py`` (hostile arguments on the raw ABI) and
  ``tests/hardening/test_ft78ne_threads.py``;
* ``private``: the conformance tests again with ``XLOSS_FT78NE_MEMORY=private`` (the adapter's
  staging through the arenas, ``_p`` calls).

Hypothesis examples are bounded (``--examples``, ``--fuzz-examples``); ``--sample`` keeps, of the
conformance tests, mt7004's property tests (every operator, fp16 and fp32), leaving out the fixed
edge cases (multi-megabyte inputs, slow under ASan). Exit status 0 when every run passed without a
sanitizer report; the report (or the pytest failure) is printed otherwise. Needs gcc with
libasan/libubsan (Linux).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "backends" / "ft78ne_shim"
CONFORMANCE = "tests/conformance/test_backends.py"
HARDENING = ["tests/hardening/test_ft78ne_abi_fuzz.py", "tests/hardening/test_ft78ne_threads.py"]
# suite -> (paths, -k expression, sampled -k expression, environment)
SUITES = {
    "shared": ([CONFORMANCE, *HARDENING], "ft78ne or mt7004",
               "(mt7004 and matches_oracle) or test_ft78ne_abi_fuzz or test_ft78ne_threads", {}),
    "private": ([CONFORMANCE], "ft78ne or mt7004", "mt7004 and matches_oracle", {"XLOSS_FT78NE_MEMORY": "private"}),
}
# what a sanitizer prints when it finds something (UBSan goes on after "runtime error:")
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|SUMMARY: UndefinedBehaviorSanitizer")


def libasan(cc: str = "gcc") -> str | None:
    """The compiler's libasan.so (LD_PRELOADed: it must come before every other library)."""
    try:
        out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = out.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def build_sanitized(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("ft78ne_build_sanitized", SHIM / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(out, sanitize=True, quiet=True)


def child(lib: str, pytest_args: list[str]) -> int:
    """In the preloaded child: make the sanitized library the emulator, then run pytest."""
    from xloss.backends.ft78ne_shim import abi

    abi.EMULATOR = Path(lib).resolve()  # the adapter then drives it as the in-tree emulator (direct writes)
    import pytest

    return pytest.main(pytest_args)


def run_suite(name: str, lib: str, asan: str, examples: int, fuzz_examples: int, timeout: int,
              sample: bool = False) -> tuple[bool, str]:
    paths, keyword, sampled, extra_env = SUITES[name]
    args = [*paths, "-k", sampled if sample else keyword]
    logs = Path(tempfile.mkdtemp(prefix=f"xloss-ft78ne-san-{name}-"))
    env = dict(os.environ)
    env.pop("XLOSS_FT78NE_LIB", None)  # the sanitized emulator, not a port
    env.update(extra_env)
    env.update({
        "LD_PRELOAD": asan,
        # CPython leaks by design; huge host allocations must fail with NULL (the NO_MEMORY paths), not abort
        # reports go to files: pytest captures fd 2 and would drop a report of a passing test (or of a
        # process the sanitizer ends)
        "ASAN_OPTIONS": f"detect_leaks=0:allocator_may_return_null=1:abort_on_error=0:log_path={logs}/asan",
        "UBSAN_OPTIONS": f"print_stacktrace=1:log_path={logs}/ubsan",
        "XLOSS_MAX_EXAMPLES": str(examples),
        "XLOSS_FT78NE_FUZZ_EXAMPLES": str(fuzz_examples),
        "PYTHONFAULTHANDLER": "1",
    })
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", lib, "--", *args, "-q", "-p", "no:cacheprovider",
           "-x", "--no-header", "-m", "", "-n", "0"]  # every test named, slow ones too; in this process,
    # whose emulator is the sanitized library (xdist workers would load the in-tree one)
    try:
        res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return False, f"{name}: timed out after {timeout}s\n{exc.stdout or ''}{exc.stderr or ''}"
    output = res.stdout + res.stderr
    logged = "".join(f.read_text(errors="replace") for f in sorted(logs.iterdir()))
    for f in logs.iterdir():
        f.unlink()
    logs.rmdir()
    reports = [line for line in (logged + output).splitlines() if REPORT.search(line)]
    ok = res.returncode == 0 and not reports
    summary = next((line for line in reversed(res.stdout.splitlines()) if " passed" in line or " failed" in line), "")
    detail = f"sanitizer report:\n{logged}" if logged else ""
    if not ok:
        detail += "\n" + output[-20000:]
    return ok, f"{name}: {'ok' if ok else 'FAILED'} ({summary.strip('= ') or f'exit status {res.returncode}'})" + (
        "" if ok else "\n" + detail)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="an existing ASan+UBSan build of the emulator (default: build one)")
    ap.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=list(SUITES))
    ap.add_argument("--examples", type=int, default=5, help="hypothesis examples per conformance target (default 5)")
    ap.add_argument("--fuzz-examples", type=int, default=25, help="hypothesis examples per fuzz category (default 25)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per suite (default 600)")
    ap.add_argument("--sample", action="store_true",
                    help="of the conformance tests, only mt7004's property tests (every operator in fp16 and fp32): "
                         "the bounded run of the test suite")
    args = ap.parse_args(argv)
    asan = libasan(os.environ.get("CC", "gcc").split()[0])
    if asan is None:
        print("no libasan.so from the C compiler: cannot run the sanitized suites", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="xloss-ft78ne-san-") as tmp:
        lib = args.lib or str(build_sanitized(Path(tmp) / "libxloss_ft78ne_asan.so"))
        failed = 0
        for name in args.suites:
            t0 = time.perf_counter()
            ok, text = run_suite(name, lib, asan, args.examples, args.fuzz_examples, args.timeout, args.sample)
            print(f"{text}  [{time.perf_counter() - t0:.1f}s]", flush=True)
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
