"""Leak checks of the ascend backend (issue 9): thousands of create/run/destroy cycles, on the
success paths and on every error path, keep the emulator's live-object counter at its baseline
and the process's resident memory flat; and scripts/ascend_valgrind.sh (valgrind memcheck over
the C example and the C stress program) reports no leak and no memory error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ascend_support as support  # tests/backends/ascend, on pytest's pythonpath
import ml_dtypes
import numpy as np
import pytest

import xloss
from xloss.backends.ascend_aclnn import _cdef as C
from xloss.kernel_args import NLLArgs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ascend_valgrind.sh"
BCE, NLL, FLCE, FOCAL = ("aclnnBinaryCrossEntropyBackward", "aclnnNLLLossBackward",
                         "aclnnFusedLinearCrossEntropyLossGrad", "aclnnXlossSigmoidFocalLoss")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def emu():
    return support.emulator_backend()


#: the operators the raw cycles take in turn: the first four, then issue 30's (ascend_support.LOSS_OPS)
CYCLE_OPS = (BCE, NLL, FLCE, FOCAL, *support.LOSS_OPS)
#: operators with device targets phase two checks (an out-of-range one is a phase-two refusal)
TARGETED = (NLL, "aclnnNLLLoss", "aclnnNLLLoss2d", "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGrad",
            "aclnnNLLLoss2dBackward")


def _raw_cycle(abi, s, i: int) -> None:
    """One program run through the raw ABI, taking a different path each time: success
    (single-use and repeatable), a phase-one refusal, an abandoned executor, a phase-two
    refusal (small workspace, bad device data), memory freed between the phases."""
    op = CYCLE_OPS[i % len(CYCLE_OPS)]
    path = (i // len(CYCLE_OPS)) % 6
    new = op in support.LOSS_OPS
    d = support.loss_op_args(s, op, reduction=1) if new else support.op_args(s, op, reduction=1 if op == FOCAL
                                                                              else 0)
    if path == 1:  # refused in phase one (reduction 7 for the first three, a bad labelSmoothing for FLCE,
        if new:  # a NULL required operand for the new ones)
            d[support.LOSS_REQUIRED[op][0]] = abi.NULL
        elif op == FLCE:
            d["labelSmoothing"] = 0.5
        else:
            d["reduction"] = 7
        got, _, ex = abi.phase_one(op, *d.values())
        assert got == (C.ACLNN_ERR_PARAM_NULLPTR if new else C.ACLNN_ERR_PARAM_INVALID) and ex == abi.NULL
        return
    if path == 4 and op in TARGETED:  # out of range: refused in phase two
        shape = (2, 2, 2) if op in ("aclnnNLLLoss2d", "aclnnNLLLoss2dBackward") else (4,)
        d["target"] = s.put(np.resize(np.array([0, 9, 1, 1], np.int64), shape))[0]
    got, need, ex = abi.phase_one(op, *d.values())
    assert got == 0, abi.message()
    if path == 2:  # abandoned between the phases
        assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
        return
    ws = s.malloc(need).ptr if need else abi.NULL
    if path == 3:  # repeatable, run three times
        assert abi.lib.aclSetAclOpExecutorRepeatable(ex) == 0
        for _ in range(3):
            assert abi.phase_two(op, ws, need, ex, s.stream) == 0
        assert abi.lib.aclDestroyAclOpExecutor(ex) == 0
    elif path == 4:  # a failing run (too small a workspace, or bad device data) spends the executor
        want = C.ACLNN_ERR_RUNTIME_ERROR if op in TARGETED and not need else C.ACLNN_ERR_PARAM_INVALID if need else 0
        assert abi.phase_two(op, ws, max(need - 1, 0), ex, s.stream) == want
    elif path == 5:  # the output's memory freed between the phases
        out = s._buffers[-1 if not need else -2]
        assert abi.lib.aclrtFree(out.base) == 0
        s._buffers.remove(out)
        assert abi.phase_two(op, ws, need, ex, s.stream) == C.ACLNN_ERR_RUNTIME_ERROR
    else:
        assert abi.phase_two(op, ws, need, ex, s.stream) == 0


def test_raw_abi_cycles_keep_the_counter_at_zero_and_memory_flat(emu):
    abi = support.Abi(emu)
    base = abi.live()

    def run(n, start):
        for i in range(start, start + n):
            with emu.session() as s:
                _raw_cycle(abi, s, i)
            assert abi.live() == base, f"cycle {i} leaked"

    run(600, 0)  # warm up: allocator pools settle, the emulator's quarantines fill
    rss0 = rss_bytes()
    run(8000, 600)
    grown = rss_bytes() - rss0
    assert abi.live(C.LIVE_DEVICE_MEMORY) == abi.live(C.LIVE_TENSORS) == 0
    # measured: 0-8 KiB; a leak of 64 bytes a cycle would show as 500 KiB
    assert grown < 512 << 10, f"resident memory grew by {grown / 2**10:.0f} KiB over 8000 cycles"


def test_api_cycles_keep_the_counter_at_zero_and_memory_flat(emu):
    """The adapter's sessions (both layouts), on success and on errors raised mid-session."""
    abi = support.Abi(emu)
    strided = support.emulator_backend(layout="strided")
    rng = np.random.default_rng(9)
    x = rng.uniform(-3, 3, (7, 5)).astype(np.float16)
    y = (rng.random((7, 5)) > 0.5).astype(np.float16)
    s_ = -rng.random((6, 4)).astype(ml_dtypes.bfloat16)
    t = np.array([0, 1, 2, 3, -100, 1])
    xi, w = rng.uniform(-1, 1, (6, 3)).astype(np.float16), rng.uniform(-1, 1, (5, 3)).astype(np.float16)
    base = abi.live()

    def cycle(i):
        b = strided if i % 2 else emu
        red = ("none", "mean", "sum")[i % 3]
        xloss.focal_loss_with_grad(x, y, reduction=red, backend=b)
        xloss.bce_grad(np.abs(np.tanh(x)), y, reduction=red, backend=b)
        xloss.nll_loss_grad(0.5, s_, t, reduction=red, backend=b)
        xloss.fused_linear_cross_entropy_grad(np.ones(6, np.float32), xi, w, np.zeros(6, bool), np.arange(6) % 5,
                                              logits_max=np.zeros(6, np.float32),
                                              sum_exp_logits=np.full(6, 5.0, np.float32), backend=b)
        with pytest.raises(xloss.KernelError):  # the device refuses a target: raised mid-session
            b.nll_loss_grad(NLLArgs(-np.ones((3, 4), np.float32), np.array([0, 9, 1]), None, 1.0, "sum", -100, 3.0,
                                    np.zeros((3, 4), np.float32)))
        assert abi.live() == base, f"cycle {i} leaked"

    for i in range(150):
        cycle(i)
    rss0 = rss_bytes()
    for i in range(150, 750):
        cycle(i)
    grown = rss_bytes() - rss0
    # measured: 0 KiB (each cycle runs 6 sessions and ~30 tensors)
    assert grown < 512 << 10, f"resident memory grew by {grown / 2**10:.0f} KiB over 600 cycles"


@pytest.mark.slow  # programs under valgrind
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_valgrind_script_reports_no_leaks(tmp_path):
    # the script builds with the interpreter that has xloss installed (this one), not whatever python3 is
    res = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "300"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "PYTHON": sys.executable})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert res.stdout.count("valgrind: clean") == 2, res.stdout
