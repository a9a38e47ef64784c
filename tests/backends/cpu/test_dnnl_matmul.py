"""The float32 logits of bf16 operands (``gemm.logits_f32``): oneDNN's bf16 matmul where the optional
``onednn-cpu-gomp`` wheel is installed (``dnnl_matmul``), the widened float32 GEMM otherwise.

Every result is compared with the float64 product of the same operands: the products of bf16 values
are exact in float32, so the only error allowed is float32 accumulation over K terms (plus the
bias addition and one final rounding), bounded by ``(K + 2) * 2**-24 * (|x| @ |w|.T + |b|)``.
The oneDNN tests skip where the package is absent; the fallback tests run everywhere.
"""

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xloss.backends.cpu_onednn import dnnl_matmul, gemm  # noqa: E402

needs_dnnl = pytest.mark.skipif(not dnnl_matmul.available(), reason=f"oneDNN route: {dnnl_matmul.status()}")


def operands(m, k, n, seed, bias=None, x_t=False, w_t=False):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(k, m, generator=g).T if x_t else torch.randn(m, k, generator=g)).bfloat16()
    w = (torch.randn(k, n, generator=g).T if w_t else torch.randn(n, k, generator=g) * 0.1).bfloat16()
    b = None if bias is None else torch.randn(n, generator=g).to(bias)
    return x, w, b


def assert_logits(out, x, w, b=None):
    """``out`` within float32 accumulation error of the float64 ``x @ w.T + b``."""
    x64, w64 = x.double(), w.double()
    ref = x64 @ w64.T
    mag = x64.abs() @ w64.abs().T
    if b is not None:
        ref, mag = ref + b.double(), mag + b.double().abs()
    bound = (x.shape[1] + 2) * 2.0**-24 * mag
    err = (out.double() - ref).abs()
    assert out.dtype == torch.float32 and bool((err <= bound).all()), f"max excess {(err - bound).max().item()}"


SHAPES = [(1, 1, 1), (7, 5, 3), (33, 17, 65), (129, 1000, 257), (64, 2048, 40), (3, 31, 1000)]


@needs_dnnl
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("bias", [None, torch.bfloat16, torch.float32])
def test_dnnl_logits_match_float64(m, k, n, bias):
    x, w, b = operands(m, k, n, seed=m * 31 + n, bias=bias)
    out = torch.full((m, n), float("nan"))
    assert dnnl_matmul.logits(out, x, w, b)
    assert_logits(out, x, w, b)


@needs_dnnl
@pytest.mark.parametrize("x_t,w_t", [(True, False), (False, True), (True, True)])
def test_dnnl_strided_operands_and_column_slice(x_t, w_t):
    """Transposed views of either operand, into a column slice of a wider buffer (the FLCE tile layout):
    the columns outside the slice are left alone."""
    x, w, b = operands(37, 70, 90, seed=5, bias=torch.bfloat16, x_t=x_t, w_t=w_t)
    buf = torch.full((37, 200), 7.0)
    out = buf[:, 60:150]
    assert dnnl_matmul.logits(out, x, w, b)
    assert_logits(out, x, w, b)
    assert bool((buf[:, :60] == 7.0).all() and (buf[:, 150:] == 7.0).all())


@needs_dnnl
@pytest.mark.parametrize("m,k,n", [(0, 4, 5), (4, 0, 5), (4, 5, 0), (0, 0, 0)])
def test_dnnl_empty_dims(m, k, n):
    x, w, b = operands(m, k, n, seed=1, bias=torch.float32)
    out = torch.full((m, n), float("nan"))
    assert dnnl_matmul.logits(out, x, w, b)
    assert_logits(out, x, w, b)  # K = 0: the bias alone


@needs_dnnl
@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 300), n=st.integers(1, 130), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-3, 1.0, 64.0]))
def test_dnnl_logits_property(m, k, n, seed, scale):
    x, w, _ = operands(m, k, n, seed)
    x = (x.float() * scale).bfloat16()
    out = torch.empty(m, n)
    gemm.logits_f32(out, x.float(), w)  # the entry point the FLCE engines use
    assert_logits(out, x, w)


@needs_dnnl
def test_dnnl_is_the_first_route(monkeypatch):
    """``logits_f32`` on bf16 operands goes to oneDNN (and the float32 route is not run)."""
    def fail(*a, **k):
        raise AssertionError("fell back")

    monkeypatch.setattr(gemm, "_linear_f32", fail)
    x, w, b = operands(40, 96, 300, seed=3, bias=torch.bfloat16)
    out = torch.empty(40, 300)
    gemm.logits_f32(out, x.float(), w, b, cols=64)
    assert_logits(out, x, w, b)


