"""xloss.torch.fused_linear_cross_entropy against PyTorch's F.cross_entropy(F.linear(...)) under
autograd in float64 (loss, input/weight/bias gradients), gradcheck, every backend and dtype,
the fixed edge cases, bounded memory, and the error messages."""


import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from peak_memory import track_peak_memory

import xloss
import xloss.torch as xt
from xloss.conformance import backends_declaring as backends_for

F64 = torch.float64
LOSS_DTYPE = {torch.bfloat16: torch.float32, torch.float16: torch.float32}  # 16-bit operands: float32 losses
REDUCTIONS = ["none", "mean", "sum"]


def problem(bt, h, v, *, seed=0, dtype=F64, ignore_every=0, bias=False, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(bt, h, generator=g, dtype=F64) * scale).to(dtype)
    w = (torch.randn(v, h, generator=g, dtype=F64) * scale).to(dtype)
    b = torch.randn(v, generator=g, dtype=F64).to(dtype) if bias else None
    t = torch.randint(0, v, (bt,), generator=g)
    if ignore_every:
        t[::ignore_every] = -100
    return x, w, b, t


def grads_of(fn, x, w, b, upstream_fn):
    leaves = [a.detach().clone().requires_grad_() for a in (x, w) + ((b,) if b is not None else ())]
    loss = fn(*leaves)
    loss.backward(upstream_fn(loss))
    return loss.detach(), [a.grad for a in leaves]


def compare(x, w, b, t, *, upstream=None, tol=1e-12, **kw):
    """Run ours (kw: everything fused_linear_cross_entropy takes) and PyTorch's in float64; assert agreement."""
    torch_kw = {k: kw[k] for k in ("reduction", "ignore_index", "label_smoothing") if k in kw}
    if kw.get("class_weight") is not None:
        torch_kw["weight"] = kw["class_weight"].to(F64)
    made = {}

    def up(loss):  # one upstream gradient, the same for both
        if "g" not in made:
            made["g"] = (upstream or torch.ones_like)(loss.detach().to(F64))
        return made["g"].to(loss.dtype)

    def ours(x, w, b=None):
        return xt.fused_linear_cross_entropy(x, w, t, b, **kw)

    def theirs(x, w, b=None):
        z = F.linear(x.to(F64), w.to(F64), None if b is None else b.to(F64))
        return F.cross_entropy(z, t.long(), **torch_kw)

    got_loss, got = grads_of(ours, x, w, b, up)
    exp_loss, exp = grads_of(theirs, x.to(F64), w.to(F64), None if b is None else b.to(F64), up)
    assert got_loss.shape == exp_loss.shape and got_loss.dtype == LOSS_DTYPE.get(x.dtype, x.dtype)
    # a token's loss is lse(z) - z_t, a difference of terms of size max|z|: a near-certain token's loss
    # (3.9e-9 at max|z| = 8 in float32) is below the precision of those terms, so its error is measured
    # against them, as the gradients' are
    z = F.linear(x.to(F64), w.to(F64), None if b is None else b.to(F64))
    z_size = z.abs().max().item() if z.numel() else 0.0
    close(got_loss, exp_loss, tol, "loss", floor=z_size * (t.numel() if kw.get("reduction") == "sum" else 1))
    # a gradient entry is a sum of terms of size about |g| * |x or w|, which can cancel to 0
    # (e.g. V = 1): errors are measured against that size, not only against the result
    terms = made["g"].abs().sum().item() * max(1.0, x.abs().max().item() if x.numel() else 0.0,
                                               w.abs().max().item() if w.numel() else 0.0)
    for name, a, e in zip(("input", "weight", "bias"), got, exp):
        assert a.dtype == x.dtype and a.shape == e.shape
        close(a, e, tol, f"{name} grad", floor=terms)


def close(actual, expected, rel, what, floor=0.0):
    actual, expected = actual.to(F64), expected.to(F64)
    assert torch.equal(torch.isnan(actual), torch.isnan(expected)), f"{what}: NaN pattern differs"
    a, e = actual[~torch.isnan(expected)], expected[~torch.isnan(expected)]
    if e.numel() == 0:
        return
    scale, err = max(e.abs().max().item(), floor), (a - e).abs().max().item()
    assert err <= rel * scale + 1e-300, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


