"""xloss_half.h, the one binary16/bfloat16 conversion both C emulators use, against NumPy and
ml_dtypes: every fp16 and bf16 bit pattern to float32, and float32 to fp16/bf16 for every rounding
boundary (each tie between neighbours, one ulp either side, the subnormal and overflow edges),
every exponent, and random patterns. NaN: NumPy and ml_dtypes differ from each other (payload
kept unquieted / canonical), so NaN is checked against the header's rule instead, quiet with sign
and top payload bits kept. A tiny harness compiled from the header alone is driven through cffi;
the Ascend emulator's own cast entry point must give the same bits."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
HEADER_DIR = ROOT / "backends" / "common" / "include"
HARNESS = Path(__file__).resolve().parent / "c" / "half_harness.c"
CDEF = """
void harness_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void harness_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void harness_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
void harness_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
"""
EVERY16 = np.arange(2**16, dtype=np.uint16)


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    cc = os.environ.get("CC") or "gcc"
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc})")
    import cffi

    out = tmp_path_factory.mktemp("half") / "libhalf_harness.so"
    subprocess.run([cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", f"-I{HEADER_DIR}",
                    str(HARNESS), "-o", str(out)], check=True)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    lib = ffi.dlopen(str(out))

    def call(name, src, dst_dtype):
        src = np.ascontiguousarray(src)
        dst = np.empty(src.shape, dst_dtype)
        ctype = {2: "uint16_t *", 4: "float *"}
        getattr(lib, "harness_" + name)(ffi.cast(ctype[src.itemsize], ffi.from_buffer(src)),
                                        ffi.cast(ctype[dst.itemsize], ffi.from_buffer(dst)), src.size)
        return dst

    return call


def _bits32(values) -> np.ndarray:
    return np.asarray(values, np.uint32)


def _boundary_bits_f16() -> np.ndarray:
    """Every fp16 rounding boundary in float32 bits, both signs: in the normal range each of the
    2^10 kept mantissas of every exponent with the 13 dropped bits at 0, 1, just below/at/above the
    tie, all ones; in the subnormal range the same at the dropped bits' own position."""
    parts = []
    high = np.arange(1024, dtype=np.uint32) << 13
    low = _bits32([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF])
    exps = np.arange(256, dtype=np.uint32) << 23
    parts.append((exps[:, None, None] | high[None, :, None] | low[None, None, :]).reshape(-1))
    for e in range(102, 113):  # |x| in [2^-25, 2^-14): an fp16 subnormal (or zero, or 2^-14)
        s = 126 - e  # dropped bits of the 24-bit significand
        q = np.arange(1 << (24 - s), dtype=np.uint32)
        half_ = 1 << (s - 1)
        rem = _bits32([0, 1, half_ - 1, half_, half_ + 1, (1 << s) - 1])
        m = (q[:, None] << s | rem[None, :]).reshape(-1)
        m = m[(m >= 0x800000) & (m < 0x1000000)]  # with the implicit bit set
        parts.append((np.uint32(e) << 23) | (m & 0x7FFFFF))
    bits = np.concatenate(parts)
    return np.concatenate([bits, bits | 0x80000000])


def _boundary_bits_bf16() -> np.ndarray:
    high = np.arange(128, dtype=np.uint32) << 16
    low = _bits32([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
    exps = np.arange(256, dtype=np.uint32) << 23
    bits = (exps[:, None, None] | high[None, :, None] | low[None, None, :]).reshape(-1)
    return np.concatenate([bits, bits | 0x80000000])


def _specials() -> np.ndarray:
    f = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, -65520, 2.0**-14, 2.0**-24, 2.0**-25,
                  1.5 * 2.0**-25, 3.4e38, 1e-45, 3.3895314e38, 3.3961776e38], np.float32)
    nans = _bits32([0x7F800001, 0x7FC00000, 0x7FBFFFFF, 0x7FFFFFFF, 0x7F802000, 0x7F801FFF, 0x7FA00000,
                    0xFF800001, 0xFFC00000, 0xFFFFFFFF, 0x7F810000, 0x7F80FFFF])
    return np.concatenate([f.view(np.uint32), nans])


def _probes(boundaries) -> np.ndarray:
    rng = np.random.default_rng(17)
    rand = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([boundaries, _specials(), rand]).view(np.float32)


def _nan_f16(bits32):
    return (((bits32 >> 16) & 0x8000) | 0x7E00 | ((bits32 >> 13) & 0x3FF)).astype(np.uint16)


def _nan_bf16(bits32):
    return ((bits32 >> 16) | 0x0040).astype(np.uint16)


# -- to float32: every bit pattern --------------------------------------------------------------------
def test_every_fp16_widens_exactly(half):
    got = half("f16_to_f32", EVERY16, np.float32).view(np.uint32)
    want = EVERY16.view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(EVERY16.view(np.float16))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    h = EVERY16[nan].astype(np.uint32)  # NaN: sign and payload kept, bit for bit
    np.testing.assert_array_equal(got[nan], ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13))
    assert nan.sum() == 2 * 1023


