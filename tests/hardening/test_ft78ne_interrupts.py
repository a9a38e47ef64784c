"""FT78NE/MT7004 private memory under interrupts and forks (issue 14's rows for this backend).

* A storm of KeyboardInterrupts (``_thread.interrupt_main`` from a timer, at random points during
  and between private-memory calls) must leave no block allocated in any core's arena, and the
  next call must work and be right.
* A ``fork`` while another thread is inside a private-memory call must not leave the child waiting
  forever on a lock the parent's thread held (the adapter's core locks and library loading lock,
  the arena mutex), and the child's own calls must be right.

Bounded: a fixed number of interrupts; each child process has a timeout.
"""

from __future__ import annotations

import _thread
import multiprocessing
import random
import threading
import time

import numpy as np
import pytest

import xloss
from xloss import reference

N = 6000  # fp32 BCE elements: at private_bytes=2048 about 60 tiles per call over four cores


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 0.95, N).astype(np.float32), (rng.random(N) > 0.5).astype(np.float32)


def _backend(**kw):
    return xloss.backend("mt7004", memory="private", core_mask=0x0F, private_bytes=2048, **kw)


def _right(b, x, y) -> bool:
    got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b)
    want = reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean")
    return bool(np.allclose(got, want, rtol=1e-5, atol=1e-12))


def _in_use(b):
    return [int(b.lib.ft78ne_emu_private_in_use(c)) for c in range(8)]


@pytest.mark.parametrize("guards", [False, True])
def test_interrupt_storm_leaves_no_block_allocated(guards):
    b = _backend(guards=guards)
    x, y = _data()
    assert _right(b, x, y) and _in_use(b) == [0] * 8
    t0 = time.perf_counter()
    _right(b, x, y)
    call = time.perf_counter() - t0
    rnd = random.Random(7)
    hits = 0
    for _ in range(40):
        timer = threading.Timer(rnd.uniform(0, 1.2 * call), _thread.interrupt_main)
        try:
            timer.start()
            try:
                _right(b, x, y)
            finally:
                timer.join()
                for _ in range(1000):  # the interrupt may land after the call: let it land here
                    pass
        except KeyboardInterrupt:
            hits += 1
    assert hits >= 10, f"only {hits} of 40 calls were interrupted"
    assert _in_use(b) == [0] * 8  # every block of every interrupted call was freed
    assert _right(b, x, y) and _in_use(b) == [0] * 8


def _child(conn):
    b = _backend()
    x, y = _data(1)
    conn.send(_right(b, x, y))
    conn.close()


def test_fork_during_a_private_call_does_not_hang_the_child():
    b = _backend()
    x, y = _data(2)
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            _right(b, x, y)

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    ctx = multiprocessing.get_context("fork")
    try:
        for _ in range(6):
            time.sleep(0.02)  # the busy thread is inside a call (it holds a core) most of the time
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_child, args=(child,))
            p.start()
            ok = parent.poll(60) and parent.recv()
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
                pytest.fail("the forked child hung in its private-memory call")
            assert ok and p.exitcode == 0
    finally:
        stop.set()
        worker.join(60)
    assert _in_use(b) == [0] * 8
