"""The on-target records of C strings and bools (CANN's ``char *`` reductions, ``bool`` flags): the export refuses to
write a malformed one, and the Ascend runner refuses to read one, with a message naming what is wrong, before it
calls anything (a cases file is data, never code)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from xloss.backends.ascend_aclnn import emulator_library_path, emulator_runtime_path, ontarget
from xloss.conformance.export_format import (
    ARG_BOOL,
    ARG_NULL,
    ARG_STRING,
    CASES_MAGIC,
    MAX_STRING,
    Bool,
    OnTargetFormatError,
    String,
)

CC = os.environ.get("CC", "gcc").split()[0]
OP = "aclnnCrossEntropyLossGrad"


@pytest.mark.parametrize("value", [b"me\x00an", b"mean\n", "mean", b"x" * (MAX_STRING + 1), "\u00e9".encode()])
def test_the_export_refuses_a_string_it_could_not_replay(value):
    with pytest.raises(OnTargetFormatError, match="printable ASCII of at most 63 bytes"):
        String(value)


@pytest.mark.parametrize("value", [1, 0, None, "true"])
def test_the_export_refuses_a_bool_that_is_not_one(value):
    with pytest.raises(OnTargetFormatError, match="must be True or False"):
        Bool(value)


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    if shutil.which(CC) is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("records")
    ontarget.write_runner(folder, {}, [{"fname": OP, "buffers": []}])
    rt = emulator_runtime_path()
    res = subprocess.run([str(folder / "build.sh"), str(emulator_library_path()), rt, f"-Wl,-rpath,{Path(rt).parent}"],
                         capture_output=True, text=True, env=dict(os.environ, CC=CC), check=False)
    assert res.returncode == 0, res.stderr
    return folder


def _call(*args: bytes) -> bytes:
    """One CALL record of OP whose arguments are the given encoded arguments."""
    name = OP.encode()
    return b"CALL" + struct.pack("<IIi", 0, 1, -1) + bytes([len(name)]) + name + bytes([len(args)]) + b"".join(args)


@pytest.mark.parametrize("arg,message", [
    (bytes([ARG_STRING, 4]) + b"me\x01n", "a string argument with a byte that is not printable ASCII"),
    (bytes([ARG_STRING, 4]) + b"me\xe9n", "a string argument with a byte that is not printable ASCII"),
    (bytes([ARG_STRING, MAX_STRING + 1]) + b"m" * (MAX_STRING + 1), "a string argument longer than 63 bytes"),
    (bytes([ARG_BOOL, 2]), "a bool argument that is neither 0 nor 1"),
], ids=["control byte", "non-ASCII byte", "too long", "bool 2"])
def test_the_runner_refuses_a_malformed_record(runner, tmp_path, arg, message):
    (tmp_path / "out").mkdir()
    (tmp_path / "cases.bin").write_bytes(CASES_MAGIC + struct.pack("<II", 1, 0) + _call(bytes([ARG_NULL]), arg))
    res = subprocess.run([str(runner / "xloss_runner"), str(tmp_path)], capture_output=True, text=True, check=False,
                         timeout=60)
    assert res.returncode == 2 and f"xloss_runner: cases.bin: {message}" in res.stderr, res.stderr
    assert not (tmp_path / "out" / "results.bin").exists() or (tmp_path / "out" / "results.bin").stat().st_size <= 8
