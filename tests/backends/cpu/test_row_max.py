"""``row_max`` (``backends/cpu_onednn/row_max.py``, the fused cross entropy's first walk) against NumPy's
``nanmax`` on runs of every length around its vector width and offsets, in every storage dtype: NaN skipped
wherever it lies, ``-inf`` for a run of only NaN and ``-inf``, infinities kept."""

import numpy as np
import pytest
from numba import njit

from xloss.backends.cpu_onednn.access import storage_view
from xloss.backends.cpu_onednn.row_max import row_max
from xloss.dtypes import FLOAT_DTYPES


@njit
def _maxima(x, starts, lengths, ref, out):
    for i in range(starts.size):
        out[i] = row_max(x, starts[i], lengths[i], ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_row_max_matches_nanmax(dtype):
    rng = np.random.default_rng(5)
    x64 = rng.normal(0, 100, 4096)
    x64[rng.random(x64.size) < 0.02] = np.nan
    x64[[7, 300, 301]] = [np.inf, -np.inf, np.nan]
    x64[1000:1200] = np.nan
    x64[1200:1300] = -np.inf
    x64[1300:1400:2] = np.nan
    x = x64.astype(np.float32).astype(FLOAT_DTYPES[dtype]) if dtype != "float64" else x64
    cases = [(s, n) for s in (0, 1, 5, 290, 1000, 1200, 1300, 3000) for n in (1, 15, 16, 63, 64, 65, 200, 1000)]
    cases = [(s, n) for s, n in cases if s + n <= x.size]
    starts, lengths = (np.array(v, np.int64) for v in zip(*cases))
    cdt = np.float64 if dtype == "float64" else np.float32
    out = np.empty(len(cases), cdt)
    _maxima(storage_view(x), starts, lengths, cdt(0), out)
    wide = x.astype(np.float64)
    for (s, n), got in zip(cases, out):
        run = wide[s:s + n]
        want = -np.inf if np.isnan(run).all() else np.nanmax(run)
        assert got == want, (s, n, got, want)