@st.composite
def flce_case(draw):
    bt, h, v = draw(st.integers(0, 24)), draw(st.integers(1, 6)), draw(st.integers(1, 23))
    ignore = draw(st.sampled_from([-100, 0]))
    t = draw(st.lists(st.integers(0, v - 1) | st.just(ignore), min_size=bt, max_size=bt))
    return dict(
        bt=bt, h=h, v=v, t=t, ignore=ignore,
        reduction=draw(st.sampled_from(REDUCTIONS)),
        ls=draw(st.sampled_from([0.0, 0.1]) | st.floats(0, 0.9)),
        class_weight=draw(st.booleans()), bias=draw(st.booleans()),
        # at most about five chunks and five blocks: many tiny kernel calls only cost time
        chunk=draw(st.none() | st.integers(max(1, bt // 5), bt + 3)),
        block=draw(st.none() | st.integers(max(1, v // 5), v + 3)),
        seed=draw(st.integers(0, 2**16)), scale=draw(st.sampled_from([0.1, 1.0, 8.0])),
    )


@given(flce_case())
def test_matches_pytorch_cross_entropy_in_float64(c):
    x, w, b, _ = problem(c["bt"], c["h"], c["v"], seed=c["seed"], bias=c["bias"], scale=c["scale"])
    t = torch.tensor(c["t"], dtype=torch.int64)
    g = torch.Generator().manual_seed(c["seed"] + 1)
    cw = torch.rand(c["v"], generator=g, dtype=F64) + 0.2 if c["class_weight"] else None
    upstream = lambda loss: torch.rand(loss.shape, generator=g, dtype=F64) * 2 - 0.5
    compare(x, w, b, t, upstream=upstream, reduction=c["reduction"], ignore_index=c["ignore"],
            label_smoothing=c["ls"], class_weight=cw, chunk_size=c["chunk"], vocab_chunk_size=c["block"],
            backend="reference")


@given(flce_case())
def test_float32_native_path_matches_pytorch_in_float64(c):
    # float32 with the cpu backend runs xloss.torch.flce_native (PyTorch GEMMs, Numba row passes)
    x, w, b, _ = problem(c["bt"], c["h"], c["v"], seed=c["seed"], bias=c["bias"], scale=c["scale"])
    t = torch.tensor(c["t"], dtype=torch.int64)
    g = torch.Generator().manual_seed(c["seed"] + 1)
    cw = torch.rand(c["v"], generator=g, dtype=F64) + 0.2 if c["class_weight"] else None
    upstream = lambda loss: torch.rand(loss.shape, generator=g, dtype=F64) * 2 - 0.5
    compare(x.float(), w.float(), None if b is None else b.float(), t, upstream=upstream, reduction=c["reduction"],
            ignore_index=c["ignore"], label_smoothing=c["ls"], class_weight=cw, chunk_size=c["chunk"],
            vocab_chunk_size=c["block"], backend="cpu", tol=2e-5)


# -- fixed edge cases ----------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_every_token_ignored(reduction, ls):
    x, w, b, t = problem(5, 3, 7, bias=True)
    t[:] = -100
    compare(x, w, b, t, reduction=reduction, label_smoothing=ls, chunk_size=2, backend="reference")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_one_token(reduction):
    x, w, b, t = problem(1, 4, 9, bias=True)
    compare(x, w, b, t, reduction=reduction, label_smoothing=0.1, backend="reference")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_empty_batch(reduction):
    x, w, b, t = problem(0, 4, 9, bias=True)
    compare(x, w, b, t, reduction=reduction, backend="reference")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_tokens_and_vocabulary_not_divisible_by_the_chunks(reduction):
    x, w, b, t = problem(29, 5, 37, ignore_every=4, bias=True)
    compare(x, w, b, t, reduction=reduction, chunk_size=8, vocab_chunk_size=10, label_smoothing=0.05,
            backend="reference")


def test_single_class_and_ignore_index_inside_the_vocabulary():
    x, w, b, t = problem(6, 3, 1)
    compare(x, w, b, t, reduction="mean", backend="reference")
    x, w, b, t = problem(12, 3, 5, seed=3)
    compare(x, w, b, t, reduction="mean", ignore_index=2, chunk_size=5, backend="reference")


def test_batched_input_and_none_keeps_the_target_shape():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 4, generator=g, dtype=F64)
    w = torch.randn(6, 4, generator=g, dtype=F64)
    t = torch.randint(0, 6, (2, 3), generator=g)
    loss = xt.fused_linear_cross_entropy(x, w, t, reduction="none", backend="reference")
    assert loss.shape == (2, 3)
    exp = F.cross_entropy((x @ w.T).reshape(6, 6), t.reshape(-1), reduction="none").reshape(2, 3)
    close(loss, exp, 1e-13, "loss")


def test_large_logits_are_stable():
    x, w, b, t = problem(8, 4, 11, scale=30.0)  # logits in the thousands
    compare(x, w, b, t, reduction="sum", chunk_size=3, vocab_chunk_size=4, backend="reference")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("bt,chunk", [(45, 16), (400, None), (1200, 400)])
def test_cpu_path_leaves_ignored_tokens_out_whatever_their_hidden_states(dtype, reduction, bias, bt, chunk):
    # the cpu path runs no GEMM on ignored tokens (their outputs and gradient rows are 0 anyway) from
    # flce_native.COMPUTE_BOUND_ROWS tokens on, and zeroes them in smaller batches: NaN or inf in their hidden
    # states reaches no output, bit for bit the call with those rows zeroed. (400, None): one gathered
    # chunk of 300 tokens, padded; (1200, 400): three of 300, the last padded.
    x, w, b, t = problem(bt, 8, 21, seed=7, dtype=dtype, ignore_every=4, bias=bias, scale=0.5)
    dirty, clean = x.clone(), x.clone()
    dirty[::4] = float("nan")
    dirty[4::8, 0] = float("inf")
    clean[::4] = 0
    upstream = torch.tensor(1.0, dtype=F64) if reduction != "none" else torch.linspace(0.5, 1.5, bt, dtype=F64)

    def run(inp):
        leaves = [a.detach().clone().requires_grad_() for a in (inp, w) + ((b,) if bias else ())]
        loss = xt.fused_linear_cross_entropy(*leaves[:2], t, leaves[2] if bias else None, reduction=reduction,
                                             chunk_size=chunk, backend="cpu")
        loss.backward(upstream.to(loss.dtype))
        return [loss.detach()] + [a.grad for a in leaves]

    got, exp = run(dirty), run(clean)
    for name, a, e in zip(("loss", "input", "weight", "bias"), got, exp):
        assert torch.equal(a, e), name
    assert not got[1][::4].any()
    # and the clean call is PyTorch's (float32) or the documented 16-bit numerics
    if dtype == torch.float32:
        compare(clean, w, b, t, upstream=lambda loss: upstream.expand_as(loss), reduction=reduction,
                chunk_size=chunk, backend="cpu", tol=2e-5)
    else:
        exp_loss, want = half_reference(clean, w, b, t, upstream, reduction=reduction)
        close(got[0], exp_loss, 2e-6, "loss")
        for name, a, e in zip(("input", "weight", "bias"), got[1:], want):
            assert_within_ulps(a, e, 1, f"{name} grad", floor=e.abs().max().item() * 2**-14)


# -- gradcheck -------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ls,weighted", [(0.0, False), (0.15, False), (0.15, True)])
def test_gradcheck_float64(reduction, ls, weighted):
    x, w, b, t = problem(7, 3, 5, ignore_every=3, bias=True, seed=11)
    cw = torch.tensor([0.5, 1.0, 2.0, 0.7, 1.3], dtype=F64) if weighted else None
    args = tuple(a.requires_grad_() for a in (x, w, b))
    fn = lambda x, w, b: xt.fused_linear_cross_entropy(x, w, t, b, reduction=reduction, label_smoothing=ls,
                                                       class_weight=cw, chunk_size=3, vocab_chunk_size=2,
                                                       backend="reference")
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize("backend", backends_for("fused_linear_cross_entropy_grad", "float64"))
def test_gradcheck_float64_every_backend(backend):
    x, w, _, t = problem(6, 3, 7, ignore_every=4, seed=12)
    args = (x.requires_grad_(), w.requires_grad_())
    for reduction in ("none", "mean"):
        def fn(x, w, reduction=reduction):
            return xt.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_size=4, backend=backend)

        assert torch.autograd.gradcheck(fn, args)


# -- every backend and dtype -------------------------------------------------------------------

TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}
CASES = [(dt, b) for dt in ("float32", "float16", "bfloat16")
         for b in backends_for("fused_linear_cross_entropy_grad", dt)]


@pytest.mark.parametrize("dtype,backend", CASES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_backend_and_dtype_against_float64(dtype, backend, reduction):
    # the oracle sees the same rounded inputs; the tolerance covers the 16-bit rounding of the
    # kernel's outputs (and, for Ascend, of G before its products)
    x, w, b, t = problem(21, 8, 27, ignore_every=5, bias=True, dtype=getattr(torch, dtype), seed=7, scale=0.7)
    compare(x, w, b, t, reduction=reduction, label_smoothing=0.1, chunk_size=8, vocab_chunk_size=10,
            backend=backend, tol=TOL[dtype])


# -- autograd behaviour ------------------------------------------------------------------------


def test_scalar_upstream_scales_the_precomputed_gradients_and_retain_graph_works():
    x, w, b, t = problem(9, 4, 6, ignore_every=4, bias=True)
    leaves = [a.requires_grad_() for a in (x, w, b)]
    loss = xt.fused_linear_cross_entropy(x, w, t, b, backend="reference")
    grads1 = torch.autograd.grad(loss * 2.5, leaves, retain_graph=True)
    grads2 = torch.autograd.grad(loss, leaves)
    for g1, g2 in zip(grads1, grads2):
        close(g1, 2.5 * g2, 1e-15, "scaled grad")


def test_no_grad_and_frozen_weight():
    x, w, b, t = problem(10, 4, 6)
    with torch.no_grad():
        out = xt.fused_linear_cross_entropy(x.requires_grad_(), w, t, backend="reference")
    assert out.grad_fn is None
    close(out, F.cross_entropy(x.detach() @ w.T, t), 1e-14, "loss")
    x.grad = None
    loss = xt.fused_linear_cross_entropy(x, w, t, reduction="sum", backend="reference")  # w is frozen
    loss.backward()
    xr = x.detach().clone().requires_grad_()
    F.cross_entropy(xr @ w.T, t, reduction="sum").backward()
    close(x.grad, xr.grad, 1e-13, "input grad")


def test_module_matches_function():
    x, w, b, t = problem(12, 4, 9, ignore_every=5, bias=True)
    cw = torch.rand(9, dtype=F64) + 0.5
    mod = xt.FusedLinearCrossEntropyLoss(reduction="sum", label_smoothing=0.1, class_weight=cw, chunk_size=5,
                                         backend="reference")
    assert mod.class_weight is cw and "label_smoothing=0.1" in repr(mod)
    a = mod(x, w, t, b)
    e = xt.fused_linear_cross_entropy(x, w, t, b, reduction="sum", label_smoothing=0.1, class_weight=cw,
                                      chunk_size=5, backend="reference")
    assert torch.equal(a, e)


# -- memory ---------------------------------------------------------------------------------------


def peak_bytes(bt, h, v, chunk, reduction):
    x, w, _, t = problem(bt, h, v, dtype=torch.float32, seed=1, scale=0.3)
    x.requires_grad_()
    w.requires_grad_()
    xt.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_size=chunk, backend="reference").sum().backward()
    x.grad = w.grad = None
    with track_peak_memory() as peak:
        xt.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_size=chunk, vocab_chunk_size=v,
                                      backend="reference").sum().backward()
    return peak.bytes


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_peak_memory_is_bounded_by_the_chunk_not_by_tokens_times_vocabulary(reduction):
    h, v, chunk = 16, 2048, 64
    small, large = peak_bytes(256, h, v, chunk, reduction), peak_bytes(1024, h, v, chunk, reduction)
    logits_bytes = 1024 * v * 4
    # 4x the tokens costs only the extra input gradient (and per-token vectors), not 4x logits
    assert large - small < 8 * (1024 - 256) * (h + 16), (small, large)
    # everything held at once: the weight gradient, the input gradient, a few chunk-sized
    # tiles (logits/softmax, the reference backend's float64 copies) — far below the logits
    bound = 8 * (v * h + 1024 * h) + 6 * 8 * chunk * v
    assert large < bound < logits_bytes, (large, bound, logits_bytes)


# -- errors --------------------------------------------------------------------------------------


def test_errors_name_the_argument():
    x, w, b, t = problem(4, 3, 5, bias=True)
    fn = xt.fused_linear_cross_entropy
    with pytest.raises(xloss.XLossTypeError, match="weight has dtype"):
        fn(x, w.float(), t)
    with pytest.raises(xloss.XLossValueError, match=r"weight must have shape \(V, 3\)"):
        fn(x, w[:, :2], t)
    with pytest.raises(xloss.XLossValueError, match="bias"):
        fn(x, w, t, b[:3])
    with pytest.raises(xloss.XLossValueError, match="target must have shape"):
        fn(x, w, t[:3])
    with pytest.raises(xloss.XLossTypeError, match="target"):
        fn(x, w, t.double())
    with pytest.raises(xloss.XLossIndexError, match=r"target\[2\] = 5"):
        fn(x, w, torch.tensor([0, 1, 5, 2]))
    with pytest.raises(xloss.XLossValueError, match="label_smoothing"):
        fn(x, w, t, label_smoothing=1.0)
    with pytest.raises(xloss.XLossValueError, match="chunk_size"):
        fn(x, w, t, chunk_size=0)
    with pytest.raises(xloss.XLossValueError, match="vocab_chunk_size"):
        fn(x, w, t, vocab_chunk_size=-1)
    with pytest.raises(xloss.XLossValueError, match="class_weight"):
        fn(x, w, t, class_weight=torch.ones(4, dtype=F64))
    with pytest.raises(xloss.XLossValueError, match="reduction"):
        fn(x, w, t, reduction="batchmean")
    with pytest.raises(xloss.XLossValueError, match="no rows"):
        fn(x, w[:0], t)
    with pytest.raises(xloss.UnsupportedRequestError, match="ascend"):
        fn(x.float().requires_grad_(), w.float(), t, backend="ascend")  # Ascend's kernel takes 16-bit only


# -- 16-bit operands on the native path (xloss.torch.flce_native) --------------------------------

from xloss.errors import UnsupportedRequestError  # noqa: E402
from xloss.torch import flce_native  # noqa: E402

HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def half_reference(x, w, b, t, upstream, *, reduction, ignore_index=-100, label_smoothing=0.0,
                   class_weight=None):
    """The documented 16-bit numerics, in float64: logits never rounded to 16 bits (issue #29: the loss
    within float32 rounding of float64's), G = dloss/dlogits (upstream folded in) rounded once to the
    operand dtype, each product rounded once; the bias gradient sums the unrounded G."""
    dt = x.dtype
    X, W = x.to(F64), w.to(F64)
    z = X @ W.T + (0.0 if b is None else b.to(F64))
    z.requires_grad_()
    loss = F.cross_entropy(z, t, weight=class_weight, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=label_smoothing)
    loss.backward(upstream)
    G = z.grad.to(dt).to(F64)
    return loss.detach(), ((G @ W).to(dt), (G.T @ X).to(dt), None if b is None else z.grad.sum(0).to(dt))


def assert_within_ulps(actual, expected, ulps, what, floor):
    """|actual - expected| <= ulps * ulp(expected) elementwise, plus ``floor`` (absolute) for
    entries that cancel towards 0."""
    e = expected.to(F64)
    ulp = torch.finfo(expected.dtype).eps * e.abs().clamp_min(torch.finfo(expected.dtype).tiny)
    err = (actual.to(F64) - e).abs()
    bad = err > ulps * ulp + floor
    assert not bad.any(), (f"{what}: {int(bad.sum())} entries beyond {ulps} ulp (+{floor:.2g}); worst error "
                           f"{err.max().item():.3g} at |expected| {e.abs().flatten()[err.argmax()].item():.3g}")


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("reduction,up", [("mean", 1.0), ("mean", 0.3), ("sum", 0.25), ("none", None)])
@pytest.mark.parametrize("chunk,bias", [(None, True), (1, True), (5, False), (None, False)])
def test_half_gradients_are_rounded_once_whatever_the_chunks(dtype, reduction, up, chunk, bias):
    # many chunks would add one rounding of each chunk's dW partial: at chunk 1 (40 partials)
    # that is several ulps; accumulated in float32 the result stays within 1 ulp of the
    # once-rounded products of the once-rounded G
    dt = HALF[dtype]
    # (without a bias gradient, bf16 takes the Numba row passes where Numba is installed)
    x, w, b, t = problem(40, 12, 30, seed=3, dtype=dt, ignore_every=6, bias=bias, scale=0.6)
    g = torch.Generator().manual_seed(4)
    upstream = torch.rand(40, generator=g, dtype=F64) + 0.5 if up is None else torch.tensor(up, dtype=F64)
    leaves = [a.detach().clone().requires_grad_() for a in (x, w) + ((b,) if bias else ())]
    loss = xt.fused_linear_cross_entropy(*leaves[:2], t, leaves[2] if bias else None, reduction=reduction,
                                         chunk_size=chunk, vocab_chunk_size=7)
    loss.backward(upstream.to(loss.dtype))
    exp_loss, exp = half_reference(x, w, b, t, upstream, reduction=reduction)
    assert loss.dtype == torch.float32 and [a.grad.dtype for a in leaves] == [dt] * len(leaves)
    close(loss.detach(), exp_loss, 2e-6, "loss")
    for name, a, e in zip(("input", "weight", "bias"), leaves, exp):
        assert_within_ulps(a.grad, e, 1, f"{name} grad", floor=e.abs().max().item() * 2**-14)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_label_smoothing_class_weight_and_ignore_index(dtype):
    dt = HALF[dtype]
    x, w, b, t = problem(25, 8, 19, seed=5, dtype=dt, bias=True, scale=0.8)
    t[::4] = 3  # ignore_index inside the vocabulary
    cw = torch.rand(19, generator=torch.Generator().manual_seed(6), dtype=F64) + 0.3
    for reduction in REDUCTIONS:
        upstream = torch.tensor(1.0, dtype=F64) if reduction != "none" else torch.linspace(0.5, 1.5, 25, dtype=F64)
        leaves = [a.detach().clone().requires_grad_() for a in (x, w, b)]
        loss = xt.fused_linear_cross_entropy(*leaves[:2], t, leaves[2], ignore_index=3, reduction=reduction,
                                             label_smoothing=0.15, class_weight=cw.float(), chunk_size=6,
                                             vocab_chunk_size=8)
        loss.backward(upstream.float())
        exp_loss, exp = half_reference(x, w, b, t, upstream, reduction=reduction,
                                       ignore_index=3, label_smoothing=0.15, class_weight=cw.float().to(F64))
        close(loss.detach(), exp_loss, 2e-6, f"{reduction} loss")
        for name, a, e in zip(("input", "weight", "bias"), leaves, exp):
            assert_within_ulps(a.grad, e, 1, f"{reduction} {name} grad", floor=e.abs().max().item() * 2**-14)


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_sixteen_bit_logits_are_never_rounded_to_sixteen_bits(dtype, reduction):
    # issue #29's case: logits up to ~20. Rounded to bf16 (8 bits) before the softmax they cost the loss
    # 3e-2; kept in float32 the loss is float64's within float32 rounding (the reference backend's order),
    # and each gradient is within one rounding of the products of G rounded once
    dt = HALF[dtype]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g).to(dt)
    w = (torch.randn(1000, 256, generator=g) * 0.2).to(dt)
    t = torch.randint(0, 1000, (64,), generator=g)
    t[::9] = -100
    upstream = torch.linspace(0.5, 1.5, 64, dtype=F64) if reduction == "none" else torch.tensor(1.0, dtype=F64)
    leaves = [a.detach().clone().requires_grad_() for a in (x, w)]
    loss = xt.fused_linear_cross_entropy(*leaves, t, reduction=reduction, backend="cpu")
    loss.backward(upstream.float())
    exp_loss, exp = half_reference(x, w, None, t, upstream, reduction=reduction)
    assert exp_loss.abs().max() > 10  # (logits large enough for bf16 rounding to show)
    close(loss.detach(), exp_loss, 1e-6, "loss")
    for name, a, e in zip(("input", "weight"), leaves, exp):
        assert_within_ulps(a.grad, e, 1, f"{name} grad", floor=e.abs().max().item() * 2**-14)


def _opinfo_like_samples(dt, seed):
    """The class-index samples of PyTorch's OpInfo ``linear_cross_entropy`` with 2-D inputs (its
    sample_inputs_linear feature sizes and option sets, values uniform in [-2, 2), class weights in
    [0.5, 2)), for one seed. (OpInfo's expecttest-based harness is not a test dependency here.)"""
    g = torch.Generator().manual_seed(seed)

    def make(*shape, low=-2.0, high=2.0):
        return (torch.rand(shape, generator=g, dtype=F64) * (high - low) + low).to(dt)

    settings = [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 1}, {"bias": True},
                *({"weight": True, "reduction": r} for r in REDUCTIONS),
                {"bias": True, "weight": True, "reduction": "sum"}]
    shapes = [((h, v), batch) for h, v in ((3, 4), (8, 8)) for batch in ((8,), (1,))]
    for (h, v), batch in shapes:
        for kw in settings:
            x, w = make(*batch, h), make(v, h)
            t = torch.randint(0, v, batch, generator=g)
            if kw.get("ignore_index") == 1 and bool((t == 1).all()):
                t.view(-1)[0] = 0
            b = make(v) if kw.get("bias") else None
            cw = make(v, low=0.5, high=2.0) if kw.get("weight") else None
            yield x, w, t, b, cw, kw.get("reduction", "mean"), kw.get("ignore_index", -100)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_opinfo_linear_cross_entropy_samples_under_pytorchs_rule(dtype):
    # PyTorch's rule for an alternative implementation: no farther from float64 than torch's own result
    # (here: elementwise, allowing the float32 rounding of our float32 loss), over its 16-bit samples
    dt = HALF[dtype]
    failures = []
    for seed in range(4):
        for i, (x, w, t, b, cw, reduction, ignore) in enumerate(_opinfo_like_samples(dt, seed)):
            kw = dict(reduction=reduction, ignore_index=ignore)
            exact = F.linear_cross_entropy(x.to(F64), w.to(F64), t, linear_bias=None if b is None else b.to(F64),
                                           weight=None if cw is None else cw.to(F64), **kw)
            theirs = F.linear_cross_entropy(x, w, t, linear_bias=b, weight=cw, **kw).to(F64)
            ours = xt.fused_linear_cross_entropy(x, w, t, b, class_weight=None if cw is None else cw.float(),
                                                 backend="cpu", **kw).to(F64)
            slack = torch.finfo(torch.float32).eps * exact.abs()
            if ((ours - exact).abs() > (theirs - exact).abs() + slack).any():
                failures.append((seed, i, (ours - exact).abs().max().item(), (theirs - exact).abs().max().item()))
    assert not failures, failures


