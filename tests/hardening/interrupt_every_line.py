"""Child process of test_ft78ne_sigint_storm: an interrupt at every line the calling thread runs in
the staging protocol (``staging.py``) and in the threading primitives it waits on (``threading.py``),
one call per line: the k-th call raises KeyboardInterrupt from a trace function at its k-th such line,
which is where a signal's handler would raise it. After each, a clean call must finish (a worker
killed by a corrupted lock leaves it waiting forever: ``faulthandler`` ends the process after the
deadline, with the stacks) and be right, and no private block may be left allocated.

The cores' workers are started by a first, uninterrupted call: ``Thread.start`` itself waits on an
Event and holds threading's module lock, which CPython does not make interrupt-safe; a worker killed
there is replaced by the next call (``staging._Workers``), but the module lock is CPython's.

Usage: python interrupt_every_line.py memory:private_bytes:core_mask [LINES] [DEADLINE]
"""

from __future__ import annotations

import faulthandler
import sys

import numpy as np

import xloss
from xloss import reference

WATCHED = ("staging.py", "threading.py")


class _InterruptAt:
    """A trace function raising KeyboardInterrupt at the k-th watched line of the calling thread."""

    def __init__(self, k: int):
        self.left = k

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.endswith(WATCHED):
            return None
        return self._line

    def _line(self, frame, event, arg):
        if event == "line":
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
        return self._line


def main(spec: str, lines: int, deadline: float) -> int:
    memory, private_bytes, mask = spec.split(":")
    kw = {} if private_bytes == "-" else {"private_bytes": int(private_bytes)}
    b = xloss.backend("ft78ne", memory=memory, core_mask=int(mask, 0), **kw)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.05, 0.95, 3000).astype(np.float32)
    y = (rng.random(3000) > 0.5).astype(np.float32)
    want = reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean")
    xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b)  # the cores' workers started (below)
    interrupted = 0
    for k in range(1, lines + 1):
        sys.settrace(_InterruptAt(k))
        try:
            xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b)
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            sys.settrace(None)
        faulthandler.dump_traceback_later(deadline, exit=True)
        got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b)
        faulthandler.cancel_dump_traceback_later()
        left = [int(b.lib.ft78ne_emu_private_in_use(c)) for c in range(8)]
        if not np.allclose(got, want, rtol=1e-5, atol=1e-12) or any(left):
            print(f"after an interrupt at line {k}: right={np.allclose(got, want)} in_use={left}", flush=True)
            return 1
    print(f"{spec}: {interrupted} of {lines} calls interrupted; every next call finished and was right", flush=True)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:] + [None, None]
    sys.exit(main(args[0], int(args[1] or 400), float(args[2] or 10)))
