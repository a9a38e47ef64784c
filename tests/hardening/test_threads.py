"""Every backend called from 8 Python threads at once gives exactly its serial results.

cffi releases the GIL around C calls and Numba's kernels run without it, so these calls really
overlap. Numba's workqueue threading layer is not thread-safe; the cpu backend serialises its
launches under it, which a subprocess forcing that layer checks.
"""

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import xloss
from xloss.conformance import available_backends

BACKENDS = {b.name: b for b in available_backends()}
N_THREADS, N_CALLS = 8, 24


def _dtype(b, kernel):
    caps = b.capabilities().get(kernel)
    if caps is None:
        return None
    return next((d for d in ("float32", "float16", "bfloat16") if d in caps.dtypes), None)


def _jobs(b):
    """(kernel, list of zero-argument calls with distinct inputs)."""
    rng = np.random.default_rng(1)
    jobs = []
    if dt := _dtype(b, "focal_loss"):
        xs = [(rng.standard_normal(5000 + 97 * i) * 4).astype(dt) for i in range(N_CALLS)]
        jobs.append(("focal_loss", [lambda x=x: xloss.focal_loss_with_grad(x, (x > 1).astype(x.dtype),
                                                                           reduction="mean", backend=b) for x in xs]))
    if dt := _dtype(b, "bce_grad"):
        mode = sorted(b.capabilities()["bce_grad"].variants["eps_mode"])[0]
        xs = [rng.uniform(0.01, 0.99, 3000 + 31 * i).astype(dt) for i in range(N_CALLS)]
        jobs.append(("bce_grad", [lambda x=x: (xloss.bce_grad(x, (x > 0.5).astype(x.dtype), eps_mode=mode,
                                                              backend=b),) for x in xs]))
    if dt := _dtype(b, "nll_loss_grad"):
        ts = [rng.integers(0, 50, 200 + i) for i in range(N_CALLS)]
        jobs.append(("nll_loss_grad", [lambda t=t: (xloss.nll_loss_grad(2.0, np.zeros((t.size, 50), dt), t,
                                                                        backend=b),) for t in ts]))
    if dt := _dtype(b, "fused_linear_cross_entropy_grad"):
        def flce(i):
            x = rng.standard_normal((16 + i, 24)).astype(dt)
            w = rng.standard_normal((40, 24)).astype(dt)
            return lambda: xloss.fused_linear_cross_entropy_grad(
                np.ones(len(x), np.float32), x, w, np.zeros(len(x), bool), np.arange(len(x)) % 40,
                logits_max=np.full(len(x), 8.0, np.float32), sum_exp_logits=np.full(len(x), 50.0, np.float32),
                backend=b)
        jobs.append(("fused_linear_cross_entropy_grad", [flce(i) for i in range(N_CALLS)]))
    return jobs


TARGETS = [(name, kernel) for name, b in BACKENDS.items() for kernel, _ in _jobs(b)]


@pytest.mark.parametrize("name,kernel", TARGETS)
def test_concurrent_calls_equal_serial_calls(name, kernel):
    calls = dict(_jobs(BACKENDS[name]))[kernel]
    serial = [call() for call in calls]
    with ThreadPoolExecutor(N_THREADS) as pool:
        concurrent = list(pool.map(lambda call: call(), calls))
    for want, got in zip(serial, concurrent):
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_cpu_backend_under_numbas_workqueue_layer():
    script = textwrap.dedent("""
        import numpy as np, numba, xloss
        from concurrent.futures import ThreadPoolExecutor
        xs = [np.linspace(-5, 5, 100_000 + i, dtype=np.float32) for i in range(16)]
        run = lambda x: xloss.focal_loss_with_grad(x, (x > 0).astype(np.float32), reduction="sum", backend="cpu")
        serial = [run(x) for x in xs]
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(run, xs))
        assert numba.threading_layer() == "workqueue"
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(serial, got))
        print("ok")
    """)
    env = {"NUMBA_THREADING_LAYER": "workqueue", "PATH": "/usr/bin:/bin"}
    import os
    env.update({k: v for k, v in os.environ.items() if k.startswith(("NUMBA_CACHE", "HOME", "PYTHON"))})
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_sigint_storm_leaves_numbas_thread_count_and_the_handler_as_they_were():
    """SIGINTs every half millisecond while the main thread makes cpu calls that change Numba's
    thread count (``threads=1``, and small inputs that run single-threaded): every interrupt
    surfaces as a KeyboardInterrupt after its call, and afterwards the count and the handler
    are the ones from before."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        import numpy as np, numba, xloss

        one = xloss.backend("cpu", threads=1)
        big = np.linspace(-6, 6, 300_000, dtype=np.float32)
        small = big[:5000].copy()
        want = {id(x): xloss.focal_loss(x, (x > 0).astype(np.float32), reduction="sum") for x in (big, small)}
        before = numba.get_num_threads()
        assert before > 1, before

        inside = False
        def handler(signum, frame):
            if inside:
                raise KeyboardInterrupt
        signal.signal(signal.SIGINT, handler)

        stop = threading.Event()
        def storm():
            while not stop.is_set():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.0005)
        t = threading.Thread(target=storm)
        t.start()
        calls = hits = 0
        end = time.monotonic() + 4
        while time.monotonic() < end:
            x = big if calls % 3 == 0 else small
            try:
                inside = True
                got = xloss.focal_loss(x, (x > 0).astype(np.float32), reduction="sum",
                                       backend=one if calls % 2 else "cpu")
                inside = False
                assert got == want[id(x)]
                calls += 1
            except KeyboardInterrupt:
                inside = False
                hits += 1
        stop.set()
        t.join()
        time.sleep(0.05)
        assert numba.get_num_threads() == before, (numba.get_num_threads(), before)
        assert signal.getsignal(signal.SIGINT) is handler
        assert calls > 0 and hits > 0, (calls, hits)
        print("ok", calls, hits)
    """)
    import os

    env = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stdout + out.stderr[-3000:]


def test_a_sigint_during_a_cpu_call_is_delivered_after_it():
    import os
    import signal as sig

    from xloss.backends.cpu_onednn import threads

    if threading_main() is False:
        pytest.skip("signals reach the main thread only")
    done = []
    with pytest.raises(KeyboardInterrupt):
        with threads.sigint_held():
            os.kill(os.getpid(), sig.SIGINT)
            for _ in range(1000):  # bytecodes run: a pending signal would be handled here
                done.append(1)
    assert len(done) == 1000
    assert sig.getsignal(sig.SIGINT) is sig.default_int_handler


def threading_main():
    import threading

    return threading.current_thread() is threading.main_thread()