def test_half_takes_the_numba_row_passes_where_numba_is_installed():
    pytest.importorskip("numba")
    assert flce_native.row_passes() is not None


def test_half_label_smoothing_class_weight_without_bias_on_the_row_passes():
    x, w, _, t = problem(25, 8, 19, seed=9, dtype=torch.bfloat16, scale=0.8)
    t[::5] = -100
    cw = torch.rand(19, generator=torch.Generator().manual_seed(6), dtype=F64) + 0.3
    for reduction in REDUCTIONS:
        upstream = torch.tensor(1.0, dtype=F64) if reduction != "none" else torch.linspace(0.5, 1.5, 25, dtype=F64)
        leaves = [a.detach().clone().requires_grad_() for a in (x, w)]
        loss = xt.fused_linear_cross_entropy(*leaves, t, reduction=reduction, label_smoothing=0.2,
                                             class_weight=cw.float(), chunk_size=9)
        loss.backward(upstream.float())
        exp_loss, exp = half_reference(x, w, None, t, upstream, reduction=reduction, label_smoothing=0.2,
                                       class_weight=cw.float().to(F64))
        close(loss.detach(), exp_loss, 2e-6, f"{reduction} loss")
        for name, a, e in zip(("input", "weight"), leaves, exp):
            assert_within_ulps(a.grad, e, 1, f"{reduction} {name} grad", floor=e.abs().max().item() * 2**-14)


