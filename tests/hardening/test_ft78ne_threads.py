"""Thread safety of the FT78NE/MT7004 backends and emulator (issue 9; contract in the backend README,
"Thread safety").

* The same kernels from 8 Python threads at once give results bit-identical to serial calls:
  every operator, fp32 and fp16, shared memory on several core masks, private memory on several
  masks with staging budgets that force tiles (cores shared between concurrent calls).
* The raw emulator from 8 threads: each thread's chip, core and last error are its own; the arena
  allocator (one lock) never hands out overlapping blocks; concurrent _p calls on one core's arena
  only touch their own buffers.
* A capacity change racing a running _p call is refused (the call pins its arena) instead of
  freeing the memory under it.
The sanitized run (test_ft78ne_sanitizers.py) runs this module under ASan/UBSan.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.conformance.flce import shard_case

if os.environ.get(abi.ENV_VAR):
    pytest.skip(f"tests the in-tree emulator, but {abi.ENV_VAR} selects another library", allow_module_level=True)

THREADS = 8


def _run_threads(target, n=THREADS):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _jobs():
    """(label, function of a backend) for every operator; fp16 ones only on mt7004."""
    rng = np.random.default_rng(9)
    n = 4099
    x = rng.uniform(0.02, 0.98, n).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.float32)
    logits = rng.uniform(-5, 5, n).astype(np.float32)
    s = np.log(rng.dirichlet(np.ones(37), 211)).astype(np.float32)
    t = rng.integers(0, 37, 211)
    t[::7] = -100
    fl = shard_case("float32", "recompute", x=rng.uniform(-1, 1, (19, 12)), w_global=rng.uniform(-1, 1, (40, 12)),
                    target=rng.integers(0, 40, 19), start=8, v=23, grad=rng.uniform(-1, 1, 19)).kwargs
    jobs = []
    for dt in (np.float32, np.float16):
        sfx = "" if dt == np.float32 else "-f16"
        xd, yd, ld, sd = x.astype(dt), y.astype(dt), logits.astype(dt), s.astype(dt)
        jobs += [
            ("bce" + sfx, dt, lambda b, xd=xd, yd=yd: xloss.bce_grad(xd, yd, 0.7, reduction="mean", eps_mode="add",
                                                                    backend=b)),
            ("focal-mean" + sfx, dt, lambda b, ld=ld, yd=yd: xloss.focal_loss_with_grad(ld, yd, 1.0, reduction="mean",
                                                                                        backend=b)),
            ("focal-none" + sfx, dt, lambda b, ld=ld, yd=yd: xloss.focal_loss(ld, yd, backend=b)),
            ("nll" + sfx, dt, lambda b, sd=sd: xloss.nll_loss_grad(np.float32(0.5), sd, t, reduction="mean",
                                                                   backend=b)),
        ]
    jobs.append(("flce", np.float32, lambda b: xloss.fused_linear_cross_entropy_grad(**fl, backend=b)))
    return jobs


def _backends():
    out = []
    for chip in ("ft78ne", "mt7004"):
        for mask in (0x01, 0x5A, 0xFF):
            out.append(xloss.backend(chip, core_mask=mask))
        for mask, budget in ((0x01, 6000), (0x0F, 5000), (0xFF, 9000), (0x06, None)):
            out.append(xloss.backend(chip, memory="private", core_mask=mask, private_bytes=budget))
    return out


def _flat(result):
    parts = result if isinstance(result, tuple) else (result,)
    return np.concatenate([np.asarray(p).reshape(-1).view(np.uint8) for p in parts])


def test_eight_threads_match_serial_calls():
    jobs = [(name, dt, f) for name, dt, f in _jobs()]
    pairs = [(b, j) for b in _backends() for j in jobs if b.name == "mt7004" or j[1] == np.float32]
    serial = [_flat(f(b)) for b, (_, _, f) in pairs]

    def worker(i):
        for rep in range(2):
            for k in range(i + rep, len(pairs) + i + rep, 3):  # each thread a different, interleaved slice
                b, (name, _, f) = pairs[k % len(pairs)]
                got = _flat(f(b))
                assert np.array_equal(got, serial[k % len(pairs)]), f"{name} on {b!r} differs from the serial call"

    _run_threads(worker)
    lib = abi.load([str(abi.EMULATOR)])
    assert all(int(lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8))


def test_raw_emulator_state_is_per_thread_and_the_arena_lock_holds():
    """8 threads on 2 shared cores: own chip/core/last error; blocks never overlap (each thread's
    pattern survives the others); _p calls on one arena only write their own outputs."""
    lib = abi.load([str(abi.EMULATOR)])
    ffi = lib.ffi

    def worker(i):
        rng = np.random.default_rng(i)
        core, chip = i % 2 + 6, i % 2  # cores 6 and 7, four threads each
        lib.ft78ne_emu_set_chip(chip)
        lib.ft78ne_emu_set_core(core)
        for rep in range(60):
            n = int(rng.integers(1, 700))
            blocks = []
            try:
                for _ in range(3):
                    p = lib.ft78ne_emu_private_alloc(core, n * 4)
                    assert p != ffi.NULL, ffi.string(lib.ft78ne_emu_last_error_message()).decode()
                    blocks.append((p, np.frombuffer(ffi.buffer(p, n * 4), np.float32)))
                (px, x), (py, y), (pl, loss) = blocks
                x[:] = rng.uniform(-4, 4, n)
                y[:] = i / 8
                loss[:] = np.float32(i + 1000)
                keep = x.copy()
                if rep % 3 == 0:  # a refused call: this thread's error, nothing written
                    lib.fp_sigmoidfocalloss_p(n, 7, 0.25, 2.0, ffi.cast("float *", px), ffi.cast("float *", py),
                                              ffi.cast("float *", pl))
                    assert int(lib.ft78ne_emu_last_error()) == 2
                    assert "reduction must be" in ffi.string(lib.ft78ne_emu_last_error_message()).decode()
                    assert (loss == np.float32(i + 1000)).all()
                else:
                    lib.fp_sigmoidfocalloss_p(n, 0, 0.25, 2.0, ffi.cast("float *", px), ffi.cast("float *", py),
                                              ffi.cast("float *", pl))
                    assert int(lib.ft78ne_emu_last_error()) == 0, ffi.string(lib.ft78ne_emu_last_error_message())
                    xd = keep.astype(np.float64)
                    p_ = 1 / (1 + np.exp(-xd))
                    yy = i / 8
                    expected = (0.25 * yy + 0.75 * (1 - yy)) * (np.logaddexp(0, xd) - xd * yy) * (
                        p_ + yy - 2 * p_ * yy) ** 2
                    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-7)
                assert np.array_equal(x, keep) and (y == np.float32(i / 8)).all(), "another thread wrote my block"
                assert lib.ft78ne_emu_core() == core and lib.ft78ne_emu_chip() == chip
            finally:
                for p, _ in blocks:
                    assert lib.ft78ne_emu_private_free(core, p) == 0

    try:
        _run_threads(worker)
    finally:
        lib.ft78ne_emu_set_core(0)
    assert int(lib.ft78ne_emu_private_in_use(6)) == int(lib.ft78ne_emu_private_in_use(7)) == 0


def test_capacity_change_cannot_free_an_arena_under_a_running_call():
    """A program at fixed offsets (nothing allocated) runs _p calls on core 5 while another thread
    keeps asking for a capacity change: each change is refused while a call runs (before the fix it
    freed the arena under the call: a use-after-free that the ASan run reports)."""
    lib = abi.load([str(abi.EMULATOR)])
    ffi = lib.ffi
    cap = int(lib.ft78ne_emu_private_capacity())
    n = cap // 16  # floats: x, y and loss take 3/4 of the arena
    stop = threading.Event()
    outcome = {"calls": 0, "not_private": 0, "refused": 0, "changed": 0}

    def caller(_):
        lib.ft78ne_emu_set_core(5)
        try:
            while not stop.is_set():
                base = ffi.cast("float *", lib.ft78ne_emu_private_base(5))  # the arena may be new each time
                lib.fp_sigmoidfocalloss_p(n, 0, 0.25, 2.0, base, base + n, base + 2 * n)
                code = int(lib.ft78ne_emu_last_error())
                assert code in (0, 4), ffi.string(lib.ft78ne_emu_last_error_message()).decode()
                outcome["calls" if code == 0 else "not_private"] += 1  # 4: the arena was replaced before the call
        finally:
            lib.ft78ne_emu_set_core(0)

    def changer(_):
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:
            rc = int(lib.ft78ne_emu_set_private_capacity(cap))
            if rc:
                msg = ffi.string(lib.ft78ne_emu_last_error_message()).decode()
                assert "running call" in msg, msg
            outcome["refused" if rc else "changed"] += 1
        stop.set()

    threads = [threading.Thread(target=caller, args=(0,)), threading.Thread(target=changer, args=(1,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(lib.ft78ne_emu_private_capacity()) == cap
    assert outcome["calls"] > 0 and outcome["refused"] + outcome["changed"] > 0, outcome