def _spy_fallback(monkeypatch):
    calls = []
    real = gemm._linear_f32

    def spy(*a):
        calls.append(a[0].shape)
        real(*a)

    monkeypatch.setattr(gemm, "_linear_f32", spy)
    return calls


@pytest.mark.parametrize("how", ["disabled", "declined", "missing"])
def test_fallback_route(monkeypatch, how):
    """Without oneDNN (turned off, declining, or not installed) ``logits_f32`` takes the widened float32
    GEMM, a ``cols`` tile at a time, with the same accuracy."""
    if how == "disabled":
        monkeypatch.setenv("XLOSS_ONEDNN_MATMUL", "0")
    elif how == "declined":
        monkeypatch.setattr(dnnl_matmul, "logits", lambda *a: False)
    else:
        monkeypatch.delenv("XLOSS_ONEDNN_MATMUL", raising=False)
        monkeypatch.setattr(dnnl_matmul, "_loaded", None)
        monkeypatch.setattr(dnnl_matmul, "_why", dnnl_matmul._why)  # (restored with _loaded)
        monkeypatch.setattr(dnnl_matmul, "library_path", lambda: None)
        assert not dnnl_matmul.available() and "not found" in dnnl_matmul.status()
    calls = _spy_fallback(monkeypatch)
    x, w, b = operands(45, 130, 250, seed=9, bias=torch.bfloat16)
    out = torch.empty(45, 250)
    gemm.logits_f32(out, x.float(), w, b, cols=100)
    assert calls == [(45, 100), (45, 100), (45, 50)]
    assert_logits(out, x, w, b)


def test_declines_what_it_cannot_do_exactly(monkeypatch):
    """float16 operands, and a float32 ``x`` that is not a bf16 value widened, go to the float32 route:
    narrowing such an ``x`` to bf16 would round it."""
    calls = _spy_fallback(monkeypatch)
    out = torch.empty(3, 4)
    assert not dnnl_matmul.logits(out, torch.randn(3, 5).half(), torch.randn(4, 5).half())
    x32 = torch.randn(6, 9) / 3  # not representable in bf16
    w = torch.randn(11, 9).bfloat16()
    out = torch.empty(6, 11)
    gemm.logits_f32(out, x32, w)
    assert calls == [(6, 11)]
    ref = x32.double() @ w.double().T
    assert bool(((out.double() - ref).abs() <= 11 * 2.0**-24 * (x32.double().abs() @ w.double().abs().T)).all())


@needs_dnnl
def test_a_library_that_brings_a_second_openmp_runtime_is_not_used(monkeypatch):
    """Loaded beside PyTorch's pool, a second OpenMP pool would compete for the cores: refused."""
    import xloss.openmp

    seen = iter([["/lib/libgomp.so.1"], ["/lib/libgomp.so.1", "/opt/other/libiomp5.so"]])
    monkeypatch.setattr(xloss.openmp, "loaded_openmp_runtimes", lambda: next(seen))
    monkeypatch.setattr(dnnl_matmul, "_loaded", None)
    monkeypatch.setattr(dnnl_matmul, "_why", dnnl_matmul._why)
    assert not dnnl_matmul.available()
    assert "second OpenMP runtime" in dnnl_matmul.status() and "libiomp5" in dnnl_matmul.status()
    x, w, _ = operands(5, 8, 6, seed=2)
    out = torch.empty(5, 6)
    assert not dnnl_matmul.logits(out, x, w)
    gemm.logits_f32(out, x.float(), w)
    assert_logits(out, x, w)


@needs_dnnl
def test_dnnl_runs_on_torchs_openmp_runtime_with_torchs_thread_count():
    """libdnnl's OpenMP calls bind to the runtime torch ships (the linker's binding trace), even after
    Numba's pool started first, and ``torch.set_num_threads(1)`` keeps oneDNN on the calling thread
    (no OS thread appears during the call). A fresh interpreter."""
    import os
    import subprocess
    import sys

    from xloss.backends.cpu_onednn import threads

    torch_rt = threads.torch_openmp_runtime()
    if torch_rt is None or not os.path.basename(torch_rt).startswith("libgomp"):
        pytest.skip("this torch build ships no GNU OpenMP runtime")
    code = ("import os, numpy as np, xloss\nv = np.linspace(-4, 4, 200_000, dtype=np.float32)\n"
            "xloss.focal_loss(v, (v > 0).astype(np.float32))\n"
            "import torch\ntorch.set_num_threads(1)\nfrom xloss.backends.cpu_onednn import dnnl_matmul\n"
            "x = torch.randn(256, 256).bfloat16(); out = torch.empty(256, 256)\n"
            "before = len(os.listdir('/proc/self/task'))\nassert dnnl_matmul.logits(out, x, x)\n"
            "print(before, len(os.listdir('/proc/self/task')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LD_DEBUG": "bindings"})
    assert r.returncode == 0, r.stderr[-2000:]
    before, after = r.stdout.split()
    assert before == after
    bound = {line.split(" to ")[1].split(" [")[0] for line in r.stderr.splitlines()
             if "libdnnl" in line.split(" to ")[0] and ("`GOMP_" in line or "`omp_" in line)}
    assert bound and {os.path.realpath(p) for p in bound} == {os.path.realpath(torch_rt)}, bound


