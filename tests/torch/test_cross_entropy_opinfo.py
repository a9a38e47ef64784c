"""PyTorch's own OpInfo samples for ``nn.functional.cross_entropy`` against ``xloss.torch.cross_entropy``
(issue #30): each sample's loss and input gradient within torch's default tolerances of
``F.cross_entropy``, or no farther from float64 than torch's own result. Class-index samples run on
the kernel; probability-target samples take PyTorch's own path (counted apart).

torch's OpInfo database needs ``expecttest`` and takes tens of seconds to import: skipped without it,
and marked slow."""

import pytest
import torch
import torch.nn.functional as F

import xloss.torch as xt

pytest.importorskip("expecttest")
pytestmark = pytest.mark.slow


def _grad(fn, sample):
    x = sample.input.detach().requires_grad_()
    kw = dict(sample.kwargs)
    if "weight" in kw and kw["weight"] is not None:
        kw["weight"] = kw["weight"].detach()
    loss = fn(x, *[a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args], **kw)
    (g,) = torch.autograd.grad(loss.sum(), x)
    return loss.detach(), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_opinfo_samples_pass(dtype):
    from torch.testing._internal.common_methods_invocations import op_db

    (op,) = [o for o in op_db if o.name == "nn.functional.cross_entropy"]
    kernel = routed = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=True):
        ours, theirs = _grad(xt.cross_entropy, sample), _grad(F.cross_entropy, sample)
        if sample.args[0].is_floating_point():
            routed += 1
        else:
            kernel += 1
        for k, (o, t) in enumerate(zip(ours, theirs)):
            try:
                torch.testing.assert_close(o, t)
            except AssertionError:
                wide = sample.transform(lambda v: v.double() if v.is_floating_point() else v)
                exact = _grad(F.cross_entropy, wide)[k]
                assert (o.double() - exact).abs().max() <= (t.double() - exact).abs().max() * 1.01
    print(f"{dtype}: {kernel} class-index samples on the kernel, {routed} probability-target samples routed to torch")
    assert kernel > 0
