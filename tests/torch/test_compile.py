"""torch.compile and torch.func through the xloss custom ops (torch.ops.xloss.*).

Compilation is slow on a small machine: the tests compile a few tiny graphs, with the
``eager`` dynamo backend (what fullgraph tracing and AOT autograd need) and once with inductor.
Measured on a loaded 2-core machine: the fullgraph step ~3-12 s, the other eager-backend tests
under 1.5 s each; marked slow: the fresh process 10-50 s, inductor 8 s with a warm inductor
cache and up to ~75 s cold (C++ compilation).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import xloss
import xloss.torch as xt

F64 = torch.float64


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(6, 5).double()
    x = torch.randn(8, 6, generator=g, dtype=F64)
    y = (torch.rand(8, 5, generator=g) > 0.6).to(F64)
    t = torch.randint(0, 5, (8,), generator=g)
    t[2] = -100
    return lin, x, y, t


def _losses(model, x, y, t):
    """The three losses in one graph, as a training step would combine them."""
    z = model(x)
    loss = xt.sigmoid_focal_loss(z, y, 0.25, 2.0, "mean", backend="reference")
    loss = loss + xt.binary_cross_entropy(torch.sigmoid(z), y, reduction="sum")
    return loss + xt.nll_loss(torch.log_softmax(z, 1), t)


def _grads(fn, lin, *args):
    lin.zero_grad()
    loss = fn(lin, *args)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in lin.parameters()]


def _autograd_reference(model, x, y, t):
    """The same losses written with torch operations only (torchvision's focal formula)."""
    z = model(x)
    p = torch.sigmoid(z)
    ce = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    p_t = p * y + (1 - p) * (1 - y)
    focal = (ce * (1 - p_t) ** 2 * (0.25 * y + 0.75 * (1 - y))).mean()
    bce = torch.nn.functional.binary_cross_entropy(p, y, reduction="sum")
    return focal + bce + torch.nn.functional.nll_loss(torch.log_softmax(z, 1), t)


def test_compiled_step_fullgraph_matches_eager_and_torch():
    lin, x, y, t = _data()
    ref_loss, ref_grads = _grads(_autograd_reference, lin, x, y, t)
    eager_loss, eager_grads = _grads(_losses, lin, x, y, t)
    compiled = torch.compile(_losses, fullgraph=True, backend="eager")
    for _ in range(2):  # the second call reuses the compiled graph
        loss, grads = _grads(compiled, lin, x, y, t)
        assert torch.equal(loss, eager_loss)
        for a, b, r in zip(grads, eager_grads, ref_grads):
            assert torch.equal(a, b)
            torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(eager_loss, ref_loss, rtol=1e-13, atol=0)


def test_dynamo_explain_reports_no_graph_break():
    lin, x, y, t = _data(1)
    explained = torch._dynamo.explain(_losses)(lin, x, y, t)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = "".join(m.code for g in explained.graphs for m in g.modules() if hasattr(m, "code"))
    for op in ("sigmoid_focal_loss_with_grad", "binary_cross_entropy", "nll_loss_forward",  # recorded, opaque
               "binary_cross_entropy_backward", "nll_loss_backward"):
        assert f"torch.ops.xloss.{op}.default" in code, op
    assert "numba" not in code and "numpy" not in code


def test_data_checks_run_inside_the_compiled_op():
    """A bad class index or probability raises the XLossError from inside the graph."""
    compiled = torch.compile(lambda x, t: xt.nll_loss(x, t, reduction="sum"), fullgraph=True, backend="eager")
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    assert torch.isfinite(compiled(x, torch.tensor([0, 1, 3])))
    with pytest.raises(xloss.XLossIndexError, match=r"target\[1\] = 7"):
        compiled(x, torch.tensor([0, 7, 3]))
    bce = torch.compile(lambda p, y: xt.binary_cross_entropy(p, y), fullgraph=True, backend="eager")
    with pytest.raises(xloss.XLossValueError, match="probabilities"):
        bce(torch.tensor([0.5, 1.5], dtype=F64, requires_grad=True), torch.zeros(2, dtype=F64))


def test_torch_func_grad_and_jacrev_first_order_and_clear_error_for_second_order():
    lin, x, y, t = _data(2)
    z = lin(x).detach()

    def f(z):
        return (xt.sigmoid_focal_loss(z, y, reduction="sum", backend="reference")
                + xt.binary_cross_entropy(torch.sigmoid(z), y, backend="reference")
                + xt.nll_loss(torch.log_softmax(z, 1), t, backend="reference"))

    zr = z.clone().requires_grad_()
    (expected,) = torch.autograd.grad(f(zr), zr)
    torch.testing.assert_close(torch.func.grad(f)(z), expected, rtol=0, atol=0)
    with pytest.warns(UserWarning, match="batching rule"):  # jacrev: vmap over the backward ops, a loop
        torch.testing.assert_close(torch.func.jacrev(f)(z), expected, rtol=0, atol=0)
    for part in (lambda z: xt.sigmoid_focal_loss(z, y, reduction="sum", backend="reference"),
                 lambda z: xt.binary_cross_entropy(torch.sigmoid(z), y, backend="reference"),
                 lambda z: xt.nll_loss(torch.log_softmax(z, 1), t, backend="reference")):
        with pytest.raises(xloss.XLossError, match="does not support second-order gradients"):
            torch.func.grad(lambda z: torch.func.grad(part)(z).sum())(z)  # noqa: B023 (called in this iteration)


def test_backend_objects():
    """A registry backend crosses into the ops by name (eager and compiled); a hand-built one
    works in eager mode and is refused clearly under torch.compile."""
    shared = xloss.backend("reference")
    own = type(shared)()  # not the registry's instance
    x = torch.randn(5, dtype=F64, requires_grad=True)
    y = (torch.rand(5) > 0.5).to(F64)
    c = xt.sigmoid_focal_loss(x, y, reduction="sum", backend="reference")
    (gc,) = torch.autograd.grad(c, x)
    for b in (shared, own):
        a = xt.sigmoid_focal_loss(x, y, reduction="sum", backend=b)
        (ga,) = torch.autograd.grad(a, x)
        assert torch.equal(a, c) and torch.equal(ga, gc)
    compiled = torch.compile(lambda x: xt.sigmoid_focal_loss(x, y, reduction="sum", backend=shared),
                             fullgraph=True, backend="eager")
    (gs,) = torch.autograd.grad(compiled(x), x)
    assert torch.equal(gs, gc)
    refused = torch.compile(lambda x: xt.sigmoid_focal_loss(x, y, reduction="sum", backend=own),
                            fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="under torch.compile pass backend='reference' by name"):
        refused(x)


@pytest.mark.slow
def test_fresh_process_compile_runs_the_numba_backend_opaquely():
    """In a new process the first call of the cpu (Numba) backend happens inside the compiled
    region; dynamo must record the op, never trace into Numba's compiler."""
    code = textwrap.dedent("""
        import torch, xloss.torch as xt
        x = torch.randn(4, 3, requires_grad=True)
        y = (torch.rand(4, 3) > 0.5).float()
        f = lambda x: xt.sigmoid_focal_loss(x, y, reduction="mean", backend="cpu")
        loss = torch.compile(f, fullgraph=True, backend="eager")(x)
        loss.backward()
        g = x.grad.clone(); x.grad = None
        f(x).backward()
        assert torch.allclose(g, x.grad, rtol=1e-6, atol=1e-8), (g, x.grad)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


@pytest.mark.slow
def test_inductor_compiled_focal_matches_eager():
    """The default backend (inductor, C++ codegen on CPU) around the opaque op."""
    x0 = torch.randn(6, 4, dtype=torch.float32)
    y = (torch.rand(6, 4) > 0.5).float()

    def f(x):
        return xt.sigmoid_focal_loss(x * 2.0, y, reduction="mean", backend="reference")

    xe = x0.clone().requires_grad_()
    f(xe).backward()
    xc = x0.clone().requires_grad_()
    loss = torch.compile(f, fullgraph=True)(xc)
    loss.backward()
    torch.testing.assert_close(loss, f(x0), rtol=1e-6, atol=0)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-6, atol=1e-9)


# -- fused linear cross entropy ----------------------------------------------------------------


def _flce_data(dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(6, 8).to(dtype)
    w = torch.randn(11, 8, generator=g, dtype=F64).to(dtype).requires_grad_()
    x = torch.randn(10, 6, generator=g, dtype=F64).to(dtype)
    t = torch.randint(0, 11, (10,), generator=g)
    t[3] = -100
    return lin, w, x, t


@pytest.mark.parametrize("dtype,backend", [(F64, "reference"), (torch.bfloat16, None)])  # kernel path; native path
def test_flce_compiled_step_fullgraph_matches_eager(dtype, backend):
    """No graph break (the class-index check and mean's divisor are inside the op); the compiled
    step's loss and gradients equal eager's, for scalar and per-token reductions."""
    lin, w, x, t = _flce_data(dtype)
    weights = torch.linspace(0.5, 1.5, 10, dtype=F64).to(dtype)

    def mean_step(x, t):
        return xt.fused_linear_cross_entropy(torch.tanh(lin(x)), w, t, backend=backend, label_smoothing=0.1) * 0.3

    def none_step(x, t):
        return (xt.fused_linear_cross_entropy(torch.tanh(lin(x)), w, t, reduction="none", backend=backend)
                * weights).sum()

    def grads(f):
        lin.zero_grad()
        w.grad = None
        loss = f(x, t)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in (*lin.parameters(), w)]

    for step in (mean_step, none_step):
        explained = torch._dynamo.explain(step)(x, t)
        assert explained.graph_break_count == 0 and explained.graph_count == 1
        code = "".join(m.code for gm in explained.graphs for m in gm.modules() if hasattr(m, "code"))
        assert "torch.ops.xloss.fused_linear_cross_entropy.default" in code
        eager_loss, eager_grads = grads(step)
        loss, got = grads(torch.compile(step, fullgraph=True, backend="eager"))
        assert torch.equal(loss, eager_loss)
        for a, b in zip(got, eager_grads):
            assert torch.equal(a, b)


def test_flce_class_index_check_runs_inside_the_compiled_op():
    w = torch.randn(7, 5, dtype=F64)
    compiled = torch.compile(lambda x, t: xt.fused_linear_cross_entropy(x, w, t), fullgraph=True, backend="eager")
    x = torch.randn(3, 5, dtype=F64, requires_grad=True)
    assert torch.isfinite(compiled(x, torch.tensor([0, 6, -100])))
    with pytest.raises(xloss.XLossIndexError, match=r"target\[1\] = 9"):
        compiled(x, torch.tensor([0, 9, 1]))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_flce_torch_func_grad_and_clear_error_for_second_order(reduction):
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(9, 5, generator=g, dtype=F64), torch.randn(7, 5, generator=g, dtype=F64)
    b = torch.randn(7, generator=g, dtype=F64)
    t = torch.randint(0, 7, (9,), generator=g)
    t[2] = -100

    def f(x, w, b):
        return xt.fused_linear_cross_entropy(x, w, t, b, reduction=reduction, label_smoothing=0.1).sum() * 0.7

    got = torch.func.grad(f, argnums=(0, 1, 2))(x, w, b)
    leaves = [a.clone().requires_grad_() for a in (x, w, b)]
    ref = torch.nn.functional.cross_entropy(leaves[0] @ leaves[1].T + leaves[2], t, reduction=reduction,
                                            label_smoothing=0.1).sum() * 0.7
    for a, e in zip(got, torch.autograd.grad(ref, leaves)):
        torch.testing.assert_close(a, e, rtol=1e-13, atol=1e-14)
    with pytest.raises(xloss.XLossError, match="does not support second-order gradients"):
        torch.func.grad(lambda x: torch.func.grad(f)(x, w, b).sum())(x)


def test_flce_vmap_gives_per_sample_losses_and_gradients():
    """The generated vmap rule: PyTorch's fallback runs the ops once per batch entry (it warns)."""
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(3, 4, 5, generator=g, dtype=F64), torch.randn(7, 5, generator=g, dtype=F64)
    t = torch.randint(0, 7, (3, 4), generator=g)
    t[1, 2] = -100

    def f(x, w, t):
        return xt.fused_linear_cross_entropy(x, w, t)

    with pytest.warns(UserWarning, match="batching rule"):
        losses = torch.func.vmap(f, in_dims=(0, None, 0))(x, w, t)
        gx, gw = torch.func.vmap(torch.func.grad(f, argnums=(0, 1)), in_dims=(0, None, 0))(x, w, t)
    for i in range(3):
        xr, wr = x[i].clone().requires_grad_(), w.clone().requires_grad_()
        ref = torch.nn.functional.cross_entropy(xr @ wr.T, t[i])
        torch.testing.assert_close(losses[i], ref.detach(), rtol=1e-13, atol=0)
        ex, ew = torch.autograd.grad(ref, (xr, wr))
        torch.testing.assert_close(gx[i], ex, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(gw[i], ew, rtol=1e-13, atol=1e-15)


def test_flce_torch_export_records_the_op():
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.head = torch.nn.Linear(6, 8), torch.nn.Linear(8, 11, bias=False)

        def forward(self, x, t):
            return xt.fused_linear_cross_entropy(torch.tanh(self.lin(x)), self.head.weight, t, softcap=5.0,
                                                 lse_square_scale=1e-3)

    model, x, t = Head(), torch.randn(10, 6), torch.randint(0, 11, (10,))
    exported = torch.export.export(model, (x, t))
    assert any("xloss.fused_linear_cross_entropy" in str(n.target) for n in exported.graph.nodes)
    assert torch.equal(exported.module()(x, t), model(x, t))


def _one_op(op):
    """One loss in a graph, its float argument ``s`` an input of the graph (dynamic=True makes it a SymFloat)."""
    def step(x, y, t, w, s):
        if op == "focal":
            return xt.sigmoid_focal_loss(x, y, s, 2.0, "sum")
        if op == "bce":
            return xt.binary_cross_entropy(torch.sigmoid(x), y, eps=s * 1e-11)
        if op == "nll":
            return xt.nll_loss(torch.log_softmax(x, 1), t) * s
        return xt.fused_linear_cross_entropy(x, w, t, label_smoothing=s)
    return step


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("op", ["focal", "bce", "nll", "flce"])
def test_every_op_compiles_fullgraph_static_and_dynamic(op, dynamic):
    """fullgraph=True with dynamic shapes and scalars too: the argument checks must not break the
    graph when a float argument is symbolic (a SymFloat)."""
    _, _, y, t = _data(3)
    x, w = torch.randn(8, 5, dtype=F64), torch.randn(7, 5, dtype=F64)  # logits (N, C=5); FLCE: H=5, V=7
    step = _one_op(op)
    xe = x.clone().requires_grad_()
    want = step(xe, y, t, w, 0.25)
    want.backward()
    xc = x.clone().requires_grad_()
    got = torch.compile(step, backend="eager", fullgraph=True, dynamic=dynamic)(xc, y, t, w, 0.25)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-12, atol=0)
