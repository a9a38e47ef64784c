"""The oracle of the FT78NE's int8 sigmoidcrossentropywithlogits check (xloss.reference.sigmoid_ce_i8): the
exact loss of every int8 (logit, label) pair is PyTorch's float64 loss of the integers, and the acceptance takes
every rounding to a neighbouring integer, saturated, and nothing else."""

from __future__ import annotations

import numpy as np
import torch

from xloss.reference import sigmoid_ce_i8 as oracle

EVERY = np.arange(-128, 128, dtype=np.int8)


def _grid():
    """Every (logit, label) pair of int8."""
    x, y = np.meshgrid(EVERY, EVERY, indexing="ij")
    return x.reshape(-1).copy(), y.reshape(-1).copy()


def test_the_oracle_is_torchs_loss_of_the_integers():
    x, y = _grid()
    want = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.from_numpy(x.astype(np.float64)), torch.from_numpy(y.astype(np.float64)), reduction="none"
    ).numpy()
    np.testing.assert_allclose(oracle.exact(x, y), want, rtol=1e-12, atol=1e-12)
    v = oracle.saturated(x, y)
    for rounded in (np.floor(v), np.ceil(v), np.trunc(v), np.rint(v), np.round(v)):  # every neighbour passes
        assert oracle.accepted(rounded, x, y).all()
    assert not oracle.accepted(np.floor(v) - 1, x, y).any()  # a unit off, per element: none passes
    assert not oracle.accepted(np.ceil(v) + 1, x, y).any()
    # int8 wrap-around instead of saturation: refused wherever it gives another value (x = -128, y = 1 among them)
    r = np.rint(oracle.exact(x, y))
    wrapped = ((r.astype(np.int64) + 128) % 256) - 128
    assert ((~oracle.accepted(wrapped, x, y)) == (wrapped != np.clip(r, -128, 127))).all()
    assert not oracle.accepted(wrapped[(x == -128) & (y == 1)], -128, 1).any()
    # on the check's draws (labels 0 and 1): swapped inputs and labels read as Q7 fractions (y / 127) are refused
    x01, y01 = np.concatenate([EVERY, EVERY]), np.repeat(np.array([0, 1], np.int8), 256)
    swapped = np.clip(np.rint(oracle.exact(y01, x01)), -128, 127)
    assert (~oracle.accepted(swapped, x01, y01)).mean() > 0.6
    q7 = np.clip(np.rint(oracle.exact(x01, y01 / 127)), -128, 127)
    assert not oracle.accepted(q7, x01, y01)[(y01 == 1) & (x01 > 1)].any()
