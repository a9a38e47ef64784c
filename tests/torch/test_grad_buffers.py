"""The gradient-buffer pool (xloss.torch.grad_buffers): a buffer comes back only once no tensor, view,
x.grad or saved graph holds it; the drop-ins' gradients through it equal the fresh path's bit for bit."""

import importlib
import threading

import pytest
import torch

import xloss
import xloss.torch as xt
from xloss.backend import KernelCaps
from xloss.backends.numpy_reference import ReferenceBackend
from xloss.torch import grad_buffers as gb


@pytest.fixture
def pool(monkeypatch):
    """A process pool that takes every size (the drop-ins' small test tensors included)."""
    p = gb.BufferPool(min_bytes=1, max_buffers=4, max_bytes=1 << 20)
    monkeypatch.setattr(gb, "_POOL", p)
    return p


def _ptr(t):
    return t.untyped_storage().data_ptr()


# -- the pool alone --------------------------------------------------------------------------


def test_a_dropped_buffer_is_handed_out_again_and_aligned(pool):
    a = gb.empty((8, 16), torch.float32)
    ptr = _ptr(a)
    assert ptr % 64 == 0 and a.is_contiguous() and a._base is None
    del a
    b = gb.empty((16, 8), torch.float32)  # same byte size, another shape
    assert _ptr(b) == ptr and b.shape == (16, 8)
    assert pool.stats() == {"buffers": 1, "bytes": 512, "in_use": 1}


def _holder(a, hold):
    """Something other than ``a`` that keeps its memory."""
    if hold == "grad":
        leaf = torch.zeros(a.shape, requires_grad=True)
        leaf.grad = a
        return leaf
    return {"view": a[5:], "detach": a.detach(), "storage": a.untyped_storage(), "numpy": a.numpy()}[hold]


def _first_value(holder, hold):
    if hold == "grad":
        return float(holder.grad[0])
    return float(torch.as_tensor((torch.empty(0).set_(holder) if hold == "storage" else holder)[0]))


@pytest.mark.parametrize("hold", ["view", "detach", "storage", "numpy", "grad"])
def test_never_handed_out_while_anything_holds_it(pool, hold):
    a = gb.empty((128,), torch.float32).fill_(3.0)
    keep, ptr = _holder(a, hold), _ptr(a)
    del a
    b = gb.empty((128,), torch.float32).fill_(-1.0)
    assert _ptr(b) != ptr and _first_value(keep, hold) == 3.0  # untouched
    del b, keep
    assert _ptr(gb.empty((128,), torch.float32)) == ptr


def test_bounded_by_count_and_bytes_then_plain_allocations(pool):
    held = [gb.empty((64,), torch.float64) for _ in range(6)]  # 512 B each; 4 buffers at most
    assert pool.stats() == {"buffers": 4, "bytes": 2048, "in_use": 4}
    assert len({_ptr(t) for t in held}) == 6
    del held
    big = gb.empty((1 << 18,), torch.float32)  # 1 MiB: evicts the free small ones to fit the byte cap
    assert pool.stats() == {"buffers": 1, "bytes": 1 << 20, "in_use": 1}
    over = gb.empty((1 << 19,), torch.float32)  # beyond the cap: plain
    assert pool.stats()["buffers"] == 1 and _ptr(over) != _ptr(big)
    assert xt.release_buffers() == 1 << 20 and pool.stats()["buffers"] == 0
    big.fill_(1.0)  # a released buffer in use stays valid with its tensor
    assert float(big.sum()) == float(1 << 18)


def test_a_free_buffer_is_evicted_only_for_a_request_that_then_fits():
    p = gb.BufferPool(min_bytes=1, max_buffers=2, max_bytes=1 << 20)
    used = p.empty((1 << 17,), torch.float32)  # 512 KiB in use
    p.empty((64,), torch.float32)  # 256 B, dropped at once: free
    p.empty((3 << 16,), torch.float32)  # 768 KiB: no room beside the one in use; plain, nothing evicted
    assert p.stats() == {"buffers": 2, "bytes": (1 << 19) + 256, "in_use": 1}
    kept = p.empty((1 << 16,), torch.float32)  # 256 KiB: fits once the free 256 B buffer goes
    assert p.stats() == {"buffers": 2, "bytes": 3 << 18, "in_use": 2} and _ptr(kept) != _ptr(used)


def test_opt_out_by_function_and_by_environment(pool, monkeypatch):
    a = gb.empty((32,), torch.float32)
    assert gb.set_enabled(False) is True and pool.stats()["buffers"] == 0
    ptr = _ptr(a)
    del a
    assert _ptr(gb.empty((32,), torch.float32)) != ptr and pool.stats()["buffers"] == 0
    gb.set_enabled(True)
    monkeypatch.setenv("XLOSS_TORCH_POOL", "0")
    try:
        assert importlib.reload(gb)._POOL.enabled is False
    finally:
        monkeypatch.delenv("XLOSS_TORCH_POOL")
        importlib.reload(gb)
    assert gb._POOL.enabled is True and gb._POOL.min_bytes == gb.MIN_BYTES


