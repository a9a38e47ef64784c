"""Resource release of the FT78NE/MT7004 backend and emulator (issue 9).

* Thousands of calls through the adapter, shared and private, succeeding and failing at every
  stage (refused by the emulator, staging budget larger than the private memory so that an
  allocation fails half-way, a tile failing on one core while others run): every arena ends with
  no block allocated, the per-thread error is clear again, and the process's resident memory stays
  flat.
* Tens of thousands of private alloc/free cycles, interleaved with _p calls that take scratch:
  no block is left, and the whole arena can be had again in one piece.
* valgrind on the manual's C example and the threaded stress driver: no leak, no memory error
  (scripts/ft78ne_valgrind.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.conformance.flce import shard_case

if os.environ.get(abi.ENV_VAR):
    pytest.skip(f"tests the in-tree emulator, but {abi.ENV_VAR} selects another library", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _lib():
    return abi.load([str(abi.EMULATOR)])


def _in_use(lib):
    return [int(lib.ft78ne_emu_private_in_use(c)) for c in range(8)]


def _workload():
    """One round of calls, each kind of success and failure once; returns how many calls it made."""
    rng = np.random.default_rng(0)
    cap = int(_lib().ft78ne_emu_private_capacity())
    x = rng.uniform(0.05, 0.95, 3000).astype(np.float32)
    y = (rng.random(3000) < 0.5).astype(np.float32)
    s = np.log(rng.dirichlet(np.ones(20), 64)).astype(np.float32)
    t = rng.integers(0, 20, 64)
    fl = shard_case("float32", "softmax", x=rng.uniform(-1, 1, (9, 6)), w_global=rng.uniform(-1, 1, (16, 6)),
                    target=rng.integers(0, 16, 9), start=0, v=16, grad=rng.uniform(-1, 1, 9)).kwargs
    ok = [xloss.backend("ft78ne", core_mask=0x0F), xloss.backend("mt7004", core_mask=0xFF),
          xloss.backend("ft78ne", memory="private", core_mask=0x07, private_bytes=4096),
          xloss.backend("mt7004", memory="private", core_mask=0x81)]
    calls = 0
    for b in ok:
        xloss.bce_grad(x, y, reduction="mean", eps_mode="add", backend=b)
        xloss.focal_loss_with_grad(x * 8 - 4, y, reduction="sum", backend=b)
        xloss.nll_loss_grad(1.0, s, t, backend=b)
        xloss.fused_linear_cross_entropy_grad(**fl, backend=b)
        # issue 30's operators: nllloss, binarycrossentropy, sigmoidcrossentropywithlogits(grad), the
        # sparse and the dense softmax_cross_entropy_with_logits
        xloss.nll_loss(s, t, reduction="sum", backend=b)
        xloss.binary_cross_entropy(x, y, backend=b)
        xloss.bce_with_logits_with_grad(x * 8 - 4, y, reduction="none", backend=b)
        xloss.cross_entropy_loss(s, t, backend=b)
        xloss.softmax_cross_entropy_with_logits(s, np.exp(s), backend=b)
        calls += 9
    failing = [
        # the staging budget exceeds the private memory: an allocation fails after others succeeded
        (xloss.backend("ft78ne", memory="private", core_mask=0x03, private_bytes=2 * cap),
         lambda b: xloss.bce_grad(np.full(cap // 2, 0.5, np.float32), np.zeros(cap // 2, np.float32),
                                  eps_mode="add", backend=b)),
        # one element does not fit the budget: refused before anything is allocated
        (xloss.backend("mt7004", memory="private", private_bytes=64),
         lambda b: xloss.focal_loss(x, y, backend=b)),
        # too large for a row of FLCE: refused by the planner
        (xloss.backend("ft78ne", memory="private", private_bytes=256),
         lambda b: xloss.fused_linear_cross_entropy_grad(**fl, backend=b)),
    ]
    for b, f in failing:
        with pytest.raises(xloss.KernelError):
            f(b)
        calls += 1
    return calls


def test_thousands_of_calls_release_everything_and_rss_stays_flat():
    lib = _lib()
    warm = 0  # warm up: caches, lazily created arenas, cffi types, and the C allocator's per-thread
    while warm < 1500:  # arenas of the staging workers (one per core: a plateau, not a leak)
        warm += _workload()
    before = _rss_bytes()
    calls = 0
    while calls < 2000:
        calls += _workload()
        assert _in_use(lib) == [0] * 8
    grown = _rss_bytes() - before
    assert int(lib.ft78ne_emu_last_error()) in (0, 5)  # this thread's last error is the last call's own
    # 2000 calls moving ~100 KB each: a leak of even one buffer per call would be tens of MB
    assert grown < 8 * 2**20, f"resident memory grew by {grown / 2**20:.1f} MiB over {calls} calls"


def test_failure_on_one_core_mid_tiles_releases_every_core(monkeypatch):
    """A tile that fails (here: the library reports an error for the third call) stops the other
    cores; every core's buffers are freed."""
    lib = _lib()
    b = xloss.backend("mt7004", memory="private", core_mask=0xFF, private_bytes=2048)
    real = b._invoke
    seen = []

    def flaky(fname, *args):
        seen.append(fname)
        if len(seen) == 3:
            raise xloss.KernelError("injected failure", status=2, status_name="FT78NE_ERR_INVALID_ARGUMENT")
        return real(fname, *args)

    monkeypatch.setattr(b, "_invoke", flaky)
    x = np.linspace(0.1, 0.9, 5000).astype(np.float32)
    out = np.full(5000, 7.0, np.float32)
    for _ in range(50):
        seen.clear()
        with pytest.raises(xloss.KernelError, match="injected"):
            xloss.bce_grad(x, x, eps_mode="add", backend=b, out=out)
        assert _in_use(lib) == [0] * 8 and (out == 7.0).all()


