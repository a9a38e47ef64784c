"""The vocabulary-parallel fused linear-cross-entropy through the backends' vocabulary-parallel
kernels (``fused_linear_online_max_sum`` per shard, our all-reduce, ``fused_cross_entropy_loss_with_max_sum``,
then ``fused_linear_cross_entropy_grad`` with the forward's mask): 2 and 4 shards against
``F.cross_entropy`` on the full logits in float64 (loss and both gradients).

The ranks are threads of this process on PyTorch's in-process ``threaded`` process group (the
same collectives as gloo, test_distributed.py's two-process run, without spawning processes:
each case takes well under a second). Also the two kernels as ``torch.ops.xloss`` custom ops.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import xloss
import xloss.torch as xt
from xloss import registry
from xloss.kernel_args import Request
from xloss.torch import flce_max_sum as VP
from xloss.torch import ops
from xloss.torch.flce_passes import Params

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)
mtpg = pytest.importorskip("torch.testing._internal.distributed.multi_threaded_pg")

# relative to the largest magnitude of the float64 oracle: float32 sums; bf16 operands and gradients
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}
_lock = threading.Lock()  # one threaded world at a time


def run_ranks(world: int, fn):
    """``[fn(rank, group) for each rank]``, the ranks running as threads on a threaded process group."""
    results, errors = [None] * world, []

    def body(rank, store):
        try:
            dist.init_process_group("threaded", rank=rank, world_size=world, store=store)
            try:
                results[rank] = fn(rank, dist.group.WORLD)
            finally:
                dist.destroy_process_group()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(exc)
            mtpg.ProcessLocalGroup.exception_handle(exc)  # wake the ranks waiting on a collective

    with _lock:
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        mtpg._install_threaded_pg()
        try:
            store = dist.HashStore()
            threads = [threading.Thread(target=body, args=(r, store)) for r in range(world)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            mtpg._uninstall_threaded_pg()
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the chunks whose statistics came from the vocabulary-parallel kernels."""
    calls = []
    real = VP.chunk_stats

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(VP, "chunk_stats", counted)
    return calls


