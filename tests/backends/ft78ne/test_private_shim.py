"""The private-memory shim for port authors (libxloss_ft78ne_private.so).

It exports the ft78ne_emu.h helpers xloss needs for memory="private" (not the chip pair, no vendor
operator) and the port-facing ft78ne_shim_* functions. A port links against it; with the emulator
already loaded in the process (RTLD_GLOBAL, as xloss loads libraries) the port's references must
still bind to the shim's arenas, and the adapter's helper look-ups through the port must reach the
same shim.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import abi

from .conftest import SHIM, shim_build

PORT = r"""
#include <string.h>
#define FT78NE_API __attribute__((visibility("default")))
#include "ft78ne.h"
#include "ft78ne_emu.h"
#include "ft78ne_private_shim.h"

/* the manual's BCE gradient, private form only, fp32; errors through the shim's error trio */
void fp_binarycrossentropygrad_p(int n, int reduction, float *x, float *y, float *w, float *dloss, float *dx,
                                 int weight_defined) {
    if (n <= 0 || reduction != 0 || weight_defined)
        return;
    const void *bufs[] = {x, y, dloss, dx};
    for (int i = 0; i < 4; i++)
        if (ft78ne_shim_private_check(bufs[i], (size_t)n * sizeof(float)))
            return; /* recorded by the shim: its ft78ne_emu_last_error reports it */
    for (int i = 0; i < n; i++)
        dx[i] = dloss[i] * (x[i] - y[i]) / (x[i] * (1.0f - x[i]) + FT78NE_BCE_EPS);
}
"""


@pytest.fixture(scope="module")
def shim_and_port(tmp_path_factory, cc):
    out = tmp_path_factory.mktemp("shim")
    shim = shim_build.build(out / "libxloss_ft78ne_private.so", shim=True, quiet=True)
    src = out / "port.c"
    src.write_text(PORT)
    port = out / "libport.so"
    res = subprocess.run([cc, "-std=c11", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Werror",
                          f"-I{SHIM / 'include'}", str(src), "-o", str(port), f"-L{out}", "-lxloss_ft78ne_private",
                          f"-Wl,-rpath,{out}"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return str(shim), str(port)


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_shim_exports_the_private_helpers_and_no_operator(shim_and_port):
    shim, _ = shim_and_port
    out = subprocess.run(["nm", "-D", "--defined-only", shim], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.split()[-2] in "TDB"}
    emu = set(re.findall(r"\b(ft78ne_emu_\w+)\(", abi.EMU_CDEF))
    assert names == (emu - {"ft78ne_emu_set_chip", "ft78ne_emu_chip"}) | {
        "ft78ne_shim_core", "ft78ne_shim_private_check", "ft78ne_shim_last_error_message",
        "ft78ne_shim_private_alloc", "ft78ne_shim_private_free"}
    soname = subprocess.run(["readelf", "-d", shim], capture_output=True, text=True).stdout
    assert "Library soname: [libxloss_ft78ne_private.so]" in soname


def test_port_binds_to_the_shim_even_with_the_emulator_loaded(shim_and_port):
    shim, port = shim_and_port
    emu = abi.load([str(abi.EMULATOR)])  # loaded RTLD_GLOBAL first, with arenas of its own
    emu.ft78ne_emu_private_base(0)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.05, 0.95, 3000).astype(np.float32)
    y = (rng.random(3000) < 0.5).astype(np.float32)
    g = rng.uniform(-1, 1, 3000).astype(np.float32)
    expected = g.astype(np.float64) * (x - y.astype(np.float64)) / (x * (1.0 - x.astype(np.float64)) + 1e-12)
    for lib in (os.pathsep.join([port, shim]), port):  # listed, or found as the port's dependency
        b = xloss.backend("ft78ne", lib=lib, memory="private", core_mask=0x06, private_bytes=4096)
        assert b.availability() == (True, "")
        dx = xloss.bce_grad(x, y, g, reduction="none", eps_mode="add", backend=b)
        np.testing.assert_allclose(dx, expected, rtol=1e-5)
        assert all(int(b.lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8))


def test_the_port_refuses_memory_outside_the_calling_cores_arena(shim_and_port):
    shim, port = shim_and_port
    lib = abi.load([port, shim])
    ffi = lib.ffi
    n = 16
    lib.ft78ne_emu_set_core(3)
    blocks = [lib.ft78ne_emu_private_alloc(3, n * 4) for _ in range(4)]
    try:
        f = [ffi.cast("float *", p) for p in blocks]
        for p in f[:3]:
            ffi.memmove(p, np.full(n, 0.5, np.float32).tobytes(), n * 4)
        ddr = np.full(n, 7.0, np.float32)
        lib.ft78ne_emu_clear_error()
        lib.fp_binarycrossentropygrad_p(n, 0, f[0], f[1], ffi.NULL, f[2], ffi.from_buffer("float[]", ddr), 0)
        msg = ffi.string(lib.ft78ne_emu_last_error_message()).decode()
        assert int(lib.ft78ne_emu_last_error()) == 4 and "not inside core 3's private memory" in msg
        assert (ddr == 7.0).all()
        lib.ft78ne_emu_clear_error()
        lib.fp_binarycrossentropygrad_p(n, 0, f[0], f[1], ffi.NULL, f[2], f[3], 0)
        assert int(lib.ft78ne_emu_last_error()) == 0
        lib.ft78ne_emu_set_core(4)  # the same blocks are core 3's, not core 4's
        lib.fp_binarycrossentropygrad_p(n, 0, f[0], f[1], ffi.NULL, f[2], f[3], 0)
        assert int(lib.ft78ne_emu_last_error()) == 4
    finally:
        for p in blocks:
            assert lib.ft78ne_emu_private_free(3, p) == 0
        lib.ft78ne_emu_set_core(0)


def test_setuptools_builds_both_libraries():
    exts = shim_build.extensions(sanitize=False)
    assert [e.name for e in exts] == ["xloss.backends.ft78ne_shim.libxloss_ft78ne",
                                      "xloss.backends.ft78ne_shim.libxloss_ft78ne_private"]
    assert [os.path.basename(s) for s in exts[1].sources] == ["arena.c"]
    assert "-DFT78NE_PRIVATE_SHIM" in exts[1].extra_compile_args
    assert "-Wl,-soname,libxloss_ft78ne_private.so" in exts[1].extra_link_args
