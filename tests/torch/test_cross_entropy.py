"""xloss.torch.cross_entropy / CrossEntropyLoss against torch.nn.functional.cross_entropy: values and
gradients (every float dtype, weights, ignore_index, label smoothing, N-d and 1-D inputs), CPU autocast,
torch.compile(fullgraph=True), probability targets (PyTorch's own path) and refused arguments."""

import pytest
import torch
import torch.nn.functional as F

import xloss.torch as xt
from xloss.errors import XLossError, XLossIndexError, XLossValueError

TOL = {torch.float32: 2e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _loss_and_grad(fn, x, t, **kw):
    xg = x.detach().requires_grad_()
    loss = fn(xg, t, **kw)
    g = torch.linspace(-1, 1, loss.numel(), dtype=loss.dtype).reshape(loss.shape) if loss.ndim else torch.tensor(
        0.7, dtype=loss.dtype)
    (grad,) = torch.autograd.grad(loss, xg, g)
    return loss.detach(), grad


def _close_to_float64(ours, theirs, exact, dtype):
    """torch's criterion for another implementation: within its tolerance, or no farther from float64 than torch."""
    ours, theirs, exact = ours.double(), theirs.double(), exact.double()
    tol = TOL[dtype] * (1 + exact.abs())
    ok = ((ours - theirs).abs() <= tol) | ((ours - exact).abs() <= (theirs - exact).abs() + tol * 1e-3)
    assert bool(ok.all()), (ours - exact).abs().max()


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", [(13, 7), (7,), (4, 5, 3, 2)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch(dtype, shape, reduction):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    c = shape[1] if len(shape) > 1 else shape[0]
    tshape = (shape[0], *shape[2:]) if len(shape) > 1 else ()
    t = torch.randint(0, c, tshape, generator=g)
    if t.ndim:
        t.view(-1)[::3] = 2  # ignored below
    w = torch.rand(c, generator=g).to(dtype) + 0.5
    kw = dict(weight=w, ignore_index=2, reduction=reduction, label_smoothing=0.15)
    ours = _loss_and_grad(xt.cross_entropy, x, t, **kw)
    theirs = _loss_and_grad(F.cross_entropy, x, t, **kw)
    exact = _loss_and_grad(F.cross_entropy, x.double(), t, **dict(kw, weight=w.double()))
    for o, th, ex in zip(ours, theirs, exact):
        assert o.dtype == th.dtype and o.shape == th.shape
        _close_to_float64(o, th, ex, dtype)


def test_module_and_defaults_match_torch():
    x, t = torch.randn(6, 4), torch.tensor([0, 3, -100, 1, 2, 2])
    assert torch.allclose(xt.CrossEntropyLoss()(x, t), torch.nn.CrossEntropyLoss()(x, t))
    assert torch.allclose(xt.CrossEntropyLoss(reduction="sum", label_smoothing=0.3)(x, t),
                          torch.nn.CrossEntropyLoss(reduction="sum", label_smoothing=0.3)(x, t))
    every_row_ignored = xt.cross_entropy(x, torch.full((6,), -100))
    assert torch.isnan(every_row_ignored) and torch.isnan(F.cross_entropy(x, torch.full((6,), -100)))


def test_autocast_gives_a_float32_loss_as_torch():
    x, t = torch.randn(5, 6, dtype=torch.bfloat16, requires_grad=True), torch.tensor([0, 1, 2, 3, 4])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, theirs = xt.cross_entropy(x, t), F.cross_entropy(x, t)
    assert ours.dtype == theirs.dtype == torch.float32
    assert torch.allclose(ours, theirs, rtol=1e-5)
    ours.backward()
    assert x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_with_fullgraph_forward_and_backward(dynamic):
    """fullgraph=True, the smoothing a graph input (a SymFloat under dynamic=True)."""
    x, t = torch.randn(9, 11), torch.randint(0, 11, (9,))
    f = torch.compile(lambda a, b, s: xt.cross_entropy(a, b, label_smoothing=s, ignore_index=3), backend="eager",
                      fullgraph=True, dynamic=dynamic)
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xg, t, 0.1).backward()
    F.cross_entropy(xr, t, label_smoothing=0.1, ignore_index=3).backward()
    assert torch.allclose(xg.grad, xr.grad, atol=1e-6)


