"""The Ascend emulator's runtime under fork and after aclFinalize (issue 26).

* ``fork()`` while other threads are inside the runtime: its global mutex is held across the fork
  (``pthread_atfork``, as the FT78NE arena's), so no child waits forever for a lock whose owner did
  not come along (:mod:`ascend_fork_child`; 2-3 of 100 children hung before).
* aclFinalize releases aclnn's resources (CANN's aclnnFinalize page: aclFinalize releases those
  of aclnn too), executors included: phase two with an executor made before it finds no live
  executor, the status CANN's phase two gives an executor it does not know (561000,
  ACLNN_ERR_INNER), even after aclInit and aclrtSetDevice again.

Each runs in a child process: aclFinalize ends the process's runtime.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).parent
ASCEND_TESTS = HERE.parent / "backends" / "ascend"


def _fork_run(forks: int) -> str:
    p = subprocess.run([sys.executable, str(HERE / "ascend_fork_child.py"), str(forks)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return p.stdout


def test_fork_while_other_threads_hold_the_runtime_lock():
    assert "hung 0 of 150" in _fork_run(150)


@pytest.mark.slow
def test_fork_while_other_threads_hold_the_runtime_lock_many_times():
    assert "hung 0 of 1000" in _fork_run(1000)


def test_an_executor_made_before_acl_finalize_is_refused_after_it():
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ASCEND_TESTS)!r})
        import ascend_support as support

        emu = support.emulator_backend()
        abi = support.Abi(emu)
        op = "aclnnNLLLossBackward"
        with emu.session() as s:
            st, ws, ex = abi.phase_one(op, *support.op_args(s, op).values())
            assert st == 0 and abi.lib.aclSetAclOpExecutorRepeatable(ex) == 0
            assert abi.phase_two(op, abi.NULL, 0, ex, abi.NULL) == 0
            live = abi.live(support.C.LIVE_EXECUTORS)
            assert abi.lib.aclFinalize() == 0
            print("executors left:", abi.live(support.C.LIVE_EXECUTORS) - live + 1, flush=True)
            assert abi.lib.aclInit(abi.NULL) == 0 and abi.lib.aclrtSetDevice(0) == 0
            print("phase two after aclFinalize:", abi.phase_two(op, abi.NULL, 0, ex, abi.NULL), abi.message(),
                  flush=True)
            os._exit(0)  # the session's objects went with the runtime
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "executors left: 0" in p.stdout, p.stdout
    assert "phase two after aclFinalize: 561000" in p.stdout and "not a live executor" in p.stdout, p.stdout
