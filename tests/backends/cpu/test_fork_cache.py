"""Forked children load the serial kernel twins from Numba's disk cache (issue 26): they used
Numba's NullCache, so the first cpu call in every DataLoader or Pool worker compiled every kernel
again (2.8-4.9 s on the 2-core reference machine)."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")


def test_a_serial_twin_is_cached_on_disk_beside_its_parallel_kernel():
    from xloss.backends.cpu_onednn import focal as F
    from xloss.backends.cpu_onednn import threads as T

    assert T._is_parallel_dispatcher(F.focal_both)
    twin = T._serial_twin(F.focal_both)  # (compiles nothing until called)
    assert type(twin._cache).__name__ != "NullCache"
    assert twin._cache._cache_path == F.focal_both._cache._cache_path
    assert twin._cache._cache_file._index_name != F.focal_both._cache._cache_file._index_name  # its own


@pytest.mark.slow
def test_the_second_forked_child_compiles_nothing():
    """Two children forked in turn after a parallel call: the second finds every twin it runs on disk."""
    script = textwrap.dedent("""
        import os
        import numpy as np
        import xloss
        from xloss.backends.cpu_onednn import threads as T

        x = np.linspace(-4, 4, 300_000, dtype=np.float32); y = (x > 1).astype(np.float32)
        xloss.focal_loss_with_grad(x, y, reduction="sum", backend="cpu")
        if not T.fork_unsafe_layer():
            print("skip: the threading layer survives fork, no serial twins"); raise SystemExit(0)
        for child in range(2):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                xloss.focal_loss_with_grad(x, y, reduction="sum", backend="cpu")
                hits = sum(sum(t.stats.cache_hits.values()) for t in T._twins.values())
                misses = sum(sum(t.stats.cache_misses.values()) for t in T._twins.values())
                os.write(w, f"{hits} {misses}".encode()); os._exit(0)
            os.waitpid(pid, 0)
            hits, misses = map(int, os.read(r, 100).split())
        print("second child:", hits, "hits", misses, "misses")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.startswith("skip"):
        pytest.skip(out.stdout.strip())
    hits, misses = out.stdout.split()[2], out.stdout.split()[4]
    assert int(hits) >= 1 and int(misses) == 0, out.stdout