def test_probability_targets_take_torchs_own_path():
    x, p = torch.randn(4, 5, requires_grad=True), torch.softmax(torch.randn(4, 5), 1)
    assert torch.equal(xt.cross_entropy(x, p, label_smoothing=0.2), F.cross_entropy(x, p, label_smoothing=0.2))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(target=torch.tensor([0, 7])), XLossIndexError, r"target\[1\] = 7 is out of range"),
    (dict(target=torch.tensor([0])), XLossValueError, r"target must have shape \(2,\)"),
    (dict(weight=torch.ones(3, requires_grad=True)), XLossValueError, r"weight requires grad"),
    (dict(weight=torch.ones(4)), XLossValueError, r"weight must have shape \(3,\)"),
    (dict(label_smoothing=1.5), XLossValueError, r"label_smoothing must lie in \[0, 1\]"),
    (dict(reduction="avg"), XLossValueError, r"reduction must be one of"),
])
def test_refuses_clearly(kw, exc, match):
    args = {"input": torch.randn(2, 3), "target": torch.tensor([0, 2]), **kw}
    with pytest.raises(exc, match=match):
        xt.cross_entropy(**args)
    assert issubclass(exc, XLossError)


def test_the_backward_may_overwrite_the_log_probabilities_in_place():
    import numpy as np

    import xloss

    rng = np.random.default_rng(5)
    x, t = rng.normal(0, 2, (6, 40)).astype(np.float32), np.array([0, 39, -100, 7, 7, 1])
    lp = xloss.cross_entropy_loss(x, t, backend="cpu").log_prob
    want = xloss.cross_entropy_loss_grad(0.5, lp, t, label_smoothing=0.1, backend="cpu")
    got = xloss.cross_entropy_loss_grad(0.5, lp, t, label_smoothing=0.1, backend="cpu", out=lp)
    assert got is lp and np.array_equal(got, want)
    with pytest.raises(XLossValueError, match="out overlaps input log_prob"):
        xloss.cross_entropy_loss_grad(0.5, lp[1:], t[1:], backend="cpu", out=lp[:-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])  # float64 once went wrong
def test_the_drop_in_backward_reuses_its_log_prob_buffer_and_a_retained_graph_still_backpropagates(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(6, 40, generator=g) * 2).to(dtype).requires_grad_()
    t = torch.tensor([0, 39, -100, 7, 7, 1])
    want = torch.autograd.grad(F.cross_entropy(x.double(), t, label_smoothing=0.1), x)[0]
    loss = xt.cross_entropy(x, t, label_smoothing=0.1, backend="cpu")
    loss.backward(retain_graph=True)  # written over the saved log_prob: a second pass must recompute it
    first = x.grad.clone()
    _close_to_float64(first, want, want, dtype)
    loss.backward()
    _close_to_float64(x.grad - first, want, want, dtype)
    assert torch.equal(x.grad - first, first)  # recomputed bit for bit

    y = x.detach().requires_grad_()
    loss = xt.cross_entropy(y, t, backend="cpu")
    buffer = loss.grad_fn.saved_tensors[0].data_ptr()
    loss.backward()
    assert y.grad.data_ptr() == buffer  # one (N, C) buffer a step: autograd took the gradient as it is


def test_dense_labels_give_loss_and_backprop_as_torch_autograd():
    x, y = torch.randn(5, 7, dtype=torch.float64), torch.softmax(torch.randn(5, 7, dtype=torch.float64), 1)
    loss, backprop = xt.softmax_cross_entropy_with_logits(x, y)
    xg = x.clone().requires_grad_()
    want = F.cross_entropy(xg, y, reduction="none")
    want.sum().backward()
    assert torch.allclose(loss, want.detach()) and torch.allclose(backprop, xg.grad)


def test_the_bench_step_through_the_drop_in_gives_the_kernel_steps_gradient():
    import numpy as np

    from xloss.bench import impls, workloads

    w = workloads.build("cross_entropy_loss_grad", "grad", "40x30", "float32")
    steps = {c.name: c.fn for c in impls.xloss_candidates(w, ["cpu"])[0]}
    np.testing.assert_array_equal(steps["xloss:cpu xloss.torch fwd+bwd"]().numpy(), steps["xloss:cpu fwd+bwd"]())
