"""The FT78NE's int8 ``nllloss`` (its ``i8_nllloss_s``), in exact integers: the oracle of xloss's emulation,
whose integer rules are xloss's choice (the manual's page gives int8 log-probabilities and weights, int32 loss and
total weight, and no scale, overflow rule or rounding for the mean).

Each int8 value is the integer itself. Per row ``loss_i = -log_probs[i, y_i] * weight[y_i]`` (exact: at most
128 * 128 in magnitude); ``total_weight = sum_i weight[y_i]``; the sum is exact in Python integers and saturated to
int32 (:func:`expected`). The mean has no published rounding: :func:`mean_accepted` takes either integer next to
the exact quotient ``sum / total_weight``, saturated (truncation toward zero, floor, ceiling and rounding to
nearest all pass; the sum divided by the batch size does not, unless the two agree).
"""

from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
REDUCTIONS = ("none", "sum", "mean")


def saturate(v: int) -> int:
    """``v`` clamped to int32."""
    return max(INT32_MIN, min(INT32_MAX, v))


def row_losses(log_probs, labels, weight) -> np.ndarray:
    """The per-row losses, int64 (exact)."""
    x = np.asarray(log_probs, np.int64)  # batch x classes
    t = np.asarray(labels, np.int64)
    w = np.asarray(weight, np.int64)
    return -(x[np.arange(t.size), t] * w[t])


def exact_sums(log_probs, labels, weight) -> tuple[int, int]:
    """(the sum of the row losses, the sum of the rows' weights), exact Python integers, unsaturated."""
    w = np.asarray(weight, np.int64)
    t = np.asarray(labels, np.int64)
    return int(row_losses(log_probs, labels, weight).sum()), int(w[t].sum())


def expected(log_probs, labels, weight, reduction: str) -> tuple[np.ndarray | None, int | None, int]:
    """(the none loss rows or None, the sum's saturated value or None, total_weight saturated). The mean has no
    single value: :func:`mean_accepted`."""
    total, weights = exact_sums(log_probs, labels, weight)
    rows = row_losses(log_probs, labels, weight) if reduction == "none" else None
    return rows, saturate(total) if reduction == "sum" else None, saturate(weights)


def mean_neighbours(total: int, weights: int) -> tuple[int, int]:
    """The integers next to the exact quotient ``total / weights`` (equal when it is an integer), saturated."""
    q = Fraction(total, weights)
    return saturate(floor(q)), saturate(ceil(q))


def mean_accepted(q: int, log_probs, labels, weight) -> bool:
    """The int32 mean ``q`` is a neighbour of the exact quotient (a nonzero weight sum: the page gives no value
    for a zero one)."""
    total, weights = exact_sums(log_probs, labels, weight)
    return int(q) in mean_neighbours(total, weights)
