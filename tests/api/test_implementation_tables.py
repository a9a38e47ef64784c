"""Backends run kernels from one implementation table, ``{row: function(backend, args)}`` (issue #28 item 2):
the in-tree backends keep no method per kernel, and ``Backend.kernel`` resolves every call in one place."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import xloss
from xloss import reference as ref
from xloss.backend import Backend, KernelCaps
from xloss.backends.ascend_aclnn import AscendBackend
from xloss.backends.cpu_onednn.cpu_backend import CpuBackend
from xloss.backends.ft78ne_shim import DspBackend
from xloss.backends.numpy_reference import ReferenceBackend
from xloss.kernels import KERNELS

IN_TREE = (ReferenceBackend, CpuBackend, AscendBackend, DspBackend)
BCE_GRAD = KERNELS["bce_grad"]


@pytest.mark.parametrize("cls", IN_TREE, ids=lambda c: c.__name__)
def test_an_in_tree_backend_keys_its_table_by_the_registered_rows_and_has_no_kernel_methods(cls):
    table = cls.implementations
    assert table, f"{cls.__name__} has an empty implementation table"
    for row, fn in table.items():
        assert KERNELS.get(getattr(row, "name", None)) is row, f"{cls.__name__}: key {row!r} is not a registered row"
        assert callable(fn)
    methods = {name for klass in cls.__mro__ if klass is not object for name in vars(klass) if name in KERNELS}
    assert not methods, f"{cls.__name__} defines kernels as methods, beside its table: {sorted(methods)}"


def test_every_kernel_an_in_tree_backend_declares_is_in_its_table():
    for info in xloss.list_backends():
        if not info.available:
            continue
        b = xloss.backend(info.name)
        if not isinstance(b, IN_TREE):
            continue
        rows = {row.name for row in b.implementations}
        assert set(b.capabilities()) <= rows, f"{info.name} declares {set(b.capabilities()) - rows} off its table"


def _bce(backend, a):
    backend.calls.append(type(a).__name__)
    a.out[...] = ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction, eps=a.eps,
                              eps_mode=a.eps_mode)


class TableOnly(Backend):
    implementations = {BCE_GRAD: _bce}

    def __init__(self):
        super().__init__(name="table-only")
        self.calls = []

    def capabilities(self):
        return {"bce_grad": KernelCaps.declare("bce_grad", dtypes=("float32",))}


def test_a_call_runs_the_table_entry_with_the_backend_and_the_validated_args():
    b = TableOnly()
    x, y = np.array([0.2, 0.7, 0.5], np.float32), np.array([0.0, 1.0, 0.5], np.float32)
    got = xloss.bce_grad(x, y, reduction="sum", backend=b)
    assert b.calls == ["BCEArgs"]
    want = ref.bce_grad(x.astype(np.float64), y.astype(np.float64), 1.0, reduction="sum")
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for bound in (b.kernel("bce_grad"), b.bce_grad):  # the entry, bound to the backend, under the kernel's name
        assert bound.func is _bce and bound.args == (b,)


def test_a_method_beats_the_table_and_an_instance_attribute_beats_both():
    class Overrides(TableOnly):
        def bce_grad(self, a):
            self.calls.append("method")

    b = Overrides()
    b.kernel("bce_grad")(None)
    b.bce_grad = lambda a: b.calls.append("instance")
    b.kernel("bce_grad")(None)
    assert b.calls == ["method", "instance"]


def test_names_off_the_table_stay_missing():
    b = TableOnly()
    assert b.kernel("focal_loss") is None and b.kernel("no_such_kernel") is None
    for name in ("focal_loss", "no_such_kernel", "__setstate__"):
        with pytest.raises(AttributeError, match=name):
            getattr(b, name)
    assert copy.deepcopy(b).calls == [] and copy.copy(b).kernel("bce_grad") is not None