def test_every_bf16_widens_exactly(half):
    got = half("bf16_to_f32", EVERY16, np.float32).view(np.uint32)
    np.testing.assert_array_equal(got, EVERY16.astype(np.uint32) << 16)
    finite = ~np.isnan(EVERY16.view(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(got[finite],
                                  EVERY16.view(ml_dtypes.bfloat16)[finite].astype(np.float32).view(np.uint32))


# -- from float32: every boundary, every exponent, random patterns -----------------------------------------
def test_fp16_rounds_to_nearest_even(half):
    probes = _probes(_boundary_bits_f16())
    got = half("f32_to_f16", probes, np.uint16)
    bits = probes.view(np.uint32)
    nan = np.isnan(probes)
    with np.errstate(over="ignore", invalid="ignore"):
        want = probes.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(got[nan], _nan_f16(bits[nan]))
    # what the cases reach: ties both ways, subnormals, overflow from finite values
    assert (got[~nan] & 0x7C00 == 0).sum() > 100_000 and (got[np.isfinite(probes)] & 0x7FFF == 0x7C00).sum() > 1000
    assert half("f32_to_f16", np.array([65519.99, 65520, 2.0**-25, 1.5 * 2.0**-25, 1 + 2.0**-11, 1 + 3 * 2.0**-11],
                                       np.float32), np.uint16).tolist() == [0x7BFF, 0x7C00, 0, 1, 0x3C00, 0x3C02]


def test_bf16_rounds_to_nearest_even(half):
    probes = _probes(_boundary_bits_bf16())
    got = half("f32_to_bf16", probes, np.uint16)
    bits = probes.view(np.uint32)
    nan = np.isnan(probes)
    with np.errstate(over="ignore", invalid="ignore"):
        want = probes.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(got[nan], _nan_bf16(bits[nan]))
    assert (got[nan] & 0x7FC0 == 0x7FC0).all()  # quiet
    assert half("f32_to_bf16", np.array([np.finfo(np.float32).max, 1 + 2.0**-8, 1 + 3 * 2.0**-8], np.float32),
                np.uint16).tolist() == [0x7F80, 0x3F80, 0x3F82]


# -- both emulators use it -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, code", [("float16", 1), ("bfloat16", 27)])  # ACL_FLOAT16, ACL_BF16
def test_ascend_emulator_casts_are_the_headers(half, dtype, code):
    """The Ascend runtime's xlossEmuCast gives the harness's bits, NaN included."""
    from xloss.backends.ascend_aclnn import _cdef as C
    from xloss.backends.ascend_aclnn import emulator_library_path
    from xloss.backends.ascend_aclnn.runtime import AclRuntime

    assert (C.ACL_FLOAT16, C.ACL_BF16) == (1, 27)
    try:
        rt = AclRuntime.shared([emulator_library_path()], device=0)
    except Exception as exc:  # noqa: BLE001 - not built here
        pytest.skip(f"ascend emulator unavailable: {exc}")
    lib, ffi = rt.lib, rt.lib.ffi
    name = "f16" if dtype == "float16" else "bf16"
    probes = _probes(_boundary_bits_f16() if dtype == "float16" else _boundary_bits_bf16())
    narrowed = np.empty(probes.shape, np.uint16)
    assert lib.xlossEmuCast(ffi.cast("void *", probes.ctypes.data), C.ACL_FLOAT,
                            ffi.cast("void *", narrowed.ctypes.data), code, probes.size) == 0
    np.testing.assert_array_equal(narrowed, half(f"f32_to_{name}", probes, np.uint16))
    widened = np.empty(EVERY16.shape, np.float32)
    assert lib.xlossEmuCast(ffi.cast("void *", EVERY16.ctypes.data), code,
                            ffi.cast("void *", widened.ctypes.data), C.ACL_FLOAT, EVERY16.size) == 0
    np.testing.assert_array_equal(widened.view(np.uint32), half(f"{name}_to_f32", EVERY16, np.float32).view(np.uint32))


def test_no_emulator_carries_its_own_conversion():
    """The emulators' sources include xloss_half.h by its relative path and convert nowhere else
    (a half's exponent mask or infinity, 0x7C00 / 0x7F800000 >> 13, appears in no other source)."""
    for pkg, header in (("ascend_aclnn", "emu_common.h"), ("ft78ne_shim", "emu.h")):
        csrc = ROOT / "backends" / pkg / "csrc"
        assert '#include "../../common/include/xloss_half.h"' in (csrc / header).read_text()
        assert (csrc / "../../common/include/xloss_half.h").resolve() == HEADER_DIR / "xloss_half.h"
        for src in sorted(csrc.glob("*.[ch]")):
            text = src.read_text()
            assert not re.search(r"0x7[cC]00u?\b", text), f"{src} converts binary16 itself"
