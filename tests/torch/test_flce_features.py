"""The fused linear-cross-entropy's Liger-Kernel-style options — soft-capping, z-loss
(``lse_square_scale``, ``return_z_loss``), ``accum_dtype``, token accuracy — against PyTorch
autograd through materialised logits in float64; the weight-first Liger-compatible module;
probability targets refused."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
import xloss.torch as xt
from xloss.conformance import backends_declaring
from xloss.errors import UnsupportedRequestError

F64 = torch.float64


def torch_reference(x, w, b, t, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, class_weight=None,
                    softcap=None, lse_square_scale=0.0, use_token_scaling=False):
    """Liger-Kernel's semantics in torch operations (x, w, b carry the graph): (loss, z_loss, accuracy)."""
    z = F.linear(x, w, b)
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    valid = t != ignore_index
    ce = F.cross_entropy(z, t, weight=class_weight, ignore_index=ignore_index, reduction="none",
                         label_smoothing=label_smoothing)
    zl = torch.where(valid, lse_square_scale * torch.logsumexp(z, 1) ** 2, 0.0)
    if use_token_scaling:  # times the target's probability, detached
        s = torch.where(valid, torch.softmax(z.detach(), 1).gather(1, torch.where(valid, t, 0)[:, None])[:, 0], 0.0)
        ce, zl = ce * s, zl * s
    correct = (valid & (z.argmax(1) == t)).float()
    if reduction == "none":
        return ce + zl, zl, correct
    count = valid.sum()
    acc = correct.sum() / count
    if reduction == "sum":
        return ce.sum() + zl.sum(), zl.sum(), acc
    cw = torch.ones(w.shape[0], dtype=z.dtype) if class_weight is None else class_weight
    w_sum = torch.where(valid, cw[torch.where(valid, t, 0)], 0.0).sum()
    return ce.sum() / w_sum + zl.sum() / count, zl.sum() / count, acc


def problem(bt, h, v, seed, *, scale=1.0, bias=False, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(bt, h, generator=g, dtype=F64) * scale).to(dtype)
    w = (torch.randn(v, h, generator=g, dtype=F64) * scale).to(dtype)
    b = torch.randn(v, generator=g, dtype=F64).to(dtype) if bias else None
    return x, w, b, g


def check(x, w, b, t, upstream, *, tol, grad_tol=None, fused_kw=None, **kw):
    """Ours (every output, every gradient) against torch_reference in float64."""
    leaves = [a.detach().clone().requires_grad_() for a in (x, w) + ((b,) if b is not None else ())]
    out = xt.fused_linear_cross_entropy(leaves[0], leaves[1], t, leaves[2] if b is not None else None,
                                        return_z_loss=True, return_token_accuracy=True, **(fused_kw or {}), **kw)
    ref_leaves = [a.detach().to(F64).requires_grad_() for a in leaves]
    cw = kw.get("class_weight")
    ref = torch_reference(ref_leaves[0], ref_leaves[1], ref_leaves[2] if b is not None else None, t,
                          **{**kw, "class_weight": None if cw is None else cw.to(F64)})
    assert isinstance(out, xt.FusedLinearCrossEntropyOutput) and out.z_loss.requires_grad is False
    for got, exp, what in zip(out, ref, ("loss", "z_loss", "token_accuracy")):
        assert got.shape == exp.shape, what
        torch.testing.assert_close(got.to(F64), exp.detach().to(F64), rtol=tol, atol=tol, equal_nan=True, msg=what)
    up = upstream(out.loss)
    got = torch.autograd.grad(out.loss, leaves, up.to(out.loss.dtype))
    exp = torch.autograd.grad(ref[0], ref_leaves, up.to(F64))
    for a, e, what in zip(got, exp, ("input", "weight", "bias")):
        assert a.dtype == x.dtype
        scale = max(1.0, e.abs().max().item() if e.numel() else 0.0)
        torch.testing.assert_close(a.to(F64), e, rtol=grad_tol or tol, atol=(grad_tol or tol) * scale, msg=what)


