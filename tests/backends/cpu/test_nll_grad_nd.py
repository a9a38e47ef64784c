"""The cpu NLL backward on (N, C, d1, ..., dk) input: the Numba kernel's blocks (whole samples, and ranges of the
trailing positions of one sample when a sample holds more than a block) against the float64 reference, each
value rounded once."""

import numpy as np
import pytest

import xloss
from xloss import reference as ref


@pytest.mark.parametrize("shape", [(3, 5, 4, 7), (1, 3, 200, 150), (2, 40000, 3), (5, 2, 7, 1, 3)],
                         ids=["small", "one sample past a block", "many classes", "5-D"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cpu_matches_the_reference_rounded_once(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = -rng.random(shape).astype(dtype)
    t_shape = (shape[0], *shape[2:])
    t = rng.integers(0, shape[1], t_shape)
    t[rng.random(t_shape) < 0.2] = -100
    g = rng.uniform(-2, 2, t_shape).astype(dtype)
    w = rng.uniform(0, 2, shape[1]).astype(dtype)
    for reduction, grad in (("none", g), ("mean", 0.5), ("sum", -1.25)):
        out = np.full(shape, np.nan, dtype)  # every element written
        xloss.nll_loss_grad(grad, x, t, weight=w, reduction=reduction, backend="cpu", out=out)
        want = ref.nll_loss_grad(grad, x, t, weight=w, reduction=reduction).astype(dtype)
        np.testing.assert_array_equal(out, want)
