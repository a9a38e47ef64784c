"""``xloss.torch.binary_cross_entropy_with_logits`` / ``BCEWithLogitsLoss`` as drop-ins for torch's: PyTorch's
own OpInfo samples (forward, and the gradients of input and target) by PyTorch's criterion for an alternative
implementation, the module, CPU autocast, ``torch.compile(fullgraph=True)``, torch.func, and the refusals."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

import xloss.torch as xt
from xloss import XLossValueError

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@functools.cache
def _op_db_samples():
    """PyTorch's OpInfo entry for binary_cross_entropy_with_logits (its module needs expecttest: test extra)."""
    from torch.testing._internal.common_methods_invocations import op_db

    (info,) = [o for o in op_db if o.name == "nn.functional.binary_cross_entropy_with_logits"]
    return info


def _results(fn, sample, dtype, compute=None):
    """(loss, d input, d target) of ``fn`` on the sample rounded to ``dtype`` (and evaluated in ``compute``,
    default ``dtype``), upstream gradient ones."""
    def cast(t):
        return t.detach().to(dtype).to(compute or dtype)

    x, y = cast(sample.input).requires_grad_(), cast(sample.args[0]).requires_grad_()
    kw = {k: (cast(v) if isinstance(v, torch.Tensor) else v) for k, v in sample.kwargs.items()}
    loss = fn(x, y, **kw)
    gx, gy = torch.autograd.grad(loss, (x, y), torch.ones_like(loss))
    return loss.detach(), gx, gy


def _no_farther(ours, theirs, exact):
    """PyTorch's criterion: torch's default tolerances against torch's result, or no farther from the float64
    result (on the same rounded inputs) than torch's own: the largest error of each, over the tensor."""
    try:
        torch.testing.assert_close(ours, theirs)
        return True
    except AssertionError:
        return bool((ours.double() - exact).abs().max() <= (theirs.double() - exact).abs().max())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pytorch_opinfo_samples(dtype):
    info = _op_db_samples()
    samples = list(info.sample_inputs("cpu", torch.float64, requires_grad=True))
    assert len(samples) >= 20
    for i, s in enumerate(samples):
        exact = _results(F.binary_cross_entropy_with_logits, s, dtype, torch.float64)
        theirs = _results(F.binary_cross_entropy_with_logits, s, dtype)
        ours = _results(xt.binary_cross_entropy_with_logits, s, dtype)
        for name, o, t, e in zip(("loss", "d input", "d target"), ours, theirs, exact):
            assert o.dtype == t.dtype and o.shape == t.shape, (i, name)
            assert _no_farther(o, t, e), (i, name, s.kwargs, o, t, e)


def test_the_module_has_torchs_buffers_and_results():
    x, y = torch.randn(6, 4, requires_grad=True), torch.rand(6, 4)
    w, pw = torch.rand(6, 1), torch.rand(4) * 3
    ours = xt.BCEWithLogitsLoss(weight=w, pos_weight=pw, reduction="sum")
    theirs = torch.nn.BCEWithLogitsLoss(weight=w, pos_weight=pw, reduction="sum")
    assert set(ours.state_dict()) == set(theirs.state_dict()) == {"weight", "pos_weight"}
    a, b = ours(x, y), theirs(x, y)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(torch.autograd.grad(a, x)[0], torch.autograd.grad(b, x)[0])
    assert xt.BCEWithLogitsLoss(size_average=False).reduction == "sum"  # the deprecated pair, as torch reads it


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cpu_autocast_gives_a_float32_loss_as_torch(dtype):
    x = torch.randn(8, 5, dtype=dtype, requires_grad=True)
    y = (torch.rand(8, 5) < 0.3).to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        ours = xt.binary_cross_entropy_with_logits(x, y, pos_weight=torch.full((5,), 2.0, dtype=dtype))
        theirs = F.binary_cross_entropy_with_logits(x, y, pos_weight=torch.full((5,), 2.0, dtype=dtype))
    assert ours.dtype == theirs.dtype == torch.float32
    torch.testing.assert_close(ours, theirs)
    (gx,) = torch.autograd.grad(ours, x)
    assert gx.dtype == dtype


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_fullgraph_forward_and_backward(dynamic):
    def step(x, y, pw):
        return xt.binary_cross_entropy_with_logits(x, y, pos_weight=pw, reduction="mean") * 2.0

    x, y, pw = torch.randn(7, 5, dtype=torch.float64), torch.rand(7, 5, dtype=torch.float64), torch.rand(5) * 3
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = step(xe, y, pw.double())
    want.backward()
    got = torch.compile(step, backend="eager", fullgraph=True, dynamic=dynamic)(xc, y, pw.double())
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-12, atol=0)


def test_torch_func_grad_and_jvp_match_torch():
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.rand(4, 3, dtype=torch.float64)
    pw = torch.rand(3, dtype=torch.float64) * 2
    g_ours = torch.func.grad(lambda x: xt.binary_cross_entropy_with_logits(x, y, pos_weight=pw))(x)
    g_torch = torch.func.grad(lambda x: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw))(x)
    torch.testing.assert_close(g_ours, g_torch)
    t = torch.randn_like(x)
    _, j_ours = torch.func.jvp(lambda x, y: xt.binary_cross_entropy_with_logits(x, y, pos_weight=pw), (x, y), (t, t))
    _, j_torch = torch.func.jvp(lambda x, y: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw), (x, y), (t, t))
    torch.testing.assert_close(j_ours, j_torch)


@pytest.mark.parametrize("backend", ["reference", "ascend"])
def test_other_backends_give_the_same_gradient(backend):
    x, y = torch.randn(9, 4, requires_grad=True), torch.rand(9, 4)
    pw, w = torch.rand(4) * 3, torch.rand(9, 1)
    a = xt.binary_cross_entropy_with_logits(x, y, w, pos_weight=pw, backend=backend)
    b = F.binary_cross_entropy_with_logits(x, y, w, pos_weight=pw)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(torch.autograd.grad(a, x)[0], torch.autograd.grad(b, x)[0])


@pytest.mark.parametrize("label, call, match", [
    ("target of another shape", lambda x, y: xt.binary_cross_entropy_with_logits(x, y[:, :3]),
     r"Target size \(\(4, 3\)\) must be the same as input size \(\(4, 5\)\)"),
    ("weight requiring grad", lambda x, y: xt.binary_cross_entropy_with_logits(x, y, torch.ones(5, requires_grad=True)),
     r"weight"),
    ("pos_weight requiring grad",
     lambda x, y: xt.binary_cross_entropy_with_logits(x, y, pos_weight=torch.ones(5, requires_grad=True)),
     r"pos_weight"),
    ("pos_weight not broadcastable", lambda x, y: xt.binary_cross_entropy_with_logits(x, y, pos_weight=torch.ones(4)),
     r"pos_weight of shape \(4,\) does not broadcast to \(4, 5\)"),
    ("bad reduction", lambda x, y: xt.binary_cross_entropy_with_logits(x, y, reduction="avg"), r"reduction"),
])
def test_refusals_name_the_argument(label, call, match):
    x, y = torch.randn(4, 5, requires_grad=True), torch.rand(4, 5)
    with pytest.raises(XLossValueError, match=match):
        call(x, y)