def make_case(seed, bt, h, v, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(bt, h, generator=g, dtype=torch.float64)
    w = torch.randn(v, h, generator=g, dtype=torch.float64) * 0.7
    t = torch.randint(0, v, (bt,), generator=g)
    t[1::4] = ignore_index
    up = torch.rand(bt, generator=g, dtype=torch.float64) + 0.5
    return x, w, t, up


def oracle(x, w, t, up, reduction, ignore_index=-100):
    """F.cross_entropy on the full float64 logits of the (rounded) operands: (loss, dx, dw)."""
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = F.cross_entropy(xr @ wr.T, t, reduction=reduction, ignore_index=ignore_index)
    loss.backward(up if reduction == "none" else torch.tensor(1.7, dtype=torch.float64))
    return loss.detach(), xr.grad, wr.grad


def close(actual, expected, rel, what):
    actual, expected = actual.double(), expected.double()
    scale = max(expected.abs().max().item(), 1e-3) if expected.numel() else 1.0
    err = (actual - expected).abs().max().item() if expected.numel() else 0.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


def sharded(world, x, w, t, up, reduction, backend, ignore_index=-100, **kw):
    """Every rank's (loss, dx, dw shard) from fused_linear_cross_entropy(process_group=...)."""

    def rank_fn(rank, group):
        xr = x.clone().requires_grad_()
        wr = xt.shard_vocab(w, group).clone().requires_grad_()
        loss = xt.fused_linear_cross_entropy(xr, wr, t, reduction=reduction, ignore_index=ignore_index,
                                             backend=backend, process_group=group, **kw)
        loss.backward(up.to(loss.dtype) if reduction == "none" else torch.tensor(1.7, dtype=loss.dtype))
        return loss.detach(), xr.grad, wr.grad

    return run_ranks(world, rank_fn)


def check_ranks(results, expected, tol, name):
    loss, dx, dw = expected
    for r, (l_r, dx_r, _) in enumerate(results):  # every rank: the full loss and input gradient
        assert torch.equal(l_r, results[0][0]) and torch.equal(dx_r, results[0][1]), f"{name} rank {r}"
    close(results[0][0], loss, tol, f"{name} loss")
    close(results[0][1], dx, tol, f"{name} dx")
    close(torch.cat([res[2] for res in results]), dw, tol, f"{name} dw")


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sharded_forward_and_backward_match_cross_entropy(world, dtype, backend, reduction, kernel_calls):
    x, w, t, up = make_case(17 * world + len(reduction), bt=21, h=8, v=37)
    x, w = x.to(dtype), w.to(dtype)
    results = sharded(world, x, w, t, up, reduction, backend, chunk_size=8)
    check_ranks(results, oracle(x, w, t, up, reduction), TOL[dtype], f"{backend} {world} shards {reduction}")
    # reference: the kernels (3 token chunks per rank); cpu keeps its own GEMM path (flce_native) for these dtypes
    assert len(kernel_calls) == (3 * world if backend == "reference" else 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("chunk", [None, 160])
def test_cpu_path_leaves_ignored_tokens_out_on_every_rank_alike(dtype, reduction, chunk, kernel_calls):
    # 400 tokens, a quarter ignored: every rank gathers the same 300 (one chunk padded to 304, or two
    # of 160 and 140), so the per-chunk all-reduces pair up; NaN in an ignored row reaches no rank
    x, w, t, up = make_case(23, bt=400, h=8, v=37)
    x, w = x.to(dtype), w.to(dtype)
    x[1::4] = float("nan")
    results = sharded(2, x, w, t, up, reduction, "cpu", chunk_size=chunk)
    clean = torch.where((t == -100)[:, None], 0.0, x.double()).to(dtype)
    check_ranks(results, oracle(clean, w, t, up, reduction), TOL[dtype], f"cpu 2 shards {reduction} chunk {chunk}")
    assert not results[0][1][1::4].any()


def declares_online_max_sum(backend, dtype):
    for mask in ("bool", "bitpacked"):
        req = Request("fused_linear_online_max_sum", dtype, None,
                      {"logits": False, "mask": mask, "target_dtype": "int64"}, 1)
        try:
            registry.resolve(backend, req)
        except xloss.XLossError:
            continue
        return True
    return False


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("backend, dtype", [("ascend", torch.bfloat16), ("ft78ne", torch.float32),
                                            ("mt7004", torch.float16)], ids=["ascend-bf16", "ft78ne-f32", "mt7004-f16"])
def test_vendor_backends_through_their_vocabulary_parallel_operators(world, reduction, backend, dtype, kernel_calls):
    """The vendor emulators have no GEMM path of their own. Ascend: aclnnFusedLinearOnlineMaxSum per
    shard (a bit-packed mask), our all-reduce, aclnnFusedCrossEntropyLossWithMaxSum, then
    aclnnFusedLinearCrossEntropyLossGrad with the forward's mask and masked target; FT78NE/MT7004
    (ours) the same over their fused*maxsum functions."""
    if not declares_online_max_sum(backend, str(dtype).removeprefix("torch.")):
        pytest.skip(f"the {backend} backend does not declare fused_linear_online_max_sum (adapter or library missing)")
    x, w, t, up = make_case(31 * world + len(reduction), bt=21, h=8, v=37)
    x, w = x.to(dtype), w.to(dtype)
    results = sharded(world, x, w, t, up, reduction, backend, chunk_size=8)
    tol = {torch.float16: 4e-3}.get(dtype) or TOL[dtype]
    check_ranks(results, oracle(x, w, t, up, reduction), tol, f"{backend} {world} shards {reduction}")
    assert len(kernel_calls) == 3 * world


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_an_ignore_index_inside_the_vocabulary_and_an_empty_shard(reduction, kernel_calls):
    """ignore_index 2 is a class of shard 0 (the forward kernel does not mask it: the zero upstream
    gradient and the zeroed loss do); 3 classes over 4 ranks leave the last shard empty."""
    x, w, t, up = make_case(5, bt=13, h=4, v=3, ignore_index=2)
    results = sharded(4, x, w, t, up, reduction, "reference", ignore_index=2, chunk_size=5)
    assert results[3][2].shape == (0, 4)
    check_ranks(results, oracle(x, w, t, up, reduction, ignore_index=2), 1e-12, f"empty shard {reduction}")
    assert len(kernel_calls) == 4 * 3


def test_class_weights_and_vocabulary_blocks(kernel_calls):
    """Class weights scale the kernel's per-token loss and upstream gradient; a vocabulary block
    smaller than the shard splits the forward's mask for the gradient kernel's calls."""
    x, w, t, up = make_case(9, bt=19, h=5, v=23)
    cw = torch.rand(23, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    results = sharded(2, x, w, t, up, "mean", "reference", class_weight=cw, vocab_chunk_size=4, chunk_size=7)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = F.cross_entropy(xr @ wr.T, t, weight=cw)
    (loss * 1.7).backward()
    check_ranks(results, (loss.detach(), xr.grad, wr.grad), 1e-12, "class weights, blocks")
    assert len(kernel_calls) == 2 * 3


@pytest.mark.parametrize("grad", [False, True])
def test_one_process_is_one_shard(grad, kernel_calls):
    """Without a process group the same route runs on the whole vocabulary (the all-reduce a no-op)."""
    x, w, t, _ = make_case(8, bt=10, h=4, v=12)
    xr, wr = x.clone().requires_grad_(grad), w.clone().requires_grad_(grad)
    loss = xt.fused_linear_cross_entropy(xr, wr, t, backend="reference", reduction="sum")
    expected = oracle(x, w, t, None, "sum")
    close(loss.detach(), expected[0], 1e-12, "loss")
    if grad:
        (loss * 1.7).backward()
        close(xr.grad, expected[1], 1e-12, "dx")
        close(wr.grad, expected[2], 1e-12, "dw")
    assert len(kernel_calls) == 1


def test_what_the_kernels_do_not_compute_takes_the_torch_gemm_statistics(kernel_calls):
    """Bias, label smoothing and token accuracy: the statistics from PyTorch's GEMMs, as before."""
    x, w, t, up = make_case(3, bt=9, h=4, v=10)
    b = torch.randn(10, dtype=torch.float64)
    for kw in (dict(bias=b), dict(label_smoothing=0.1), dict(return_token_accuracy=True)):
        out = xt.fused_linear_cross_entropy(x, w, t, backend="reference", **kw)
        loss = out.loss if isinstance(out, tuple) else out
        z = x @ w.T + (b if "bias" in kw else 0.0)
        assert torch.allclose(loss, F.cross_entropy(z, t, label_smoothing=kw.get("label_smoothing", 0.0)))
    assert not kernel_calls


def _op_args(x, w, t, reduction, want, backend, native, start, vocab, group):
    """The FLCE op's arguments (flce.py builds the same), chunks of 8 tokens, one vocabulary block."""
    p = Params(reduction, -100, 0.0, 0.0, 0.0, 8, 1 << 20, start, vocab, xt.distributed.group_key(group), native,
               None, False, False)
    return (x, w, None, t, None, *p, *want, backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_the_cpu_backend_kernels_give_what_its_gemm_path_gives(dtype, reduction, kernel_calls):
    """The cpu backend serves fused_linear_cross_entropy from its own GEMM path (faster: see the
    notes); run the same op through its vocabulary-parallel kernels (native=False) on 2 shards."""
    x, w, t, up = make_case(11, bt=18, h=8, v=29)
    x, w = x.to(dtype), w.to(dtype)
    want = (True, True, False)

    def rank_fn(rank, group):
        ws = xt.shard_vocab(w, group).contiguous()
        start, _ = xt.vocab_shard_range(w.shape[0], 2, rank)
        args = _op_args(x, ws, t, reduction, want, "cpu", False, start, w.shape[0], group)
        out = torch.ops.xloss.fused_linear_cross_entropy(*args)
        mask, masked = out[8], out[9]  # the online max-sum kernel's, for the backward's gradient kernel
        stop = start + ws.shape[0]
        assert torch.equal(mask, (t < start) | (t >= stop)) and torch.equal(masked, torch.where(mask, 0, t - start))
        if reduction == "none":
            g = up.to(torch.float32)
            backward = torch.ops.xloss.fused_linear_cross_entropy_backward
            dx, dw, _ = backward(g, x, ws, None, t, None, out[3], out[4], mask, masked, None, None, None, *args[5:])
            # the backward reads the mask it is given: with every target masked the target terms vanish
            dx_all_masked = backward(g, x, ws, None, t, None, out[3], out[4], torch.ones_like(mask), masked, None,
                                     None, None, *args[5:])[0]
            assert not torch.equal(dx_all_masked, dx)
        else:
            dx, dw = out[5] * 1.7, out[6] * 1.7
        return out[0], dx, dw

    results = run_ranks(2, rank_fn)
    check_ranks(results, oracle(x, w, t, up, reduction), TOL[dtype], f"cpu kernels {reduction}")
    assert len(kernel_calls) == 2 * 3


# -- the two kernels as custom ops ----------------------------------------------------------------


def _max_sum_sample(dtype=torch.float32):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(11, 6, generator=g).to(dtype)
    w = torch.randn(9, 6, generator=g).to(dtype)
    t = torch.randint(0, 30, (11,), generator=g)
    return x, w, t


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("return_logits", [False, True])
@pytest.mark.parametrize("mask_format", ["bitpacked", "bool"])
def test_online_max_sum_op_is_the_kernel(backend, return_logits, mask_format):
    x, w, t = _max_sum_sample()
    got = torch.ops.xloss.fused_linear_online_max_sum(x, w, t, 5, 12, return_logits, mask_format, backend)
    want = xloss.fused_linear_online_max_sum(x, w, t, 5, 12, return_logits=return_logits, mask_format=mask_format,
                                             backend=backend)
    for a, b in zip(got[:5], want[:5]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(got[5], want[5]) if return_logits else got[5].shape == (0,)
    args = (x, w, t, 5, 12, return_logits, mask_format, backend)
    torch.library.opcheck(torch.ops.xloss.fused_linear_online_max_sum, args)


@pytest.mark.parametrize("with_logits", [False, True])
def test_loss_with_max_sum_op_is_the_kernel(with_logits):
    x, w, t = _max_sum_sample()
    s = xloss.fused_linear_online_max_sum(x, w, t, 0, return_logits=True, backend="reference")
    logits = s.vocab_parallel_logits if with_logits else None
    got = torch.ops.xloss.fused_cross_entropy_loss_with_max_sum(s.logits_max_local, s.sum_exp_logits_local,
                                                                s.predicted_logits_local, logits, 0.0, "cpu")
    want = xloss.fused_cross_entropy_loss_with_max_sum(s.logits_max_local, s.sum_exp_logits_local,
                                                       s.predicted_logits_local, vocab_parallel_logits=logits,
                                                       backend="cpu")
    assert torch.equal(got[0], want.loss)
    assert torch.equal(got[1], want.softmax) if with_logits else got[1].shape == (0,)
    torch.library.opcheck(torch.ops.xloss.fused_cross_entropy_loss_with_max_sum,
                          (s.logits_max_local, s.sum_exp_logits_local, s.predicted_logits_local, logits, 0.0, "cpu"))


def test_the_ops_bad_input_raises_naming_the_argument():
    x, w, t = _max_sum_sample()
    with pytest.raises(xloss.XLossError, match="vocab_start"):
        torch.ops.xloss.fused_linear_online_max_sum(x, w, t, -1, None, False, "bool", "cpu")
    with pytest.raises(xloss.XLossError, match="label_smoothing"):
        torch.ops.xloss.fused_cross_entropy_loss_with_max_sum(x[:, 0], x[:, 1].exp(), x[:, 2], None, 0.1, "cpu")


SHARDS = ((0, 5), (5, 9))


def test_the_megatron_flow_compiles_in_one_graph():
    """Two shards' statistics, the all-reduce written out, the loss: torch.compile(fullgraph=True)
    through the fake implementations gives the eager result (bf16 operands, bit-packed masks)."""
    x, w, t = _max_sum_sample(torch.bfloat16)

    def flow(x, w, t):
        stats = [torch.ops.xloss.fused_linear_online_max_sum(x, w[a:b], t, a, b, True, "bitpacked", "cpu")
                 for a, b in SHARDS]
        m = torch.maximum(stats[0][0], stats[1][0])
        s = sum(st[1] * torch.exp(st[0] - m) for st in stats)
        p = sum(torch.where((t >= a) & (t < b), st[2] + st[0] - m, 0.0) for st, (a, b) in zip(stats, SHARDS))
        loss, softmax = torch.ops.xloss.fused_cross_entropy_loss_with_max_sum(m, s, p, stats[1][5], 0.0, "cpu")
        return loss, softmax, stats[0][3], stats[1][4]

    t = t % 9
    eager = flow(x, w, t)
    compiled = torch.compile(flow, fullgraph=True, backend="aot_eager")(x, w, t)
    for a, b in zip(compiled, eager):
        assert a.dtype == b.dtype and torch.equal(a, b)
    full = x.double() @ w.double().T
    assert torch.allclose(eager[0].double(), torch.logsumexp(full, 1) - full.gather(1, t[:, None])[:, 0], atol=1e-5)
    assert {"fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"} <= set(ops.OPS)


@pytest.mark.parametrize("dynamic", [False, True])
def test_process_group_compiles_in_one_graph(dynamic):
    """Under torch.compile the ranks agree on the layout inside the ops (their first collective), so
    fullgraph=True traces the call, static and dynamic, with eager's loss and gradients; a setting that
    differs between the ranks still raises the same error on every rank, from inside the compiled op."""
    x, w, t, _ = make_case(4, bt=9, h=4, v=11)

    def rank_fn(rank, group):
        ws = xt.shard_vocab(w, group)

        def loss(x, ws, s):
            return xt.fused_linear_cross_entropy(x, ws, t, reduction="sum", process_group=group, backend="reference",
                                                 label_smoothing=s)

        results = []
        for fn in (torch.compile(loss, fullgraph=True, backend="eager", dynamic=dynamic), loss):
            xr, wr = x.clone().requires_grad_(), ws.clone().requires_grad_()
            out = fn(xr, wr, 0.125)
            out.backward()
            results.append((out.detach(), xr.grad, wr.grad))
        with pytest.raises(xloss.XLossError, match="label_smoothing"):  # rank 1 disagrees
            torch.compile(loss, fullgraph=True, backend="eager", dynamic=dynamic)(x, ws, 0.125 * (1 + rank))
        return results

    for (compiled, eager) in run_ranks(2, rank_fn):
        assert all(torch.equal(a, b) for a, b in zip(compiled, eager))
