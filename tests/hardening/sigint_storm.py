"""Child process of test_ft78ne_sigint_storm: real SIGINTs (``os.kill``, not ``interrupt_main``) at
random sub-millisecond to millisecond intervals while the main thread makes FT78NE calls, for each
configuration given on the command line; then, with the storm over, one call per configuration must
finish (a worker killed by a corrupted lock would leave it waiting forever: ``faulthandler`` ends the
process after ``--deadline`` seconds with the stacks) and be right, with no private block left.

Usage: python sigint_storm.py SECONDS_PER_CONFIG DEADLINE memory:private_bytes:core_mask ...
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import threading
import time

import numpy as np

import xloss
from xloss import reference


def _storm(stop: threading.Event, seed: int) -> None:
    rnd = random.Random(seed)
    pid = os.getpid()
    time.sleep(0.05)  # the main thread is past Thread.start (whose own wait is not ours to test)
    while not stop.is_set():
        os.kill(pid, signal.SIGINT)
        time.sleep(rnd.uniform(0.0, 0.002))


def _right(b, x, y) -> bool:
    got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b)
    want = reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean")
    return bool(np.allclose(got, want, rtol=1e-5, atol=1e-12))


N = int(os.environ.get("STORM_N", "3000"))

# SIGINT raises KeyboardInterrupt only inside a call, as Python's default handler would there; one
# landing in this script's own loop (its condition, its jump back) is only counted: it would escape
# any try/except the loop could have (one CI run in many ended with exit -2 that way).
_in_call = [False]
_between = [0]


def _on_sigint(signum, frame):
    if _in_call[0]:
        raise KeyboardInterrupt
    _between[0] += 1


def _call(b, x, y) -> bool:
    _in_call[0] = True
    try:
        return _right(b, x, y)
    finally:
        _in_call[0] = False


def main(seconds: float, deadline: float, configs: list[str]) -> int:
    rng = np.random.default_rng(0)
    x = rng.uniform(0.05, 0.95, N).astype(np.float32)
    y = (rng.random(N) > 0.5).astype(np.float32)
    for n, spec in enumerate(configs):
        memory, private_bytes, mask = spec.split(":")
        kw = {"memory": memory, "core_mask": int(mask, 0)}
        if private_bytes != "-":
            kw["private_bytes"] = int(private_bytes)
        b = xloss.backend("ft78ne", **kw)
        _right(b, x, y)  # loaded before the storm
        stop = threading.Event()
        storm = threading.Thread(target=_storm, args=(stop, n), daemon=True)
        interrupted = calls = 0
        end = time.monotonic() + seconds
        previous = signal.signal(signal.SIGINT, _on_sigint)
        try:
            storm.start()
            while time.monotonic() < end:
                try:
                    _call(b, x, y)
                    calls += 1
                except KeyboardInterrupt:
                    interrupted += 1
        finally:
            stop.set()
            storm.join()
            time.sleep(0.05)  # the last signals land here, counted
            signal.signal(signal.SIGINT, previous)
        faulthandler.dump_traceback_later(deadline, exit=True)
        ok = _right(b, x, y)
        faulthandler.cancel_dump_traceback_later()
        left = [int(b.lib.ft78ne_emu_private_in_use(c)) for c in range(8)] if memory == "private" else [0] * 8
        print(f"{spec}: {calls} calls, {interrupted} interrupts, after: right={ok} in_use={left}", flush=True)
        if not ok or any(left):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]))
