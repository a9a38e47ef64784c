"""The cpu backend object: registration, availability without Numba, options, info, and the
guard that keeps Numba's on-disk cache in step with the helper sources."""

import subprocess
import sys
import textwrap

import pytest

import xloss
from xloss.backends.cpu_onednn import cache_guard
from xloss.kernels import KERNELS


def test_registered_available_and_default():
    info = {b.name: b for b in xloss.list_backends()}["cpu"]
    assert info.available, info.reason
    assert set(info.capabilities) == set(KERNELS)  # every kernel of the table
    assert info.capabilities["bce_grad"].variants["eps_mode"] == {"clamp", "add"}
    assert xloss.registry.DEFAULT_ORDER[0] == "cpu"


def test_without_numba_the_backend_is_unavailable_and_xloss_falls_back():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "numba" or name.startswith("numba."):
                    raise ImportError("numba blocked for this test")
        sys.meta_path.insert(0, Block())
        import numpy as np
        import xloss
        b = xloss.backend("cpu")
        ok, why = b.availability()
        assert not ok and "numba" in why, why
        x = np.array([0.5, -1.0], np.float32)
        y = np.array([0.0, 1.0], np.float32)
        print(type(xloss.focal_loss(x, y)).__name__)  # default falls back to the reference
        try:
            xloss.focal_loss(x, y, backend="cpu")
        except xloss.BackendUnavailableError as exc:
            print("unavailable:", exc)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ndarray" in res.stdout and "unavailable:" in res.stdout and "numba" in res.stdout


@pytest.mark.parametrize("options, match", [
    (dict(threads=0), "threads must be a positive integer"),
    (dict(threads=True), "threads must be a positive integer"),
    (dict(blas="mkl"), "blas must be"),
    (dict(flce_chunk_bytes=-1), "flce_chunk_bytes must be a positive integer"),
])
def test_bad_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        xloss.backend("cpu", **options)


def test_unknown_option_is_refused():
    with pytest.raises(TypeError, match="takes options threads, blas, flce_chunk_bytes"):
        xloss.backend("cpu", cores=4)


def test_info_and_repr():
    b = xloss.backend("cpu", threads=1, blas="numpy")
    facts = b.info()
    assert facts["blas in use"] == "numpy" and facts["threads"] == "1" and "numba" in facts
    assert "threads=1" in repr(b) and "blas='numpy'" in repr(b)


def test_cache_guard_drops_stale_entries_only_when_sources_change(tmp_path):
    ours = tmp_path / "focal.focal_both-12.py311.nbi"
    ours_data = tmp_path / "focal.focal_both-12.py311.1.nbc"
    foreign = tmp_path / "othermodule.fn-3.py311.nbi"
    for f in (ours, ours_data, foreign):
        f.write_text("x")
    assert cache_guard.refresh(tmp_path) is True  # no stamp yet: treated as stale
    assert not ours.exists() and not ours_data.exists() and foreign.exists()
    ours.write_text("fresh")
    assert cache_guard.refresh(tmp_path) is False  # stamp matches: kept
    assert ours.exists()
    (tmp_path / "xloss_cpu_onednn.sources").write_text("an older digest\n")
    assert cache_guard.refresh(tmp_path) is True and not ours.exists()
    assert cache_guard.refresh(None) is False