def test_private_alloc_free_cycles_leave_the_arenas_whole():
    lib = _lib()
    ffi = lib.ffi
    cap = int(lib.ft78ne_emu_private_capacity())
    rng = np.random.default_rng(5)
    live = {c: [] for c in range(8)}
    g = np.zeros(4, np.float32)
    for i in range(20000):
        core = int(rng.integers(0, 8))
        if live[core] and (rng.random() < 0.5 or len(live[core]) > 40):
            p = live[core].pop(int(rng.integers(0, len(live[core]))))
            assert lib.ft78ne_emu_private_free(core, p) == 0
        else:
            p = lib.ft78ne_emu_private_alloc(core, int(rng.integers(0, 9000)))
            if p != ffi.NULL:
                live[core].append(p)
        if i % 500 == 0:  # a _p call that takes (and must give back) private scratch
            lib.ft78ne_emu_set_core(core)
            buf = lib.ft78ne_emu_private_alloc(core, 1024)
            if buf != ffi.NULL:
                f = ffi.cast("float *", buf)
                mask = ffi.cast("unsigned char *", f + 200)
                mt = ffi.cast("int *", f + 210)
                ffi.memmove(f, ffi.from_buffer(g), 16)
                ffi.memmove(mask, b"\x01\x01", 2)
                before = int(lib.ft78ne_emu_private_in_use(core))
                lib.fp_fusedlinearcrossentropylossgrad_p(2, 8, 2, f, f + 8, f + 32, mask, mt, f + 48, f + 52,
                                                         ffi.NULL, f + 64, f + 96, 0, 0)
                assert int(lib.ft78ne_emu_last_error()) in (0, 5)  # 5: no gap left for the scratch
                assert int(lib.ft78ne_emu_private_in_use(core)) == before
                assert lib.ft78ne_emu_private_free(core, buf) == 0
    for core, blocks in live.items():
        for p in blocks:
            assert lib.ft78ne_emu_private_free(core, p) == 0
    lib.ft78ne_emu_set_core(0)
    assert _in_use(lib) == [0] * 8
    for core in range(8):
        whole = lib.ft78ne_emu_private_alloc(core, cap)
        assert whole == lib.ft78ne_emu_private_base(core)
        assert lib.ft78ne_emu_private_free(core, whole) == 0


@pytest.mark.slow  # programs under valgrind
@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None, reason="needs valgrind and gcc")
def test_valgrind_finds_no_leak_in_the_c_example_and_stress(tmp_path):
    res = subprocess.run(["sh", str(REPO / "scripts" / "ft78ne_valgrind.sh"), "--stress", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("ERROR SUMMARY: 0 errors") == 2 and "definitely lost: 0 bytes" in res.stdout
