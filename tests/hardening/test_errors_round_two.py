"""Errors that were not XLossErrors (issue 26): an address-space limit (``ulimit -v``) the memory
guard did not count, Numba switched off or pointed at a threading layer that cannot load, and
arguments that crashed in torch or cffi instead of being refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import xloss
import xloss.torch as xt


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_the_memory_guard_counts_the_address_space_limit():
    """Under RLIMIT_AS a contiguous copy that does not fit is refused up front (it was NumPy's MemoryError)."""
    p = _python("""
        import resource, numpy as np, xloss
        xloss.focal_loss(np.zeros(8, np.float32), np.zeros(8, np.float32), backend="reference")
        base = np.zeros(2 * 50_000_000, np.float32)          # 400 MB; x is every other element
        x, y = base[::2], np.broadcast_to(np.float32(1), (50_000_000,))
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        limit = used + (100 << 20)                           # 100 MiB left: the 200 MB copy cannot fit
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            xloss.focal_loss(x, y, reduction="sum", backend="reference")
        except xloss.XLossValueError as exc:
            print("refused:", exc)
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "refused: a contiguous copy of x" in p.stdout and "available to this process" in p.stdout, p.stdout


def test_a_kernel_out_of_memory_is_an_xloss_error():
    """What the guard does not count (the reference backend's own float64 working arrays) still ends
    as an XLossError (and a MemoryError) naming the backend and the kernel."""
    p = _python("""
        import resource, numpy as np, xloss
        xloss.focal_loss(np.zeros(8, np.float32), np.zeros(8, np.float32), backend="reference")
        x = np.zeros(60_000_000, np.float16)                 # 120 MB; float64 copies: 480 MB each
        y = np.zeros(60_000_000, np.float16)
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        limit = used + (300 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            xloss.focal_loss(x, y, reduction="sum", backend="reference")
        except MemoryError as exc:
            print("refused:", type(exc).__name__, isinstance(exc, xloss.XLossError), exc)
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "refused: XLossMemoryError True backend 'reference' ran out of memory in focal_loss" in p.stdout, p.stdout


@pytest.mark.parametrize("env", [{"NUMBA_DISABLE_JIT": "1"}, {"NUMBA_THREADING_LAYER": "tbb"}])
def test_numba_switched_off_by_the_environment(env):
    """The default falls back to reference with a warning naming the variable; cpu named raises it."""
    var = next(iter(env))
    if var == "NUMBA_THREADING_LAYER":
        try:
            import numba.np.ufunc.tbbpool  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("TBB is installed here: that layer loads")
    p = _python("""
        import warnings, numpy as np, torch, xloss, xloss.torch as xt
        x = np.linspace(-3, 3, 600, dtype=np.float32).reshape(60, 10); y = (x > 0).astype(np.float32)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = xloss.focal_loss(x, y, reduction="sum")
            h, W, t = torch.randn(8, 4), torch.randn(10, 4), torch.arange(8)
            xt.fused_linear_cross_entropy(h.requires_grad_(), W, t).backward()
        assert got == xloss.focal_loss(x, y, reduction="sum", backend="reference")
        print("warned:", [str(m.message) for m in w if m.category is RuntimeWarning][:1])
        for call in (lambda: xloss.focal_loss(x, y, backend="cpu"),
                     lambda: xt.fused_linear_cross_entropy(h, W, t, backend="cpu")):
            try:
                call()
            except xloss.XLossError as exc:
                print("refused:", type(exc).__name__, exc)
    """, **env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "warned: [\"xloss: backend=None uses 'reference'" in p.stdout and var in p.stdout, p.stdout
    assert p.stdout.count(f"refused: BackendUnavailableError backend 'cpu' is not available here: {var}") == 2, \
        p.stdout


def test_torch_arguments_refused_as_xloss_errors():
    x, w, t = torch.randn(4, 3), torch.randn(5, 3), torch.tensor([0, 1, 2, 3])
    with pytest.raises(xloss.XLossValueError, match="ignore_index must fit in int64"):
        xt.fused_linear_cross_entropy(x, w, t, ignore_index=2**70)
    with pytest.raises(xloss.XLossValueError, match="ignore_index must fit in int64"):
        xt.nll_loss(torch.log_softmax(x, 1), t % 3, ignore_index=-(2**64))
    with pytest.raises(xloss.XLossTypeError, match="weight has layout torch.sparse_coo"):
        xt.fused_linear_cross_entropy(x, w.to_sparse(), t)
    with pytest.raises(xloss.XLossTypeError, match="class_weight has layout torch.sparse_coo"):
        xt.fused_linear_cross_entropy(x, w, t, class_weight=torch.ones(5).to_sparse())


def test_issue_30_torch_arguments_refused_as_xloss_errors():
    """The drop-ins for nll_loss, binary_cross_entropy_with_logits and cross_entropy: integers past int64,
    sparse weights and reduction strings with a NUL in them are refused before any kernel (or cffi) sees
    them."""
    x, t, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 1]), torch.rand(4, 3)
    with pytest.raises(xloss.XLossValueError, match="ignore_index must fit in int64"):
        xt.cross_entropy(x, t, ignore_index=2**70)
    with pytest.raises(xloss.XLossTypeError, match="weight has layout torch.sparse_coo"):
        xt.cross_entropy(x, t, weight=torch.ones(3).to_sparse())
    with pytest.raises(xloss.XLossValueError, match="reduction must be one of"):
        xt.cross_entropy(x, t, reduction="sum\0x")
    with pytest.raises(xloss.XLossTypeError, match="pos_weight has layout torch.sparse_coo"):
        xt.binary_cross_entropy_with_logits(x, y, pos_weight=torch.ones(3).to_sparse())
    with pytest.raises(xloss.XLossValueError, match="reduction must be one of"):
        xt.binary_cross_entropy_with_logits(x, y, reduction="mean\0")
    with pytest.raises(xloss.XLossTypeError, match="weight has layout torch.sparse_coo"):
        xt.nll_loss(torch.log_softmax(x, 1), t, weight=torch.ones(3).to_sparse())


@pytest.mark.parametrize("device", [2**62, -1, 2**31])
def test_ascend_device_id_must_be_an_int32(device):
    with pytest.raises(xloss.XLossValueError, match=r"device must be a device id in \[0, 2\*\*31\)"):
        xloss.backend("ascend", device=device)
    with pytest.raises(xloss.XLossTypeError, match="device must be an int"):
        xloss.backend("ascend", device=1.5)