@needs_dnnl
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True)])
def test_dnnl_matmul_general_layouts(out_dtype, a_t, b_t):
    """``matmul(out, a, b)`` over the gradient GEMMs' layouts (``G @ W``, ``G.T @ x``): a bf16 output
    is the float32 accumulator rounded once (half a bf16 ulp on top of the accumulation bound)."""
    g = torch.Generator().manual_seed(11)
    m, k, n = 45, 300, 70
    a = (torch.randn(k, m, generator=g).T if a_t else torch.randn(m, k, generator=g)).bfloat16()
    b = (torch.randn(n, k, generator=g).T if b_t else torch.randn(k, n, generator=g)).bfloat16()
    out = torch.empty(m, n, dtype=out_dtype)
    assert dnnl_matmul.matmul(out, a, b)
    ref = a.double() @ b.double()
    bound = (k + 2) * 2.0**-24 * (a.double().abs() @ b.double().abs())
    if out_dtype == torch.bfloat16:
        bound = bound * (1 + 2.0**-8) + 2.0**-8 * ref.abs()  # bf16's unit roundoff: 2**-8
    assert bool(((out.double() - ref).abs() <= bound).all())


def _in_threads(n, fn, *barriers):
    """``fn(i)`` on ``n`` threads at once, each with the caller's OpenMP thread count (the primitives' key
    holds it, so every thread asks for the same primitive); returns what they raised. ``barriers``: those
    the threads meet at, broken when one fails."""
    import threading

    count, errors = torch.get_num_threads(), []

    def body(i):
        try:
            torch.set_num_threads(count)
            fn(i)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
            for barrier in barriers:  # the others stop waiting for this one
                barrier.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


@needs_dnnl
def test_a_primitive_runs_only_on_the_thread_that_made_it(monkeypatch):
    """oneDNN's library scratchpad lets a primitive run only on the thread that made it (and never on two at
    once): the same shape on four threads (and this one, first) takes five primitives, each on one thread."""
    import threading

    users, real = {}, dnnl_matmul._primitive

    def spy(loaded, key):
        p = real(loaded, key)
        users.setdefault(id(p), (p, set()))[1].add(threading.current_thread())
        return p

    monkeypatch.setattr(dnnl_matmul, "_primitive", spy)
    x, w, _ = operands(6, 10, 7, seed=4)

    def run(_):
        for _ in range(2):
            out = torch.empty(6, 7)
            assert dnnl_matmul.logits(out, x, w)
            assert_logits(out, x, w)

    run(None)
    ready = threading.Barrier(4)  # the four alive together: four distinct threads
    assert not _in_threads(4, lambda i: (ready.wait(), run(i), ready.wait()), ready)
    assert len(users) == 5 and all(len(threads) == 1 for _, threads in users.values())


@needs_dnnl
def test_threads_running_one_shape_at_once_get_their_own_products():
    """Four threads multiply their own operands of one shape at the same moment, 200 times: every product
    within float32 accumulation error of its float64 reference. (With one primitive shared by the threads,
    this failed in 5 runs of 5 on the 2-core reference machine, each time within its first 20 rounds.)"""
    import threading

    m, k, n = 128, 1024, 512
    cases = [operands(m, k, n, seed=40 + i) for i in range(4)]
    refs = [(x.double() @ w.double().T, (k + 2) * 2.0**-24 * (x.double().abs() @ w.double().abs().T))
            for x, w, _ in cases]
    step = threading.Barrier(4)

    def run(i):
        (x, w, _), (ref, bound) = cases[i], refs[i]
        out = torch.empty(m, n)
        for r in range(200):
            step.wait()
            assert dnnl_matmul.logits(out, x, w)
            excess = ((out.double() - ref).abs() - bound).max().item()
            assert excess <= 0, f"thread {i}, round {r}: error exceeds the bound by up to {excess:.3g}"

    errors = _in_threads(4, run, step)
    assert not errors, errors[0]
