"""Thread safety of the ascend backend (issue 9): the same kernels from 8 Python threads at once
give results identical, bit for bit, to serial calls (cffi releases the GIL, so the C code really
runs concurrently), and the ABI objects behave as backends/ascend_aclnn/README.md documents under
concurrency: tensors shared between threads, a single-use executor raced by 8 threads (exactly
one run), a repeatable executor run from several threads, each thread with its own device
context and stream."""

from __future__ import annotations

import threading

import ascend_support as support  # tests/backends/ascend, on pytest's pythonpath
import ml_dtypes
import numpy as np
import pytest

import xloss

THREADS = 8


@pytest.fixture(scope="module")
def emu():
    return support.emulator_backend()


def _jobs():
    """One call of every kernel, in every dtype it declares, with every reduction: (name, thunk)."""
    rng = np.random.default_rng(2024)
    jobs = []
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16):
        for red in ("none", "mean", "sum"):
            x = rng.uniform(-8, 8, (37, 23)).astype(dt)
            y = (rng.random((37, 23)) > 0.7).astype(dt)
            w = rng.uniform(0, 2, (37, 1)).astype(dt)
            jobs.append((f"focal {dt.__name__} {red}", lambda b, x=x, y=y, w=w, red=red:
                         xloss.focal_loss_with_grad(x, y, weight=w, gamma=1.5, reduction=red, backend=b)))
            p = rng.uniform(0.01, 0.99, (29, 31)).astype(dt)
            jobs.append((f"bce {dt.__name__} {red}", lambda b, p=p, y=y, red=red:
                         xloss.bce_grad(p, (p > 0.4).astype(p.dtype), reduction=red, backend=b)))
            s = -rng.random((41, 13)).astype(dt)
            t = rng.integers(0, 13, 41)
            t[::7] = -100
            jobs.append((f"nll {dt.__name__} {red}", lambda b, s=s, t=t, red=red:
                         xloss.nll_loss_grad(0.7, s, t, reduction=red, backend=b)))
        if dt is not np.float32:
            bt, h, v = 19, 16, 21
            xi, wv = rng.uniform(-1, 1, (bt, h)).astype(dt), rng.uniform(-1, 1, (v, h)).astype(dt)
            logits = xi.astype(np.float64) @ wv.astype(np.float64).T
            lmax = logits.max(1).astype(np.float32)
            sexp = np.exp(logits - lmax[:, None]).sum(1).astype(np.float32)
            mask = rng.random(bt) < 0.3
            mt = np.where(mask, 0, rng.integers(0, v, bt))
            jobs.append((f"flce {dt.__name__}", lambda b, xi=xi, wv=wv, lmax=lmax, sexp=sexp, mask=mask, mt=mt, bt=bt:
                         xloss.fused_linear_cross_entropy_grad(np.ones(bt, np.float32), xi, wv, mask, mt,
                                                               logits_max=lmax, sum_exp_logits=sexp, backend=b)))
    return jobs


def _bits(result):
    arrays = result if isinstance(result, tuple) else (result,)
    return tuple(np.asarray(a).tobytes() for a in arrays)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_eight_threads_give_the_serial_results_bit_for_bit(emu, layout):
    b = support.emulator_backend(layout=layout)
    jobs = _jobs()
    serial = [_bits(fn(b)) for _, fn in jobs]
    before = b.rt.live()
    barrier, errors = threading.Barrier(THREADS), []

    def worker(k):
        try:
            barrier.wait()
            for rep in range(5):
                for j in range(len(jobs)):
                    i = (j + 5 * k + rep) % len(jobs)  # the threads interleave different kernels
                    assert _bits(jobs[i][1](b)) == serial[i], f"thread {k}: {jobs[i][0]} differs from the serial call"
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert b.rt.live() == before


def test_abi_objects_under_concurrency(emu):
    """Input tensors shared by 8 threads; each thread its own device context, stream, output and
    executor (phase one concurrently over the shared tensors); a single-use executor raced by all
    threads runs exactly once; a repeatable one runs from every thread."""
    abi = support.Abi(emu)
    lib, ffi = abi.lib, abi.ffi
    rng = np.random.default_rng(3)
    x = rng.uniform(0.05, 0.95, (64, 33)).astype(np.float32)
    y = (rng.random((64, 33)) > 0.5).astype(np.float32)
    want = ((x - y) / np.maximum(x * (1 - x), np.float32(1e-12))).astype(np.float32)
    before = abi.live()
    with emu.session() as s:
        tx, ty = s.put(x)[0], s.put(y)[0]
        tg = s.put(np.asarray(1.0, np.float32))[0]
        outs = [s.empty(x.shape, np.float32) for _ in range(THREADS)]
        race_out, race_buf = s.empty(x.shape, np.float32)
        st_, _, single = abi.phase_one("aclnnBinaryCrossEntropyBackward", tg, tx, ty, abi.NULL, 0, race_out)
        assert st_ == 0
        st_, _, shared = abi.phase_one("aclnnBinaryCrossEntropyBackward", tg, tx, ty, abi.NULL, 0, race_out)
        assert st_ == 0 and lib.aclSetAclOpExecutorRepeatable(shared) == 0
        barrier, results, errors = threading.Barrier(THREADS), [None] * THREADS, []
        repeat_lock = threading.Lock()  # concurrent runs of one executor would race on its outputs

        def worker(k):
            try:
                assert lib.aclrtSetDevice(0) == 0  # the device context is per thread
                stream = ffi.new("aclrtStream *")
                assert lib.aclrtCreateStream(stream) == 0
                try:
                    barrier.wait()
                    race = abi.phase_two("aclnnBinaryCrossEntropyBackward", abi.NULL, 0, single, stream[0])
                    for _ in range(10):
                        got, _, ex = abi.phase_one("aclnnBinaryCrossEntropyBackward", tg, tx, ty, abi.NULL, 0,
                                                   outs[k][0])
                        assert got == 0
                        assert abi.phase_two("aclnnBinaryCrossEntropyBackward", abi.NULL, 0, ex, stream[0]) == 0
                    with repeat_lock:
                        assert abi.phase_two("aclnnBinaryCrossEntropyBackward", abi.NULL, 0, shared, stream[0]) == 0
                    results[k] = race
                finally:
                    assert lib.aclrtDestroyStream(stream[0]) == 0
                    assert lib.aclrtResetDevice(0) == 0
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        # one run; the rest: an executor now unknown (ACLNN_ERR_INNER)
        assert sorted(results) == [0] + [561000] * (THREADS - 1)
        for _, buf in outs + [(None, race_buf)]:
            np.testing.assert_array_equal(s.download(buf, x.shape, np.float32), want)
        assert lib.aclDestroyAclOpExecutor(shared) == 0
    assert abi.live() == before