@st.composite
def case(draw):
    bt, h, v = draw(st.integers(1, 20)), draw(st.integers(1, 6)), draw(st.integers(1, 19))
    t = draw(st.lists(st.integers(0, v - 1) | st.just(-100), min_size=bt, max_size=bt))
    return dict(bt=bt, h=h, v=v, t=t, seed=draw(st.integers(0, 2**16)),
                scale=draw(st.sampled_from([0.3, 1.0, 4.0])), bias=draw(st.booleans()),
                reduction=draw(st.sampled_from(["none", "mean", "sum"])), ls=draw(st.sampled_from([0.0, 0.15])),
                weighted=draw(st.booleans()), softcap=draw(st.sampled_from([None, 0.5, 3.0, 30.0])),
                z=draw(st.sampled_from([0.0, 1e-4, 0.2])),
                chunk=draw(st.none() | st.integers(max(1, bt // 4), bt + 2)),
                block=draw(st.none() | st.integers(max(1, v // 4), v + 2)),
                backend=draw(st.sampled_from([None, "cpu"])), scaling=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(case())
def test_softcap_z_loss_and_accuracy_match_autograd_in_float64(c):
    x, w, b, g = problem(c["bt"], c["h"], c["v"], c["seed"], scale=c["scale"], bias=c["bias"])
    t = torch.tensor(c["t"], dtype=torch.int64)
    cw = torch.rand(c["v"], generator=g, dtype=F64) + 0.2 if c["weighted"] else None
    check(x, w, b, t, lambda loss: torch.rand(loss.shape, generator=g, dtype=F64) + 0.5, tol=1e-11,
          fused_kw=dict(chunk_size=c["chunk"], vocab_chunk_size=c["block"], backend=c["backend"]),
          reduction=c["reduction"], label_smoothing=c["ls"], class_weight=cw, softcap=c["softcap"],
          lse_square_scale=c["z"], use_token_scaling=c["scaling"])


@pytest.mark.parametrize("dtype,tol,grad_tol", [(torch.float32, 2e-5, 2e-5), (torch.bfloat16, 2e-5, 2**-6)])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_options_on_the_32_and_16_bit_paths(dtype, tol, grad_tol, reduction):
    # the oracle sees the same rounded operands; 16-bit: the logits and G are rounded to bf16 once each
    x, w, b, g = problem(23, 8, 29, 7, scale=0.7, bias=True, dtype=dtype)
    t = torch.randint(0, 29, (23,), generator=g)
    t[::5] = -100
    check(x, w, b, t, lambda loss: torch.rand(loss.shape, generator=g, dtype=F64) + 0.5,
          tol=tol if dtype == torch.float32 else 2e-2, grad_tol=grad_tol, fused_kw=dict(chunk_size=7),
          reduction=reduction, label_smoothing=0.1, softcap=2.0, lse_square_scale=1e-3, use_token_scaling=True)


def test_token_accuracy_on_every_backend_and_ties_take_the_first_maximum():
    # rows whose logits tie: argmax is the first maximum, as torch.argmax (and Liger-Kernel)
    x = torch.tensor([[1.0], [1.0], [0.0], [2.0]], dtype=F64)
    w = torch.tensor([[1.0], [1.0], [0.5]], dtype=F64)  # logits of rows 0, 1: (1, 1, 0.5): a tie of 0 and 1
    t = torch.tensor([0, 1, 2, -100])  # row 2: all logits 0, the first (0) is the argmax
    for backend in backends_declaring("fused_linear_cross_entropy_grad", "float64"):
        for chunk, block in ((None, None), (1, 1), (2, 2)):
            out = xt.fused_linear_cross_entropy(x, w, t, reduction="none", return_token_accuracy=True,
                                                chunk_size=chunk, vocab_chunk_size=block, backend=backend)
            assert out.z_loss is None and out.token_accuracy.dtype == torch.float32
            assert out.token_accuracy.tolist() == [1.0, 0.0, 0.0, 0.0], (backend, chunk, block)
            acc = xt.fused_linear_cross_entropy(x, w, t, reduction="sum", return_token_accuracy=True,
                                                backend=backend).token_accuracy
            assert acc.item() == pytest.approx(1 / 3)  # the mean over the tokens not ignored, for sum too


def test_accum_dtype():
    x, w, b, g = problem(40, 16, 30, 3, bias=True, dtype=torch.float32)
    t = torch.randint(0, 30, (40,), generator=g)
    grads = {}
    for accum in (None, torch.float32, torch.bfloat16, torch.float64):
        leaves = [a.clone().requires_grad_() for a in (x, w, b)]
        loss = xt.fused_linear_cross_entropy(*leaves[:2], t, leaves[2], chunk_size=7, accum_dtype=accum)
        grads[accum] = torch.autograd.grad(loss, leaves)
        assert [a.dtype for a in grads[accum]] == [torch.float32] * 3  # returned in the operands' dtype
    for accum in (torch.float32, torch.bfloat16):  # float32 accumulation already: the same call
        assert all(torch.equal(a, e) for a, e in zip(grads[accum], grads[None]))
    ref = [a.to(F64).requires_grad_() for a in (x, w, b)]
    exp = torch.autograd.grad(F.cross_entropy(F.linear(*ref), t), ref)
    for a, e in zip(grads[torch.float64], exp):
        torch.testing.assert_close(a.double(), e, rtol=2e-5, atol=1e-7)
    with pytest.raises(xloss.XLossTypeError, match="accum_dtype"):
        xt.fused_linear_cross_entropy(x, w, t, accum_dtype="float64")
    with pytest.raises(UnsupportedRequestError, match="accum_dtype"):
        xt.fused_linear_cross_entropy(x, w, t, accum_dtype=torch.float64, backend="reference")


def test_options_on_the_module_and_refused_where_they_cannot_run():
    x, w, _, g = problem(5, 3, 4, 1)
    t = torch.randint(0, 4, (5,), generator=g)
    for kw in (dict(softcap=5.0), dict(lse_square_scale=1e-4), dict(use_token_scaling=True)):
        with pytest.raises(UnsupportedRequestError, match="backend 'reference'"):
            xt.fused_linear_cross_entropy(x, w, t, backend="reference", **kw)
    mod = xt.FusedLinearCrossEntropyLoss(softcap=5.0, lse_square_scale=1e-4, use_token_scaling=True,
                                         return_token_accuracy=True)
    out = mod(x, w, t)
    ref = torch_reference(x, w, None, t, softcap=5.0, lse_square_scale=1e-4, use_token_scaling=True)
    torch.testing.assert_close(out.loss, ref[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(out.token_accuracy, ref[2], rtol=0, atol=0)
    assert "softcap=5.0" in repr(mod)
    with pytest.raises(xloss.XLossValueError, match="softcap"):
        xt.fused_linear_cross_entropy(x, w, t, softcap=-1.0)
    with pytest.raises(xloss.XLossValueError, match="lse_square_scale"):
        xt.fused_linear_cross_entropy(x, w, t, lse_square_scale=-1.0)


def test_return_convention_follows_liger():
    x, w, _, g = problem(6, 3, 5, 2)
    t = torch.randint(0, 5, (6,), generator=g)
    plain = xt.fused_linear_cross_entropy(x, w, t, lse_square_scale=0.01)
    assert isinstance(plain, torch.Tensor)  # neither flag: the loss alone (z-loss included)
    out = xt.fused_linear_cross_entropy(x, w, t, lse_square_scale=0.01, return_z_loss=True)
    loss, z_loss, acc = out  # a NamedTuple: unpacks as Liger's (loss, z_loss, token_accuracy)
    assert torch.equal(loss, plain) and acc is None and 0 < z_loss.item() < loss.item()
    assert xt.fused_linear_cross_entropy(x, w, t, return_token_accuracy=True).z_loss is None


def test_probability_targets_are_refused_naming_target():
    x, w, _, _ = problem(4, 3, 5, 0)
    probs = torch.softmax(torch.randn(4, 5, dtype=F64), 1)
    with pytest.raises(xloss.XLossTypeError, match=r"target has dtype torch.float64 .*class indices.*"
                                                   r"class-probability targets"):
        xt.fused_linear_cross_entropy(x, w, probs)


# -- the Liger-compatible module -----------------------------------------------------------------


def test_liger_compat_module_takes_weight_first_and_liger_constructor_arguments():
    # BT == V: input (V, H) and weight (V, H) have the same shape, so swapping them computes some
    # other loss without any error — the confusion the weight-first module exists for
    x, w, b, g = problem(9, 4, 9, 11, bias=True)
    t = torch.randint(0, 9, (9,), generator=g)
    cw = torch.rand(9, generator=g, dtype=F64) + 0.5
    ours = xt.FusedLinearCrossEntropyLoss(ignore_index=-100, label_smoothing=0.1, class_weight=cw)
    # Liger-Kernel's positional order: ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap
    liger = xt.LigerCompatFusedLinearCrossEntropyLoss(cw, -100, 0.0, 0.1, "mean", None)
    expected = F.cross_entropy(F.linear(x, w, b), t, weight=cw, label_smoothing=0.1)
    torch.testing.assert_close(ours(x, w, t, b), expected, rtol=1e-13, atol=0)
    torch.testing.assert_close(liger(w, x, t, b), expected, rtol=1e-13, atol=0)
    swapped = F.cross_entropy(F.linear(w, x, b), t, weight=cw, label_smoothing=0.1)
    assert not torch.allclose(swapped, expected)  # what the other order silently computes
    torch.testing.assert_close(ours(w, x, t, b), swapped, rtol=1e-13, atol=0)
    kw = xt.LigerCompatFusedLinearCrossEntropyLoss(ce_weight=None, lse_square_scale=1e-3, softcap=4.0,
                                                   return_z_loss=True, accum_dtype=torch.float32,
                                                   use_token_scaling=True, return_token_accuracy=True)
    out = kw(w, x, t, b)
    ref = torch_reference(x, w, b, t, softcap=4.0, lse_square_scale=1e-3, use_token_scaling=True)
    for a, e in zip(out, ref):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_options_and_the_liger_compatible_module_compile_without_graph_break():
    g = torch.Generator().manual_seed(12)
    w = torch.randn(11, 8, generator=g).requires_grad_()
    x = torch.randn(10, 8, generator=g).requires_grad_()
    t = torch.randint(0, 11, (10,), generator=g)
    t[3] = -100
    # Liger's positional constructor: ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction,
    # softcap, return_z_loss, accum_dtype, use_token_scaling, return_token_accuracy
    mod = xt.LigerCompatFusedLinearCrossEntropyLoss(None, -100, 1e-3, 0.1, "mean", 5.0, True, None, False, True)

    def f(x, w, t):
        out = mod(w, x, t)
        return out.loss * 0.5, out.z_loss, out.token_accuracy

    eager = f(x, w, t)
    eager_grads = torch.autograd.grad(eager[0], (x, w))
    compiled = torch.compile(f, fullgraph=True, backend="eager")(x, w, t)
    assert all(torch.equal(a, b) for a, b in zip(compiled, eager))
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(compiled[0], (x, w)), eager_grads))
