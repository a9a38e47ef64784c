"""The intervals of `xloss bench` against known distributions: a 95% bootstrap interval of a
median ratio covers the true median in about 95% of repeated experiments, shrinks with more
samples, and the verdicts follow the interval (a ranking word only where it excludes 1)."""

import numpy as np
import pytest

from xloss.bench import stats

TRIALS = 200


def _lognormal_pairs(rng, n, true_ratio, sigma=0.2):
    """Per-round paired times: a shared load factor per round (cancels in the ratio) and a
    lognormal per-round ratio whose median is ``true_ratio``."""
    load = rng.uniform(1.0, 3.0, n)
    den = 0.01 * load
    num = den * true_ratio * np.exp(rng.normal(0.0, sigma, n))
    return num, den


@pytest.mark.parametrize("n", [15, 60])
def test_paired_interval_covers_the_true_median_ratio(n):
    rng = np.random.default_rng(1)
    covered, widths = 0, []
    for _ in range(TRIALS):
        r = stats.paired_ratio(*_lognormal_pairs(rng, n, 1.5))
        covered += r.lo <= 1.5 <= r.hi
        widths.append(r.hi - r.lo)
    assert 0.88 <= covered / TRIALS <= 0.995  # nominal 95%
    # the interval of a median of lognormal(0, 0.2) ratios: about 2 * 1.96 * 1.2533 * 0.2 / sqrt(n) * 1.5 wide
    expected = 2 * 1.96 * 1.2533 * 0.2 / np.sqrt(n) * 1.5
    assert 0.6 * expected <= np.median(widths) <= 1.5 * expected


def test_pairing_removes_the_shared_load():
    """Round loads from 1x to 3x: unpaired, the ratio's interval is wide; paired, it is narrow."""
    num, den = _lognormal_pairs(np.random.default_rng(2), 40, 1.2, sigma=0.05)
    paired = stats.paired_ratio(num, den)
    unpaired = stats.unpaired_ratio(num, den)
    assert paired.lo > 1 and stats.speed_verdict(paired) == stats.FASTER
    assert (paired.hi - paired.lo) * 4 < unpaired.hi - unpaired.lo


def test_unpaired_interval_covers_the_true_ratio():
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(TRIALS):
        old = 0.01 * np.exp(rng.normal(0, 0.2, 30))
        new = 0.012 * np.exp(rng.normal(0, 0.2, 30))
        r = stats.unpaired_ratio(new, old)
        covered += r.lo <= 1.2 <= r.hi
    assert 0.88 <= covered / TRIALS <= 0.995


def test_too_few_pairs_give_no_interval_and_no_ranking():
    r = stats.paired_ratio([2.0, 2.0], [1.0, 1.0])
    assert r.value == 2.0 and r.lo is None and stats.speed_verdict(r) == stats.TOO_FEW
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0], [1.0, 2.0])


@pytest.mark.parametrize("lo, hi, verdict", [
    (1.01, 1.3, stats.FASTER), (0.7, 0.99, stats.SLOWER), (0.95, 1.05, stats.INDISTINGUISHABLE),
    (1.0, 1.2, stats.INDISTINGUISHABLE)])
def test_speed_verdict_follows_the_interval(lo, hi, verdict):
    assert stats.speed_verdict(stats.Ratio((lo + hi) / 2, lo, hi, 10)) == verdict


@pytest.mark.parametrize("value, lo, hi, verdict", [
    (1.30, 1.20, 1.40, stats.SLOWER), (0.70, 0.60, 0.80, stats.FASTER),
    (1.03, 1.01, 1.05, stats.SAME),  # significant but under the 5% threshold
    (1.20, 0.95, 1.50, stats.SAME),  # large but the interval includes 1
])
def test_change_verdict(value, lo, hi, verdict):
    assert stats.change_verdict(stats.Ratio(value, lo, hi, 10), threshold=0.05) == verdict


def test_summary():
    s = stats.Summary.of([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (s.median, s.p20, s.p80, s.samples) == (3.0, 1.8, 4.2, 5)
    assert stats.spread([1.0]) == 1.0
