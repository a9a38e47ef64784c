"""NumPy in -> NumPy out, torch in -> torch out, dtype preserved, no copies where avoidable."""

import ml_dtypes
import numpy as np
import pytest
import torch

import xloss
from xloss import reference as ref

X = np.linspace(-4, 4, 12).reshape(3, 4)
Y = (X > 0).astype(np.float64)


@pytest.mark.parametrize("tdtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_tensors_round_trip_with_their_dtype(tdtype):
    x, y = torch.tensor(X, dtype=tdtype), torch.tensor(Y, dtype=tdtype)
    loss, dx = xloss.focal_loss_with_grad(x, y, reduction="sum", backend="reference")
    assert isinstance(loss, torch.Tensor) and isinstance(dx, torch.Tensor)
    assert loss.dtype == tdtype and dx.dtype == tdtype and loss.shape == () and dx.shape == x.shape
    x64 = x.double().numpy()
    expected = ref.sigmoid_focal_loss_grad(x64, y.double().numpy(), 1.0, reduction="sum")
    np.testing.assert_array_equal(dx.numpy() if tdtype != torch.bfloat16 else dx.float().numpy(),
                                  torch.tensor(expected).to(tdtype).float().numpy()
                                  if tdtype == torch.bfloat16 else expected.astype(dx.numpy().dtype))


def test_torch_input_is_viewed_not_copied():
    x = torch.tensor(X, dtype=torch.float32)
    arr = xloss.containers.to_numpy(x, "x")
    assert arr.__array_interface__["data"][0] == x.data_ptr()
    b = torch.tensor(X, dtype=torch.bfloat16)
    arr = xloss.containers.to_numpy(b, "x")
    assert arr.dtype == ml_dtypes.bfloat16 and arr.__array_interface__["data"][0] == b.data_ptr()


def test_requires_grad_tensor_is_refused_in_grad_mode_and_accepted_without():
    x = torch.tensor(X, requires_grad=True)
    with pytest.raises(xloss.XLossValueError, match=r"x requires grad and grad mode is on.*xloss\.torch"):
        xloss.focal_loss(x, torch.tensor(Y), backend="reference")
    with torch.no_grad():
        out = xloss.focal_loss(x, torch.tensor(Y), backend="reference")
    assert not out.requires_grad
    np.testing.assert_allclose(out.numpy(), xloss.focal_loss(X, Y, backend="reference"))


def test_torch_out_buffer_is_filled_in_place():
    x, y = torch.tensor(X, dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)
    out = torch.full_like(x, 7.0)
    res = xloss.focal_loss_grad(x, y, out=out, backend="reference")
    assert res is out
    np.testing.assert_allclose(out.numpy(), ref.sigmoid_focal_loss_grad(X, Y).astype(np.float32), rtol=1e-6)


def test_numpy_out_buffer_is_returned():
    out = np.empty_like(X)
    assert xloss.bce_grad(np.full(X.shape, 0.3), Y, out=out, backend="reference") is out


def test_ml_dtypes_bfloat16_arrays_are_accepted():
    x = X.astype(ml_dtypes.bfloat16)
    dx = xloss.focal_loss_grad(x, Y.astype(ml_dtypes.bfloat16), backend="reference")
    assert dx.dtype == ml_dtypes.bfloat16


def test_targets_of_other_dtypes_are_converted():
    x = X.astype(np.float32)
    a = xloss.focal_loss(x, Y.astype(bool), backend="reference")
    b = xloss.focal_loss(x, Y.astype(np.float32), backend="reference")
    c = xloss.focal_loss(x, Y.astype(np.int64), backend="reference")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert a.dtype == np.float32


def test_non_contiguous_and_negative_stride_inputs():
    big = np.linspace(-3, 3, 48).reshape(6, 8)
    x = big[::2, ::-2]
    y = (x > 0).astype(float)
    np.testing.assert_array_equal(xloss.focal_loss(x, y, backend="reference"),
                                  xloss.focal_loss(np.ascontiguousarray(x), y, backend="reference"))


def test_cuda_like_tensor_is_refused(monkeypatch):
    x = torch.tensor(X)
    monkeypatch.setattr(type(x), "device", property(lambda self: torch.device("meta")))
    with pytest.raises(xloss.XLossValueError, match=r"x is a torch tensor on meta; xloss takes CPU tensors"):
        xloss.focal_loss(x, torch.tensor(Y))


def test_python_lists_are_accepted():
    out = xloss.bce_grad([0.2, 0.7], [0.0, 1.0], backend="reference", reduction="sum")
    np.testing.assert_allclose(out, ref.bce_grad([0.2, 0.7], [0.0, 1.0], reduction="sum"))


def test_one_element_upstream_grad_array_is_a_scalar():
    a = xloss.focal_loss_grad(X, Y, np.array([2.0]), reduction="mean", backend="reference")
    b = xloss.focal_loss_grad(X, Y, 2.0, reduction="mean", backend="reference")
    np.testing.assert_array_equal(a, b)
    c = xloss.focal_loss_grad(torch.tensor(X), torch.tensor(Y), torch.tensor(2.0), reduction="mean",
                              backend="reference")
    np.testing.assert_array_equal(c.numpy(), b)


def test_flce_writes_into_caller_buffers():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((6, 4)), rng.standard_normal((9, 4))
    kw = dict(logits_max=np.full(6, 3.0), sum_exp_logits=np.full(6, 20.0))
    args = (np.ones(6), x, w, np.zeros(6, bool), np.arange(6))
    gi, gw = np.empty((6, 4)), np.empty((9, 4))
    a, b = xloss.fused_linear_cross_entropy_grad(*args, **kw, backend="reference", input_grad_out=gi,
                                                 weight_grad_out=gw)
    assert a is gi and b is gw
    want = xloss.fused_linear_cross_entropy_grad(*args, **kw, backend="reference")
    np.testing.assert_array_equal(gi, want[0])
    np.testing.assert_array_equal(gw, want[1])
    shared = np.empty(6 * 4 + 9 * 4)
    with pytest.raises(xloss.XLossValueError, match="weight_grad_out overlaps input input_grad_out"):
        xloss.fused_linear_cross_entropy_grad(*args, **kw, input_grad_out=shared[:24].reshape(6, 4),
                                              weight_grad_out=shared[20:56].reshape(9, 4))
