"""Fixtures for the ascend backend tests: the emulator backend, raw ABI access, device views.
The helpers themselves live in ascend_support.py (shared with tests/hardening/test_ascend_*.py)."""

from __future__ import annotations

import os
import subprocess

import ascend_support as support  # tests/backends/ascend, on pytest's pythonpath
import numpy as np
import pytest

REPO_PKG = support.PKG
lib_build = support.lib_build
Abi = support.Abi
ABI_OPS, REQUIRED, op_args = support.ABI_OPS, support.REQUIRED, support.op_args
storage_size = support.storage_size


@pytest.fixture(scope="session")
def emu():
    """The ascend backend on the emulator, whatever XLOSS_ASCEND_LIB says."""
    return support.emulator_backend()


@pytest.fixture(scope="session")
def abi(emu):
    return Abi(emu)


@pytest.fixture
def session(emu, abi):
    """A device session; on exit every object the test made must be gone."""
    before = abi.live()
    with emu.session() as s:
        yield s
    assert abi.live() == before, "emulator objects leaked"


def view(s, storage: np.ndarray, shape, strides, offset=0, *, dtype=None):
    """Upload ``storage`` (1-D) and return (aclTensor view, numpy view of the same elements, buffer)."""
    storage = np.ascontiguousarray(storage).reshape(-1)
    buf = s.upload(storage)
    t = s.tensor(buf, shape, storage.dtype if dtype is None else dtype, strides=strides, offset=offset,
                 storage_shape=(storage.size,))
    item = storage.dtype.itemsize
    host = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(shape),
                                           strides=tuple(st * item for st in strides)) if storage.size else \
        np.zeros(shape, storage.dtype)
    return t, np.array(host), buf


def cc() -> str:
    return os.environ.get("CC", "gcc")


def compile_c(args, cwd=None):
    res = subprocess.run([cc(), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="session")
def c_build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ascend_c")


class _Helpers:
    build = lib_build  # the checkout's build.py as a module
    view = staticmethod(view)
    storage_size = staticmethod(storage_size)
    compile_c = staticmethod(compile_c)
    cc = staticmethod(cc)


@pytest.fixture(scope="session")
def helpers():
    """Plain helper functions (tests cannot import conftest under --import-mode=importlib)."""
    return _Helpers


class _Ops:
    names = ABI_OPS
    required = REQUIRED
    args = staticmethod(op_args)


@pytest.fixture(scope="session")
def ops():
    return _Ops
