"""Statistics of ``xloss bench``: summaries, bootstrap confidence intervals of ratios, verdicts.

A cell's candidates are sampled round by round, so the samples two candidates took in the same
round saw the same machine: their ratio is paired. The speed-up of ``b`` over ``a`` is the median
of the per-round ratios ``a_r / b_r``, and its interval a percentile bootstrap over the rounds
(resampling rounds keeps the pairs). Two saved runs have no common rounds: :func:`unpaired_ratio`
resamples each run on its own. A ranking word is said only where the interval excludes 1.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

#: Confidence level of every interval, bootstrap resamples, and the seed (reproducible intervals).
LEVEL = 0.95
RESAMPLES = 2000
SEED = 20261126
#: Fewer paired samples than this give no interval (a bootstrap of 1 or 2 values says nothing).
MIN_PAIRS = 3


@dataclass(frozen=True)
class Summary:
    median: float
    p20: float
    p80: float
    samples: int

    @classmethod
    def of(cls, values) -> Summary:
        s = sorted(values)
        q = statistics.quantiles(s, n=5, method="inclusive") if len(s) > 1 else [s[0]] * 4
        return cls(statistics.median(s), q[0], q[3], len(s))


@dataclass(frozen=True)
class Ratio:
    """``value`` with its ``LEVEL`` interval [lo, hi] (None: too few samples) over ``pairs`` samples."""

    value: float
    lo: float | None
    hi: float | None
    pairs: int

    def as_dict(self) -> dict:
        return {"ratio": self.value, "ci_low": self.lo, "ci_high": self.hi, "pairs": self.pairs}


def _percentiles(estimates: np.ndarray) -> tuple[float, float]:
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(estimates, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_ratio(num, den) -> Ratio:
    """Median of ``num[r] / den[r]`` over rounds r, with a bootstrap interval over the rounds."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.shape != den.shape or num.size == 0:
        raise ValueError("paired samples need the same, non-zero count")
    r = num / den
    value = float(np.median(r))
    if r.size < MIN_PAIRS:
        return Ratio(value, None, None, int(r.size))
    idx = np.random.default_rng(SEED).integers(0, r.size, (RESAMPLES, r.size))
    lo, hi = _percentiles(np.median(r[idx], axis=1))
    return Ratio(value, lo, hi, int(r.size))


def unpaired_ratio(num, den) -> Ratio:
    """``median(num) / median(den)`` for two independent sample sets (two runs), each resampled on its own."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    value = float(np.median(num) / np.median(den))
    pairs = int(min(num.size, den.size))
    if pairs < MIN_PAIRS:
        return Ratio(value, None, None, pairs)
    rng = np.random.default_rng(SEED)
    a = np.median(num[rng.integers(0, num.size, (RESAMPLES, num.size))], axis=1)
    b = np.median(den[rng.integers(0, den.size, (RESAMPLES, den.size))], axis=1)
    lo, hi = _percentiles(a / b)
    return Ratio(value, lo, hi, pairs)


FASTER, SLOWER, SAME, INDISTINGUISHABLE, TOO_FEW = "faster", "slower", "same", "indistinguishable", "too few samples"


def speed_verdict(speedup: Ratio) -> str:
    """For a speed-up (above 1: faster): "faster" or "slower" only where the interval excludes 1."""
    if speedup.lo is None:
        return TOO_FEW
    if speedup.lo > 1:
        return FASTER
    if speedup.hi < 1:
        return SLOWER
    return INDISTINGUISHABLE


def change_verdict(time_ratio: Ratio, threshold: float) -> str:
    """For new time / old time: "slower" where the interval lies above 1 and the change is at least
    ``threshold`` (a fraction), "faster" likewise below, else "same" (or too few samples)."""
    if time_ratio.lo is None:
        return TOO_FEW
    if time_ratio.lo > 1 and time_ratio.value >= 1 + threshold:
        return SLOWER
    if time_ratio.hi < 1 and time_ratio.value <= 1 / (1 + threshold):
        return FASTER
    return SAME


def spread(values) -> float:
    """p80 / p20 of ``values`` (1 for a single value): the stability measure of one candidate."""
    s = Summary.of(values)
    return s.p80 / s.p20 if s.p20 > 0 else math.inf
