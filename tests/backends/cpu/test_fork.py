"""The cpu backend in forked children: os.fork, a multiprocessing fork Pool, DataLoader fork workers.

Each scenario runs in its own interpreter with a time limit, so a regression (a child killed by
GNU OpenMP, a Pool or DataLoader waiting forever on a dead child) fails instead of hanging.
The parent always makes a parallel cpu call first: that is what made children die before.
Children must give the parent's results (the serial kernels walk the same fixed blocks, so
elementwise and reduced focal results are bit-identical; FLCE products may differ in rounding
with the thread count of the BLAS).
"""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")
# each case is a fresh interpreter (30-90 s each on the shared 2-core machine at load 12, with the
# serial twins compiling once; a few seconds each from a warm cache on a quiet machine)
pytestmark = pytest.mark.slow

PRELUDE = textwrap.dedent("""
    import os, sys, signal, threading
    import numpy as np
    import xloss
    from xloss.backends.cpu_onednn import threads as T

    rng = np.random.default_rng(0)
    X = (rng.standard_normal(200_000) * 3).astype(np.float32)   # above the single-thread size
    Y = (rng.random(200_000) < 0.3).astype(np.float32)

    def focal(i):
        x = np.roll(X, i)
        loss, grad = xloss.focal_loss_with_grad(x, Y, reduction="sum", backend="cpu")
        return float(loss), grad

    def check(i, got):
        want = PARENT[i]
        assert got[0] == want[0] and np.array_equal(got[1], want[1]), (i, got[0], want[0])

    PARENT = {i: focal(i) for i in range(3)}
    assert T.parallel_layer_started(), "the parent must have launched a parallel kernel"
""")


def run_script(body: str, timeout: float = 420, env=None):
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, f"rc {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    return out.stdout


def test_os_fork_child_runs_serial_kernels_and_matches_the_parent():
    out = run_script("""
        import time
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert T.serial_only()
                check(1, focal(1))
                from xloss.backends.cpu_onednn import focal as F
                assert F.focal_both.py_func.__qualname__.endswith("__serial")
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            raise SystemExit("child hung")
        assert os.waitstatus_to_exitcode(status) == 0, status
        # the parent keeps its parallel kernels
        assert not T.serial_only()
        check(2, focal(2))
        print("ok")
    """)
    assert "ok" in out


def test_multiprocessing_fork_pool():
    out = run_script("""
        import multiprocessing as mp
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.map_async(focal, range(3)).get(timeout=300)
        for i, g in enumerate(got):
            check(i, g)
        print("ok")
    """)
    assert "ok" in out


def test_dataloader_fork_workers():
    pytest.importorskip("torch")
    out = run_script("""
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Losses(Dataset):
            def __len__(self):
                return 3
            def __getitem__(self, i):
                return focal(i)[0]

        dl = DataLoader(Losses(), batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=300)
        got = list(dl)
        assert got == [PARENT[i][0] for i in range(3)], got
        print("ok")
    """)
    assert "ok" in out


def test_flce_through_torch_in_a_fork_child():
    pytest.importorskip("torch")
    out = run_script("""
        import multiprocessing as mp
        import torch

        def flce(_):
            g = np.random.default_rng(3)
            bt, h, v = 64, 32, 700
            x = g.standard_normal((bt, h)).astype(np.float32)
            w = g.standard_normal((v, h)).astype(np.float32)
            t = g.integers(0, v, bt)
            logits = x.astype(np.float64) @ w.T.astype(np.float64)
            m = logits.max(1)
            se = np.exp(logits - m[:, None]).sum(1)
            return xloss.fused_linear_cross_entropy_grad(
                np.full(bt, 1 / bt, np.float32), x, w, np.zeros(bt, bool), t, logits_max=m.astype(np.float32),
                sum_exp_logits=se.astype(np.float32), backend="cpu")

        torch.mm(torch.ones(256, 256), torch.ones(256, 256))  # the parent uses torch's OpenMP pool too
        want = flce(0)
        with mp.get_context("fork").Pool(1) as pool:
            got = pool.map_async(flce, [0]).get(timeout=300)[0]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        print("ok")
    """)
    assert "ok" in out


@pytest.mark.parametrize("layer", ["workqueue", "omp"])
def test_fork_while_another_thread_is_inside_a_cpu_call(layer):
    """A lock held by another thread at the fork must not be inherited as held: the child's
    calls go through. The first case holds the backend's launch lock (held for a whole call
    under the workqueue layer) deterministically; the second forks during real calls."""
    import os

    env = {**os.environ, "NUMBA_THREADING_LAYER": layer}
    out = run_script("""
        import time
        from xloss.backends.cpu_onednn import cpu_backend as CB

        inside, release = threading.Event(), threading.Event()
        def hold():
            with CB._launch_lock:
                inside.set()
                release.wait(60)
        def busy():
            while not release.is_set():
                focal(0)

        workers = [threading.Thread(target=hold), threading.Thread(target=busy)]
        for t in workers:
            t.start()
        inside.wait(60)
        time.sleep(0.05)
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    check(1, focal(1))
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
            time.sleep(0.05)
        deadline = time.monotonic() + 300
        for pid in pids:
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0, status
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
                raise SystemExit("child hung")
        release.set()
        for t in workers:
            t.join(60)
        print("ok", __import__("numba").threading_layer())
    """, env=env)
    assert f"ok {layer}" in out
