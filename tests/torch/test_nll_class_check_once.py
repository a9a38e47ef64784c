"""The NLL forward checks its class indices once, in ``api.nll_loss``'s validator (the op body no longer
repeats it in torch operations): a backend with the backward kernel only, whose forward falls back to
PyTorch's formula in ``xloss.kernels.nll.torch_ops``, still refuses a bad target with the same error."""

import pytest
import torch
import torch.nn.functional as F

import xloss
import xloss.torch as xt
from xloss.backends.numpy_reference import ReferenceBackend
from xloss.kernels.nll import FORWARD


class BackwardOnly(ReferenceBackend):
    """The reference without the NLL forward row (a third party's backward-only backend)."""

    implementations = {row: fn for row, fn in ReferenceBackend.implementations.items() if row != FORWARD}

    def capabilities(self):
        return {k: v for k, v in super().capabilities().items() if k != FORWARD.name}


@pytest.fixture
def backward_only():
    xloss.register_backend("nll-backward-only", BackwardOnly)
    yield "nll-backward-only"
    xloss.unregister_backend("nll-backward-only")


def test_backward_only_backend_runs_the_formula_and_refuses_bad_classes(backward_only):
    x = torch.randn(2, 4, 3, dtype=torch.float64).log_softmax(1).requires_grad_()
    t = torch.tensor([[0, 3, -100], [1, 2, 2]])
    with pytest.raises(xloss.UnsupportedRequestError):  # the fallback below is really taken
        xloss.nll_loss(x.detach(), t, backend=backward_only)
    loss = xt.nll_loss(x, t, backend=backward_only)
    torch.testing.assert_close(loss, F.nll_loss(x, t), rtol=1e-13, atol=0)
    bad = torch.tensor([[0, 3, -100], [1, 4, 2]])
    msg = r"target\[4\] = 4 is out of range: class indices must lie in \[0, 4\) or equal ignore_index=-100"
    for inp in (x, x.detach()):  # the autograd Function and the plain op
        with pytest.raises(xloss.XLossIndexError, match=msg):
            xt.nll_loss(inp, bad, backend=backward_only)
        with pytest.raises(xloss.XLossIndexError, match=msg):
            xt.nll_loss(inp, bad, backend="reference")