def test_threads_never_share_a_buffer(pool):
    errors = []

    def work(k):
        for _ in range(200):
            t = gb.empty((64,), torch.float32).fill_(k)
            if not bool((t == k).all()):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and pool.stats()["buffers"] <= 4


# -- the drop-ins through the pool -----------------------------------------------------------

_DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def _ce(x, t, **kw):
    return xt.cross_entropy(x, t, backend="cpu", **kw)


def _ce_pair(x, t, **kw):
    return xt.cross_entropy(x, t, backend="ascend", **kw)  # no fused row there: the vendor pair, in place


def _bcewl(x, y, **kw):
    return xt.binary_cross_entropy_with_logits(x, y, backend="cpu", **kw)


def _bce(p, y, **kw):
    return xt.binary_cross_entropy(p, y, backend="cpu", **kw)


def _nll(x, t, **kw):
    return xt.nll_loss(x, t, backend="cpu", **kw)


def _focal(x, y, **kw):
    return xt.sigmoid_focal_loss(x, y, backend="cpu", **{"reduction": "mean", **kw})


def _classes(g, shape):
    t = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g)
    t.view(-1)[::4] = -100
    return t


def _problem(family, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if family == "focal":
        return _focal, (torch.randn(6, 43, generator=g) * 4).to(dtype), (torch.rand(6, 43, generator=g) > 0.8).to(dtype)
    if family in ("ce", "ce_pair"):
        return (_ce if family == "ce" else _ce_pair, (torch.randn(9, 37, generator=g) * 4).to(dtype),
                torch.randint(0, 37, (9,), generator=g))
    if family == "bce":
        p = torch.sigmoid(torch.randn(7, 29, generator=g) * 3)
        return _bce, p.to(dtype), torch.rand(7, 29, generator=g).to(dtype)
    if family in ("nll", "nll_nd"):
        shape = (9, 37) if family == "nll" else (3, 5, 4, 6)
        return _nll, torch.randn(shape, generator=g).mul(3).log_softmax(1).to(dtype), _classes(g, shape)
    return _bcewl, (torch.randn(5, 41, generator=g) * 4).to(dtype), torch.rand(5, 41, generator=g).to(dtype)


_FAMILIES = ["ce", "bcewl", "focal", "bce", "nll", "nll_nd", "ce_pair"]
_CASES = [(f, d) for f in _FAMILIES for d in _DTYPES if not (f == "ce_pair" and d == torch.float64)]  # ascend: no f64


def _grad(fn, x, t, *, retain=False, **kw):
    xg = x.detach().requires_grad_()
    fn(xg, t, **kw).backward()
    return xg.grad


@pytest.mark.parametrize(("family", "dtype"), _CASES)
def test_drop_in_gradients_equal_the_fresh_path_and_reuse_after_drop(pool, family, dtype):
    fn, x, t = _problem(family, dtype)
    gb.set_enabled(False)
    fresh = _grad(fn, x, t)
    gb.set_enabled(True)
    first = _grad(fn, x, t)
    ptr = _ptr(first)
    assert torch.equal(first, fresh) and pool.stats()["in_use"] == 1
    kept = first  # the user holds the gradient: the next step gets another buffer
    second = _grad(fn, x * 0.5, t)
    assert _ptr(second) != ptr and torch.equal(kept, fresh)
    del first, kept, second
    assert _ptr(_grad(fn, x, t)) == ptr


@pytest.mark.parametrize("family", _FAMILIES)
def test_accumulation_retained_graphs_and_interleaved_steps(pool, family):
    fn, x, t = _problem(family, torch.float32)

    def run():
        a = x.detach().requires_grad_()
        loss_a = fn(a, t, reduction="sum")
        loss_a.backward(retain_graph=True)
        other = _grad(fn, x.flip(0), t)  # another step between the two backwards through a's graph
        fn(a, t).backward()  # a second micro-batch accumulated into a.grad in place
        loss_a.backward(retain_graph=True)  # the retained graph again
        loss_a.backward(torch.tensor(2.0))  # upstream other than 1: the saved gradient scaled
        return a.grad.clone(), other.clone()

    gb.set_enabled(False)
    expect = run()
    gb.set_enabled(True)
    got = run()
    assert all(torch.equal(g, e) for g, e in zip(got, expect, strict=True))


def test_compiled_fullgraph_and_functorch_through_the_pool(pool):
    fn, x, t = _problem("ce", torch.float32)
    compiled = torch.compile(lambda a, b: fn(a, b, label_smoothing=0.1), fullgraph=True, backend="aot_eager")
    gb.set_enabled(False)
    expect = _grad(fn, x, t, label_smoothing=0.1)
    expect_func = torch.func.grad(lambda a: _bcewl(a, x.sigmoid()))(x)
    gb.set_enabled(True)
    for _ in range(2):
        assert torch.equal(_grad(compiled, x, t), expect)
        assert torch.equal(torch.func.grad(lambda a: _bcewl(a, x.sigmoid()))(x), expect_func)


@pytest.mark.parametrize("family", ["bce", "nll", "nll_nd", "ce_pair"])
def test_a_reused_buffer_is_written_whole_and_never_aliases_an_input(pool, family):
    """A buffer full of another step's values (NaN here) gives the fresh path's gradient bit for bit (the one
    nonzero per NLL row included); an input that is itself a pooled buffer is never handed out as the output."""
    fn, x, t = _problem(family, torch.float32)
    gb.set_enabled(False)
    fresh = _grad(fn, x, t)
    gb.set_enabled(True)
    stale = gb.empty(x.shape, x.dtype).fill_(float("nan"))
    ptr = _ptr(stale)
    del stale
    got = _grad(fn, x, t)
    assert _ptr(got) == ptr and torch.equal(got, fresh)
    del got
    pooled_input = gb.empty(x.shape, x.dtype).copy_(x)  # takes the free buffer: the op must get another
    got = _grad(fn, pooled_input, t)
    assert _ptr(got) != _ptr(pooled_input) and torch.equal(pooled_input, x) and torch.equal(got, fresh)


class _RowsOnlyNLLBackward(ReferenceBackend):
    """The reference backend with the NLL backward declared for (C) and (N, C) input only."""

    def capabilities(self):
        caps = super().capabilities()
        caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=("float32", "float64"), input=("C", "NC"))
        return caps


