"""``vecmath.log_short_f64`` (the float32-precision log in float64 behind the BCE forward and ``pow_f32``)
against NumPy's float64 log: relative error below 2**-36 on float32 inputs (subnormals included) and on
the ``1 - x`` the BCE forward takes its log1p from."""

import numpy as np
from numba import njit

from xloss.backends.cpu_onednn.vecmath import log_short_f64


@njit(error_model="numpy")
def _logs(q):
    out = np.empty_like(q)
    for i in range(q.size):
        out[i] = log_short_f64(q[i])
    return out


def test_relative_error_on_float32_inputs_and_one_minus_them():
    bits = np.arange(1, 0x3F800001, 3331, dtype=np.uint32)  # every 3331st float32 in (0, 1], subnormals first
    x = np.concatenate([bits.view(np.float32), np.float32([1.0, 2.0**-149, 0.5, 3.4e38])]).astype(np.float64)
    q = np.concatenate([x, 1.0 - x[x <= 1.0]])
    q = q[q > 0]
    want = np.log(q)
    err = np.abs(_logs(q) - want)
    assert np.all(err <= 2.0**-36 * np.abs(want)), (err / np.maximum(np.abs(want), 1e-300)).max()
