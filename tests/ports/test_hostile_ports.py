"""`xloss check` against hostile ports: libraries that break the process or the two-phase contract
rather than the numbers (tests/ports/ascend/build.py ``HOSTILE``, each switch in ``port_bce.c`` or
``port_common.c``, marked ``HOSTILE:``).

The checker must give a verdict on each and survive it: a library whose constructor aborts is a
CRASH and never loaded by the parent; a call that never returns is a HANG within the deadline; a
thread that segfaults after the call is a CRASH with a case; a port that forks is a FAIL; a helper
process does not keep the check waiting; Ctrl-C ends the check even while the port ignores SIGTERM
and SIGINT. A CRASH or HANG shows the ABI call the library received; ``--replay`` runs in the same
children and gives the same verdicts. In the child, a call that leaves the rounding mode, FTZ/DAZ, a signal handler or a
thread behind fails naming it; a leak is a warning with its bytes per call; a phase one that writes
an output, and a repeatable executor that gives other results the second time, fail naming the buffer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xloss.backends.ascend_aclnn import make_backend
from xloss.conformance import process_state, report, runner
from xloss.conformance.casefile import case_from_json
from xloss.conformance.isolated import deadline_for

HERE = Path(__file__).resolve().parent
BCE = ("bce_grad", "float32", "clamp")
DEADLINE = 2.0  # seconds per case: short, so the hang test is quick
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc, glibc")


@pytest.fixture(scope="module")
def hostile(port_harness):
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    return port_harness.build(build.build, [*build.HOSTILE, "correct"])


def _check(lib, tmp_path, *extra, timeout=240):
    """``xloss check --backend ascend --lib LIB --kernels bce`` (quick), its JSON report, seconds taken."""
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "xloss.cli", "check", "--backend", "ascend", "--lib", str(lib),
                          "--kernels", "bce", "--no-large", "--max-examples", "5", "--json", str(tmp_path / "r.json"),
                          "--failures-dir", str(tmp_path / "f"), *map(str, extra)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=timeout, check=False)
    took = time.monotonic() - start
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    rep = json.loads((tmp_path / "r.json").read_text()) if (tmp_path / "r.json").exists() else None
    return out, rep, took


def _by_target(rep) -> dict:
    return {(r["kernel"], r["dtype"], r["mode"]): r for r in rep["results"]}


# ---- a child that cannot take the parent down --------------------------------------------------------

def test_a_library_whose_constructor_aborts_is_a_crash_the_checker_reports(hostile, tmp_path):
    out, rep, _ = _check(hostile["ctor_abort"], tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert not rep["passed"] and len(rep["results"]) == 1
    assert rep["results"][0]["status"] == "crash" and "SIGABRT" in rep["results"][0]["message"]
    assert "CRASH" in out.stdout and "FAILED: 1 crash" in out.stdout


def test_list_backends_survives_a_library_that_aborts_in_xloss_ascend_lib(hostile, tmp_path):
    code = ("import xloss\n"
            "b = {i.name: i for i in xloss.list_backends()}['ascend']\n"
            "print('AVAILABLE' if b.available else 'UNAVAILABLE', b.reason)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "XLOSS_ASCEND_LIB": str(hostile["ctor_abort"])}, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("UNAVAILABLE") and "SIGABRT" in out.stdout, out.stdout


def test_a_call_that_never_returns_is_a_hang_within_the_deadline(hostile, tmp_path):
    out, rep, took = _check(hostile["hang"], tmp_path, "--case-deadline", DEADLINE)
    assert out.returncode == 1, out.stdout + out.stderr
    by = _by_target(rep)
    hung = [k for k, r in by.items() if r["status"] == "hang"]
    assert hung and all(k[1] == "float32" for k in hung), by  # the port hangs on float32 only
    assert by[BCE]["status"] == "hang" and f"deadline of {DEADLINE:.1f} s" in by[BCE]["message"]
    assert case_from_json(by[BCE]["case"]).dtype == "float32"
    assert by[("bce_grad", "float16", "clamp")]["status"] == "pass"
    assert "HANG: bce_grad float32" in out.stdout and "input that hung" in out.stdout
    # the call the library received reached the parent before it hung
    assert by[BCE]["abi_calls"][0].startswith("aclnnBinaryCrossEntropyBackwardGetWorkspaceSize("), by[BCE]
    assert "as the library received it" in out.stdout.split("HANG: bce_grad float32", 1)[1], out.stdout
    assert took < 180 + len(hung) * deadline_for(DEADLINE, 0), took  # (child starts are slow on a loaded machine)


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out.update(map(int, kids))
        todo.extend(map(int, kids))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_ends_the_check_while_the_port_ignores_sigterm_and_sigint(hostile, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "xloss.cli", "check", "--backend", "ascend", "--lib",
                             str(hostile["hang"]), "--kernels", "bce", "--no-large", "--max-examples", "3",
                             "--failures-dir", str(tmp_path / "f")], cwd=tmp_path, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # the float32 targets come after the 16-bit ones: then the port hangs
            if "bfloat16" in line and "add" in line:
                break
        time.sleep(1.0)
        children = _descendants(proc.pid)
        assert children, "the check has no child process"
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130
    time.sleep(0.2)
    assert not [p for p in children if _alive(p)], "a process of the check outlived it"


def test_a_thread_that_segfaults_after_the_call_is_a_crash_with_its_case(hostile, tmp_path):
    out, rep, _ = _check(hostile["async_crash"], tmp_path)
    assert out.returncode == 1
    declared = [r for r in rep["results"] if r["declared"]]
    assert declared and all(r["status"] == "crash" and "SIGSEGV" in r["message"] for r in declared)
    assert all(case_from_json(r["case"]).kernel == "bce_grad" for r in declared)
    assert all(r["abi_calls"] and "GetWorkspaceSize(" in r["abi_calls"][0] for r in declared), declared
    assert "as the library received it" in out.stdout.split("CRASH: bce_grad", 1)[1], out.stdout


def test_a_port_that_forks_is_a_fail_not_a_traceback(hostile, tmp_path):
    out, rep, _ = _check(hostile["fork"], tmp_path)
    assert out.returncode == 1
    declared = [r for r in rep["results"] if r["declared"]]
    assert declared and all(r["status"] == "fail" and "forked" in r["message"] for r in declared)


def _helpers() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == "xloss-helper" and _alive(int(d.name)):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def test_a_long_lived_helper_process_does_not_keep_the_check_waiting(hostile, tmp_path):
    before = set(_helpers())
    out, rep, took = _check(hostile["helper"], tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert rep["passed"]
    assert not set(_helpers()) - before, "the helper outlived the check"


def test_the_deadline_grows_with_the_case():
    assert deadline_for(10.0, 0) == 10.0
    assert deadline_for(10.0, 1 << 24) == 170.0


# ---- process-wide state and memory ----------------------------------------------------------------

@pytest.mark.parametrize("variant, says", [
    ("round_upward", "the rounding mode (fegetround): to nearest before the call, upward after it"),
    ("ftz_daz", "flush-to-zero (FTZ) switched on"),
    ("signal_handler", "the disposition of SIGUSR2: default before the call, a handler"),
    ("thread_left", "thread(s) running"),  # (one per kernel run: a checked call runs a repeatable executor twice)
])
def test_a_call_that_leaves_process_state_changed_fails_naming_it(variant, says, hostile):
    if variant == "ftz_daz" and not process_state._X86:
        pytest.skip("MXCSR is x86")
    before = process_state.snapshot()
    r = runner.run_target(make_backend(lib=str(hostile[variant])), *BCE, max_examples=3)
    assert r.status == "fail" and says in r.message, r.message
    assert "process-wide state" in r.message and r.case is not None
    after = process_state.snapshot()  # put back for the rest of the run
    assert (after.rounding, after.fenv) == (before.rounding, before.fenv)
    assert process_state.dispositions(after) == process_state.dispositions(before)


def test_the_correct_port_changes_no_process_state_and_leaks_nothing(hostile):
    r = runner.run_target(make_backend(lib=str(hostile["correct"])), *BCE, max_examples=10)
    assert r.status == "pass" and not r.warnings, (r.message, r.warnings)


def test_a_port_that_leaks_is_warned_with_its_bytes_per_call(hostile):
    r = runner.run_target(make_backend(lib=str(hostile["leak"])), *BCE, max_examples=0)
    assert r.status == "pass"  # the numbers are right
    assert len(r.warnings) == 1 and "memory leak" in r.warnings[0], r.warnings
    # 4 MiB per kernel run; a checked call runs the kernel twice (its executor is repeatable)
    per_call = int(re.search(r"\((\d+) bytes\) more after every call", r.warnings[0]).group(1))
    assert 4 << 20 <= per_call <= 2 * (4 << 20) + (1 << 20), r.warnings
    assert "WARN: bce_grad float32 mode=clamp: memory leak" in report.warnings_text([r])
    assert report.summary([r]).startswith("PASSED") and "1 warning(s)" in report.summary([r])


# ---- the two phases --------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_a_phase_one_that_writes_an_output_fails_naming_it(layout, hostile):
    r = runner.run_target(make_backend(lib=str(hostile["phase_one_write"]), layout=layout), *BCE, max_examples=3)
    assert r.status == "fail", r.message
    assert "write during phase one in `out`" in r.message
    assert "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize wrote into output `out`" in r.message


def test_a_repeatable_executor_that_differs_on_its_second_run_fails(hostile):
    r = runner.run_target(make_backend(lib=str(hostile["plan_consumed"])), *BCE, max_examples=3)
    assert r.status == "fail", r.message
    assert "aclSetAclOpExecutorRepeatable" in r.message and "`out` different after its second run" in r.message
    assert case_from_json(r.case).kwargs["reduction"] == "mean"


# ---- xloss check --replay runs in the same children ---------------------------------------------------

def _replay_file(tmp_path, dtypes=("float32",)):
    """A case file of one BCE-gradient case per dtype (labelled with it)."""
    import numpy as np

    from xloss.conformance.casefile import save_cases
    from xloss.conformance.descriptor import Case

    cases = [Case("bce_grad", "clamp", dt, {"x": np.array([0.25, 0.5, 0.75], dt), "y": np.array([0.0, 1.0, 0.0], dt),
                                        "grad": 2.0, "reduction": "sum", "eps": 1e-12, "eps_mode": "clamp"},
                  f"replayed {dt}") for dt in dtypes]
    return save_cases(tmp_path / "case.json", cases, backend="ascend")


def _replay(lib, path, tmp_path, *extra, timeout=120):
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "xloss.cli", "check", "--replay", str(path), "--backend", "ascend",
                          "--lib", str(lib), *map(str, extra)], capture_output=True, text=True, cwd=tmp_path,
                         timeout=timeout, check=False)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out, time.monotonic() - start


def test_a_replayed_case_that_never_returns_is_a_hang_naming_it_and_the_next_case_runs(hostile, tmp_path):
    path = _replay_file(tmp_path, ("float32", "float16"))  # the port hangs on float32 only
    out, took = _replay(hostile["hang"], path, tmp_path, "--case-deadline", DEADLINE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(rf"  HANG no result within the deadline of {DEADLINE:.1f} s .*\[case: replayed float32\]",
                     out.stdout), out.stdout
    assert "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(" in out.stdout.split("HANG", 1)[1], out.stdout
    assert "  dx: ok" in out.stdout.split("(replayed float16)", 1)[-1], out.stdout  # run by a fresh child
    assert out.stdout.count("replaying 2 case(s)") == 1
    assert took < 90, took


@pytest.mark.parametrize("variant, says", [("async_crash", "SIGSEGV"), ("ctor_abort", "SIGABRT")])
def test_a_replayed_case_that_crashes_is_a_crash_the_checker_survives(variant, says, hostile, tmp_path):
    out, _ = _replay(hostile[variant], _replay_file(tmp_path), tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "CRASH" in out.stdout and says in out.stdout, out.stdout
    if variant == "async_crash":  # the case in flight is named, with the call the library received
        assert "[case: replayed float32]" in out.stdout and "GetWorkspaceSize(" in out.stdout, out.stdout


def test_a_replay_takes_the_case_deadline_and_passes_the_correct_port_in_a_child_and_in_process(hostile, tmp_path):
    path = _replay_file(tmp_path, ("float32", "float16"))
    out, _ = _replay(hostile["correct"], path, tmp_path, "--case-deadline", "-1")
    assert out.returncode == 2 and "--case-deadline must be a positive number" in out.stderr, out.stdout + out.stderr
    for extra in ((), ("--in-process",)):
        out, _ = _replay(hostile["correct"], path, tmp_path, *extra)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.count(": ok ") == 2 and "replaying 2 case(s)" in out.stdout, out.stdout


def test_ctrl_c_ends_a_replay_whose_case_never_returns_and_kills_its_child(hostile, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "xloss.cli", "check", "--replay", str(_replay_file(tmp_path)),
                             "--backend", "ascend", "--lib", str(hostile["hang"])], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not _descendants(proc.pid) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(3.0)  # the child starts, loads the port and hangs in its call (it ignores SIGINT/SIGTERM)
        children = _descendants(proc.pid)
        assert children, "the replay has no child process"
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130, proc.stderr.read()
    time.sleep(0.2)
    assert not [p for p in children if _alive(p)], "a process of the replay outlived it"
