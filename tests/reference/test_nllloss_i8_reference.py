"""The oracle of the FT78NE's int8 nllloss check (xloss.reference.nllloss_i8): its row losses, sums and weight
sums are PyTorch's float64 nll_loss of the integers (exact: every value is an integer far below 2**53), and the
mean's acceptance takes the integers next to torch's quotient and nothing else."""

from __future__ import annotations

import math

import numpy as np
import torch

from xloss.reference import nllloss_i8 as oracle


def _torch(x, t, w, reduction):
    return torch.nn.functional.nll_loss(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(t.astype(np.int64)),
                                        weight=torch.from_numpy(w.astype(np.float64)), reduction=reduction)


def test_the_oracle_is_torchs_loss_of_the_integers():
    rng = np.random.default_rng(3)
    every = np.arange(-128, 128)
    for n, k in ((256, 256), (300, 7), (1, 1), (5000, 3)):
        x, t, w = rng.integers(-128, 128, (n, k)), rng.integers(0, k, n), rng.integers(-128, 128, k)
        if k == 256:  # every product of two int8 values' extremes: x[i, i] against w[i]
            x[np.arange(n), np.arange(n)], t, w = every, np.arange(n), every
        x, w = x.astype(np.int8), w.astype(np.int8)
        rows, _, weights = oracle.expected(x, t, w, "none")
        assert (rows == _torch(x, t, w, "none").numpy()).all()
        total, _ = oracle.exact_sums(x, t, w)
        assert total == _torch(x, t, w, "sum").item() and weights == int(w.astype(np.int64)[t].sum())
        if weights:
            mean = _torch(x, t, w, "mean").item()  # torch: the sum over the weight sum
            lo, hi = oracle.mean_neighbours(total, weights)
            assert lo == math.floor(mean) and hi == math.ceil(mean) or lo == hi == round(mean)
            assert oracle.mean_accepted(math.trunc(mean), x, t, w) and oracle.mean_accepted(round(mean), x, t, w)
            assert not oracle.mean_accepted(lo - 1, x, t, w) and not oracle.mean_accepted(hi + 1, x, t, w)


def test_saturation_and_the_means_neighbours():
    assert oracle.saturate(2**31) == 2**31 - 1 and oracle.saturate(-(2**31) - 1) == -(2**31)
    assert oracle.mean_neighbours(-28, 5) == (-6, -5) and oracle.mean_neighbours(28, -5) == (-6, -5)
    assert oracle.mean_neighbours(30, 5) == (6, 6) and oracle.mean_neighbours(2**40, 1) == (2**31 - 1,) * 2
