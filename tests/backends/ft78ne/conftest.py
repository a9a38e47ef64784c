"""Shared helpers of the FT78NE/MT7004 tests: the emulator's cffi handle and ABI call helpers."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
SHIM = REPO / "backends" / "ft78ne_shim"
_spec = importlib.util.spec_from_file_location("ft78ne_shim_build", SHIM / "build.py")
shim_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shim_build)

from xloss.backends.ft78ne_shim import abi  # noqa: E402

FT78NE, MT7004 = abi.CHIPS["ft78ne"], abi.CHIPS["mt7004"]
HERE = Path(__file__).resolve().parent

if not abi.EMULATOR.exists():  # a fresh checkout that was not installed: build it as install would
    try:
        shim_build.build(quiet=True)
    except (OSError, subprocess.CalledProcessError) as exc:  # the tests then report the missing library
        print(f"could not build {abi.EMULATOR}: {exc}")


def pytest_collection_modifyitems(config, items):
    """These tests are about the in-tree emulator: with a port library selected, say so and skip
    (a port is tested by the conformance suite: pytest tests/conformance, xloss check --lib)."""
    if os.environ.get(abi.ENV_VAR):
        skip = pytest.mark.skip(reason=f"tests of the in-tree emulator, but {abi.ENV_VAR} selects another library")
        for item in items:
            if Path(str(item.fspath)).resolve().is_relative_to(HERE):
                item.add_marker(skip)


class Emu:
    """The in-tree emulator through cffi, with helpers that make ABI tests short."""

    def __init__(self):
        self.lib = abi.load([str(abi.EMULATOR)])
        self.ffi = self.lib.ffi

    def p(self, arr):
        """A pointer to a NumPy array's data (NULL for None), typed by its dtype."""
        if arr is None:
            return self.ffi.NULL
        ctype = {"float32": "float", "float16": "half", "int32": "int", "uint8": "unsigned char"}[arr.dtype.name]
        return self.ffi.from_buffer(ctype + "[]", arr)

    def call(self, fname, *args, chip=MT7004):
        """Run a vendor function on this thread as ``chip``; return (status name, message)."""
        self.lib.ft78ne_emu_set_chip(chip)
        getattr(self.lib, fname)(*args)
        return self.status()

    def status(self):
        """(status name, message) of this thread's last call, e.g. ("FT78NE_OK", "")."""
        code = int(self.lib.ft78ne_emu_last_error())
        return abi.STATUS[code], self.ffi.string(self.lib.ft78ne_emu_last_error_message()).decode()

    def private(self, core, arr):
        """A copy of ``arr`` in core's private memory: (numpy view, raw pointer); free with release()."""
        nbytes = max(arr.nbytes, 1)
        raw = self.lib.ft78ne_emu_private_alloc(core, nbytes)
        assert raw != self.ffi.NULL, self.status()
        view = np.frombuffer(self.ffi.buffer(raw, nbytes), dtype=arr.dtype)[:arr.size].reshape(arr.shape)
        view[...] = arr
        return view, raw

    def release(self, core, *raws):
        for raw in raws:
            assert self.lib.ft78ne_emu_private_free(core, raw) == 0, self.status()


@pytest.fixture(scope="session")
def emu():
    return Emu()


@pytest.fixture(scope="session")
def cc():
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    return compiler


@pytest.fixture(scope="session")
def compile_c(cc):
    """compile_c(sources, out, *flags): build a C program or library against the shim's headers."""
    return lambda sources, out, *flags: _compile(cc, sources, out, *flags)


def _compile(cc, sources, out, *flags):
    cmd = [cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-pthread",
           f"-I{SHIM / 'include'}", f"-I{SHIM / 'csrc'}", *map(str, sources), "-o", str(out), *flags, "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out
