"""The cross entropy's exp(d), d <= 0, written in d (sigmoid_terms.exp_nonpositive_f32): the bits of
exp(-|x|) at x = d, for every kind of non-positive float32, and NaN for NaN."""

import numpy as np
from numba import njit

from xloss.backends.cpu_onednn.sigmoid_terms import exp_neg_abs_f32, exp_nonpositive_f32


@njit
def _both(d, a, b):
    for i in range(d.size):
        a[i] = exp_nonpositive_f32(d[i])
        b[i] = exp_neg_abs_f32(d[i])


def test_same_bits_as_exp_of_minus_abs():
    rng = np.random.default_rng(7)
    bits = rng.integers(0x80000000, 0xFF800001, 200_000, dtype=np.uint64).astype(np.uint32)  # every d <= 0
    edges = np.float32([0.0, -0.0, -1e-45, -1.1754942e-38, -0.34657359, -0.34657362, -87.33655, -88.72284,
                        -103.27893, -103.97208, -104.0, -104.00001, -149.0, -3.4028235e38, -np.inf])
    d = np.concatenate([bits.view(np.float32), -np.abs(rng.standard_normal(50_000).astype(np.float32)) * 30, edges])
    a, b = np.empty_like(d), np.empty_like(d)
    _both(d, a, b)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    nan = np.float32([np.nan, -np.nan])
    a, b = np.empty_like(nan), np.empty_like(nan)
    _both(nan, a, b)
    assert np.isnan(a).all()