def test_half_scale_is_exact_only_for_powers_of_two():
    assert flce_native.exact_scale(torch.bfloat16, 1.0) and flce_native.exact_scale(torch.bfloat16, 2.0**-20)
    assert flce_native.exact_scale(torch.float16, 1024.0) and not flce_native.exact_scale(torch.float16, 0.5)
    assert not flce_native.exact_scale(torch.bfloat16, 0.3) and flce_native.exact_scale(torch.float16, 0.0)


@pytest.mark.parametrize("bias", [False, True])
def test_autocast_runs_in_bfloat16_like_the_stock_path(bias):
    # stock under autocast: F.linear in bf16 (bf16 logits), cross_entropy upcast to float32; ours takes
    # the same bf16 operands but never rounds the logits (issue #29): float64's loss of those operands
    x, w, b, t = problem(30, 16, 45, seed=8, dtype=torch.float32, bias=bias, ignore_every=7)
    ours, theirs = [[a.detach().clone().requires_grad_() for a in (x, w) + ((b,) if bias else ())] for _ in "12"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = xt.fused_linear_cross_entropy(ours[0], ours[1], t, ours[2] if bias else None)
        stock = F.cross_entropy(F.linear(*theirs), t)
    assert loss.dtype == stock.dtype == torch.float32
    exact = F.cross_entropy(F.linear(*(a.detach().to(torch.bfloat16).to(F64) for a in theirs)), t)
    close(loss.detach(), exact, 1e-6, "loss")
    close(stock.detach(), exact, 2**-7, "stock loss")  # (the bf16 logits' error, which ours has not)
    loss.backward()
    stock.backward()
    for name, a, e in zip(("input", "weight", "bias"), ours, theirs):
        assert a.grad.dtype == torch.float32
        close(a.grad, e.grad, 2**-7, f"{name} grad")  # G and the products in bf16 on both sides


def test_second_order_gradients_raise_a_clear_error():
    x, w, b, t = problem(6, 4, 5, bias=True)
    for dt, reduction in ((F64, "mean"), (torch.bfloat16, "none")):
        leaves = [a.to(dt).requires_grad_() for a in (x, w, b)]
        loss = xt.fused_linear_cross_entropy(leaves[0], leaves[1], t, leaves[2], reduction=reduction).sum()
        with pytest.raises(UnsupportedRequestError, match="second-order gradients"):
            torch.autograd.grad(loss, leaves, create_graph=True)
        assert all(g is not None for g in torch.autograd.grad(loss, leaves))  # first order still works


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_row_passes_run_under_the_cpu_backends_own_options(dtype, monkeypatch):
    """The torch path's Numba row passes are launched by the backend object the caller passed: its
    thread count (Numba's per-thread setting, read inside the pass) and its launch context, once per
    pass; the result equals the default backend's bit for bit (each row is one task)."""
    numba = pytest.importorskip("numba")
    if dtype == torch.bfloat16 and not flce_native.native_gemm(dtype):
        pytest.skip("no native bf16 GEMM here: bf16 takes the float32 passes")
    one = xloss.backend("cpu", threads=1)
    seen = []
    real = type(one)._thread_count

    def counting(self):
        seen.append(self)
        return real(self)

    monkeypatch.setattr(type(one), "_thread_count", counting)
    rows = flce_native.row_passes(one)
    inner = rows._rows.row_stats
    monkeypatch.setattr(rows._rows, "row_stats", lambda *a: (seen.append(numba.get_num_threads()), inner(*a)))
    monkeypatch.setattr(flce_native, "row_passes", lambda backend=None: rows if backend is one else None)
    x, w, _, t = problem(40, 16, 50, seed=3, dtype=dtype)
    got = xt.fused_linear_cross_entropy(x.requires_grad_(), w, t, backend=one)
    got.backward()
    assert seen.count(one) >= 2 and 1 in seen  # statistics and G, each under threads=1
    monkeypatch.undo()
    x2 = x.detach().clone().requires_grad_()
    ref = xt.fused_linear_cross_entropy(x2, w, t, backend="cpu")
    ref.backward()
    assert torch.equal(got, ref) and torch.equal(x.grad, x2.grad)


def test_the_gemm_route_is_the_backends_offer_not_its_name():
    """A backend of any name that offers row passes takes the PyTorch-GEMM route (it needs no FLCE kernel
    then); one that offers none is driven through its kernels, which it must declare."""
    pytest.importorskip("numba")
    from xloss.torch.flce import gemm_route

    cpu = xloss.backend("cpu")

    class RowsOnly(xloss.Backend):
        def capabilities(self):
            return {}

        def flce_row_passes(self):
            return cpu.flce_row_passes()

    class NoRows(RowsOnly):
        flce_row_passes = xloss.Backend.flce_row_passes

    rows_only, no_rows = RowsOnly(name="rows-only"), NoRows(name="no-rows")
    assert gemm_route(rows_only) and not gemm_route(no_rows) and gemm_route(None) and gemm_route("cpu")
    assert not gemm_route("reference")
    x, w, _, t = problem(30, 8, 40, seed=4, dtype=torch.float32)
    got = xt.fused_linear_cross_entropy(x, w, t, backend=rows_only)
    assert torch.equal(got, xt.fused_linear_cross_entropy(x, w, t, backend="cpu"))
    with pytest.raises(xloss.UnsupportedRequestError, match="no-rows"):  # its kernel computes the gradient
        xt.fused_linear_cross_entropy(x.requires_grad_(), w, t, backend=no_rows)
