"""PyTorch's own OpInfo samples for ``nn.functional.nll_loss`` and ``nn.functional.binary_cross_entropy``
against the drop-ins (issue #30), on the default (cpu) and the ascend backends, every float dtype: the loss
and the input's gradient pass torch's default tolerances against torch's own result, or are no farther
from the float64 result than torch's own (PyTorch's criterion for an alternative implementation)."""

import pytest
import torch

import xloss.torch as xt

pytest.importorskip("expecttest")  # torch.testing._internal imports it (the test extra installs it)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

OPS = {"nn.functional.nll_loss": xt.nll_loss, "nn.functional.binary_cross_entropy": xt.binary_cross_entropy}
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _opinfo(name):
    return next(op for op in op_db if op.name == name and not op.variant_test_name)


def _run(fn, sample, backend, dtype=None, float_args=True):
    """(loss, input gradient) of ``fn`` on the sample (in ``dtype`` if given); weights are constants here."""
    x = sample.input.detach()
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args]
    kwargs = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in sample.kwargs.items()}
    if dtype is not None:
        x = x.to(dtype)
        if float_args:  # (nll's target stays integer)
            args = [a.to(dtype) for a in args]
        kwargs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for k, v in kwargs.items()}
    x = x.requires_grad_()
    loss = fn(x, *args, **kwargs, **({"backend": backend} if backend else {}))
    loss.sum().backward()
    return loss.detach(), x.grad


def _close_or_closer(ours, theirs, exact):
    try:
        torch.testing.assert_close(ours, theirs, equal_nan=True)
    except AssertionError:
        e_ours = (ours.double() - exact).abs().nan_to_num(0.0)
        e_theirs = (theirs.double() - exact).abs().nan_to_num(0.0)
        assert bool((e_ours <= e_theirs).all()), (ours, theirs, exact)


@pytest.mark.parametrize("backend", [None, "ascend"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_opinfo_samples_pass_against_the_drop_ins(name, backend):
    op, ours_fn = _opinfo(name), OPS[name]
    torch_fn = op.op
    count = 0
    for dtype in DTYPES:
        if backend == "ascend" and dtype == torch.float64:
            continue  # the vendor ABI has no float64
        for sample in op.sample_inputs("cpu", dtype, requires_grad=True):
            loss, grad = _run(ours_fn, sample, backend)
            loss_t, grad_t = _run(torch_fn, sample, None)
            loss64, grad64 = _run(torch_fn, sample, None, torch.float64, float_args=ours_fn is not xt.nll_loss)
            assert loss.dtype == loss_t.dtype and loss.shape == loss_t.shape
            _close_or_closer(loss, loss_t, loss64)
            _close_or_closer(grad, grad_t, grad64)
            count += 1
    assert count >= 33
