"""Child process of test_ascend_fork: forks while another thread is inside the Ascend emulator's
runtime (aclrtSetDevice/aclrtResetDevice in a loop, each taking the runtime's global mutex), and
checks that every forked child can take that mutex itself (its own aclrtSetDevice) within a
deadline. Without a fork handler a child forked while the other thread held the mutex waits
forever.

Usage: python ascend_fork_child.py FORKS   (prints "hung N of FORKS")
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

import xloss


def main(forks: int) -> int:
    b = xloss.backend("ascend")
    x = np.zeros(8, np.float32)
    xloss.focal_loss(x, x, backend=b)  # the runtime initialised (aclInit)
    lib = b.rt.lib
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            lib.aclrtSetDevice(0)
            lib.aclrtResetDevice(0)

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(3)]  # the mutex held most of the time
    for t in threads:
        t.start()
    hung = 0
    try:
        for _ in range(forks):
            pid = os.fork()
            if pid == 0:
                status = lib.aclrtSetDevice(0)
                lib.aclrtResetDevice(0)
                os._exit(0 if status == 0 else 3)
            deadline = time.monotonic() + 2
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    if os.waitstatus_to_exitcode(status) != 0:
                        print("child failed:", os.waitstatus_to_exitcode(status), flush=True)
                        return 1
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    hung += 1
                    break
                time.sleep(0.001)
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"hung {hung} of {forks}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
