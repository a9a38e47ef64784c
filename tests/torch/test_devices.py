"""Tensors off the CPU: a message naming the device and what runs where, and the hook a backend
for another device uses (``Backend.devices``), exercised with the ``meta`` device."""

from __future__ import annotations

import pytest
import torch

import xloss
import xloss.torch as xt
from xloss.backend import Backend, KernelCaps
from xloss.torch import ops


class MetaBackend(Backend):
    """Declares the meta device: tensors there reach the ops, whose fake kernels give shapes."""

    devices = ("meta",)

    def capabilities(self):
        return {"focal_loss": KernelCaps.declare("focal_loss", dtypes=("float32",))}


@pytest.fixture
def meta_backend():
    xloss.register_backend("test-meta", lambda: MetaBackend(name="test-meta"), replace=True)
    yield "test-meta"
    xloss.unregister_backend("test-meta")


def test_meta_tensors_name_the_device_and_the_backends():
    x = torch.randn(4, 3, device="meta")
    with pytest.raises(xloss.XLossValueError, match=r"inputs is on meta; no registered xloss backend runs on meta "
                                                     r"\(backends: .*cpu \(cpu\)"):
        xt.sigmoid_focal_loss(x, torch.zeros(4, 3, device="meta"))
    with pytest.raises(xloss.XLossValueError, match=r"input is on meta; backend 'reference' runs on cpu"):
        xt.nll_loss(x, torch.zeros(4, dtype=torch.int64, device="meta"), backend="reference")
    with pytest.raises(xloss.XLossValueError, match="input is on meta"):
        xt.binary_cross_entropy(x, x)


def test_mixed_devices_are_refused(meta_backend):
    x = torch.randn(4, 3, device="meta")
    with pytest.raises(xloss.XLossValueError, match=r"targets is on cpu; it must be on inputs's device \(meta\)"):
        xt.sigmoid_focal_loss(x, torch.zeros(4, 3), backend=meta_backend)


def test_a_backend_declaring_the_device_gets_the_tensors(meta_backend):
    x = torch.randn(5, 3, device="meta", requires_grad=True)
    y = torch.zeros(5, 3, device="meta")
    loss = xt.sigmoid_focal_loss(x, y, reduction="none", backend=meta_backend)
    assert loss.device.type == "meta" and loss.shape == (5, 3)
    loss.sum().backward()
    assert x.grad.device.type == "meta" and x.grad.shape == x.shape
    assert xt.sigmoid_focal_loss(x.detach(), y, reduction="mean", backend=meta_backend).shape == ()


def test_cpu_is_what_every_in_tree_backend_declares():
    for name in ("reference", "cpu"):
        assert xloss.backend(name).devices == ("cpu",)


def test_register_device_kernel_checks_its_arguments():
    assert "sigmoid_focal_loss_with_grad" in ops.OPS
    with pytest.raises(xloss.XLossValueError, match="no xloss op named"):
        ops.register_device_kernel("softmax", "cuda", lambda *a: None)
    with pytest.raises(xloss.XLossValueError, match="cpu kernels are xloss's own"):
        ops.register_device_kernel("nll_loss_backward", "cpu", lambda *a: None)