def test_nll_rows_route_and_the_vendor_pair_op_through_the_pool(pool):
    """The N-d NLL backward on a backend that takes rows only (the rows' buffer comes back at once; the
    refused call's buffer is the gradient), and ``torch.ops.xloss.cross_entropy_loss_backward`` alone."""
    _, x, t = _problem("nll_nd", torch.float32)
    rows_only = _RowsOnlyNLLBackward()

    def nll_rows(a, b, **kw):
        return xt.nll_loss(a, b, backend=rows_only, **kw)

    _, logits, classes = _problem("ce", torch.float32)
    lp = logits.log_softmax(1)
    up = torch.linspace(-1, 1, 9)

    def pair_backward():
        return torch.ops.xloss.cross_entropy_loss_backward(up, lp, classes, None, -100, "none", 0.2, "cpu")

    gb.set_enabled(False)
    expect = _grad(nll_rows, x, t, reduction="sum"), pair_backward()
    gb.set_enabled(True)
    for _ in range(2):
        got = _grad(nll_rows, x, t, reduction="sum"), pair_backward()
        assert all(torch.equal(g, e) for g, e in zip(got, expect, strict=True))
        assert pool.stats() == {"buffers": 3, "bytes": 2 * x.numel() * 4 + lp.numel() * 4,
                                "in_use": 2}
        del got


def test_compiled_fullgraph_nll_bce_and_the_vendor_pair_through_the_pool(pool):
    """torch.compile records the ops as before; their bodies take pooled buffers at run time. The traced
    backward's second-order guard clones the op's gradient (as it always did), so ``x.grad`` is that clone and
    the pooled buffer is free again when the backward ends: reused every step, never held by the user."""
    cases = [_problem(f, torch.float32) for f in ("nll_nd", "bce", "ce_pair")]

    def losses(*args):
        return sum(fn(a, b) for (fn, _, _), a, b in zip(cases, args[::2], args[1::2], strict=True))

    def grads(f):
        leaves = [x.detach().requires_grad_() for _, x, _ in cases]
        f(*(v for leaf, (_, _, t) in zip(leaves, cases, strict=True) for v in (leaf, t))).backward()
        return [leaf.grad for leaf in leaves]

    compiled = torch.compile(losses, fullgraph=True, backend="aot_eager")
    gb.set_enabled(False)
    expect = grads(losses)
    gb.set_enabled(True)
    for _ in range(2):
        got = grads(compiled)
        assert all(torch.equal(g, e) for g, e in zip(got, expect, strict=True))
        assert pool.stats() == {"buffers": 3, "bytes": sum(x.numel() * 4 for _, x, _ in cases), "in_use": 0}
        del got


def test_a_malformed_size_setting_is_named(monkeypatch):
    monkeypatch.setenv("XLOSS_TORCH_POOL_BYTES", "2GiB")
    with pytest.raises(xloss.XLossValueError, match="XLOSS_TORCH_POOL_BYTES must be a non-negative whole number"):
        gb._env_int("XLOSS_TORCH_POOL_BYTES", 1)
    monkeypatch.setenv("XLOSS_TORCH_POOL_BYTES", " 4096 ")
    assert gb._env_int("XLOSS_TORCH_POOL_BYTES", 1) == 4096
