"""sam3d.stats against hand-computed values."""

import math
import random

import pytest

from sam3d.results import stats


def shuffled(xs, seed=0):
    xs = list(xs)
    random.Random(seed).shuffle(xs)
    return xs


@pytest.mark.parametrize(
    "samples, med, p95, lo, hi",
    [
        ([5.0], 5.0, 5.0, 5.0, 5.0),  # n = 1: rank ceil(0.95) = 1
        ([3.0, 1.0], 2.0, 3.0, 1.0, 3.0),  # n = 2: rank ceil(1.9) = 2
        (shuffled(range(1, 20)), 10.0, 19.0, 1.0, 19.0),  # n = 19: rank ceil(18.05) = 19
        (shuffled(range(1, 21)), 10.5, 19.0, 1.0, 20.0),  # n = 20: rank 19, not the max
        (shuffled(range(1, 22)), 11.0, 20.0, 1.0, 21.0),  # n = 21: rank ceil(19.95) = 20
    ],
)
def test_summary_hand_computed(samples, med, p95, lo, hi):
    s = stats.summarize(samples)
    assert (s.n, s.median, s.p95, s.min, s.max) == (len(samples), med, p95, lo, hi)
    assert stats.median(samples) == med
    assert stats.p95(samples) == p95


def test_p95_is_nearest_rank_not_interpolated():
    xs = [float(x) for x in range(1, 21)]
    assert stats.p95(xs) == 19.0
    assert stats.p95(xs) != pytest.approx(19.05)  # numpy's linear 95th percentile of 1..20


def test_ties():
    # 17 x 10.0, then 30, 30, 40: the 19th smallest is one of the tied 30s.
    xs = shuffled([10.0] * 17 + [30.0, 30.0, 40.0])
    s = stats.summarize(xs)
    assert (s.median, s.p95, s.min, s.max, s.n) == (10.0, 30.0, 10.0, 40.0, 20)
    # all equal
    assert stats.summarize([7.5] * 5) == stats.Summary(5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5)
    # ties at the median of an odd count
    assert stats.median([5.0, 1.0, 5.0, 9.0, 5.0]) == 5.0
    assert stats.p95([5.0, 1.0, 5.0, 9.0, 5.0]) == 9.0  # rank ceil(4.75) = 5


def test_nearest_rank_other_percentiles():
    xs = [float(x) for x in range(1, 11)]
    assert stats.nearest_rank(xs, 50) == 5.0
    assert stats.nearest_rank(xs, 100) == 10.0
    assert stats.nearest_rank(xs, 1) == 1.0
    with pytest.raises(stats.StatsError):
        stats.nearest_rank(xs, 0)


def test_quartiles_linear():
    # positions 0.25*(n-1) = 0.75 and 2.25 in [1, 2, 3, 4]
    assert stats.quartiles([4.0, 1.0, 3.0, 2.0]) == (1.75, 3.25)
    assert stats.summarize([4.0, 1.0, 3.0, 2.0]).q25 == 1.75


def test_empty_and_non_finite_rejected():
    with pytest.raises(stats.StatsError, match="no samples"):
        stats.summarize([])
    with pytest.raises(stats.StatsError, match="non-finite"):
        stats.median([1.0, math.nan])


def test_speedup_constant_ratio():
    sp = stats.speedup([10.0, 12.0, 14.0, 16.0], [5.0, 6.0, 7.0, 8.0])
    assert (sp.ratio, sp.iqr_low, sp.iqr_high, sp.n) == (2.0, 2.0, 2.0, 4)
    assert str(sp) == "2.00x (IQR 2.00-2.00)"


def test_speedup_iqr_of_paired_ratios():
    # ratios off/on = 1, 2, 3, 4 -> IQR 1.75-3.25; median(off)/median(on) = 25/10
    sp = stats.speedup([10.0, 20.0, 30.0, 40.0], [10.0, 10.0, 10.0, 10.0])
    assert sp.ratio == 2.5
    assert (sp.iqr_low, sp.iqr_high) == (1.75, 3.25)
    assert str(sp) == "2.50x (IQR 1.75-3.25)"


def test_speedup_pairs_by_position():
    # Same multisets, different pairing: the median of the paired ratios and their IQR differ.
    a = stats.speedup([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    b = stats.speedup([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0])
    assert (a.ratio, a.iqr_low, a.iqr_high) == (1.0, 1.0, 1.0)
    # ratios 0.25, 0.667, 1.5, 4 -> median (0.667 + 1.5) / 2
    assert b.ratio == pytest.approx((2 / 3 + 1.5) / 2)


def test_speedup_is_the_median_of_paired_ratios_inside_its_iqr():
    # median(off) / median(on) = 30 / 8 = 3.75 lies outside the paired ratios' IQR (3.00-3.00);
    # the median of the ratios (4.0, 3.0, 3.0, 3.0, 2.5) = 3.0 lies inside it.
    off = [32.0, 30.0, 24.0, 24.0, 30.0]
    on = [8.0, 10.0, 8.0, 8.0, 12.0]
    sp = stats.speedup(off, on)
    assert stats.median(off) / stats.median(on) == 3.75
    assert (sp.ratio, sp.iqr_low, sp.iqr_high) == (3.0, 3.0, 3.0)


def test_speedup_needs_equal_lengths():
    with pytest.raises(stats.StatsError, match="paired"):
        stats.speedup([1.0, 2.0], [1.0])


def test_change_needs_significance_and_effect():
    a = [10.0 + 0.01 * i for i in range(20)]  # median 10.095
    slower = stats.change(a, [x * 1.10 for x in a])  # every B sample above most of A's
    assert slower.verdict == "slower" and slower.ratio == pytest.approx(1.10) and slower.p < 0.05
    assert stats.change(a, [x * 0.90 for x in a]).verdict == "faster"
    # significant but below the minimum effect: +1 % is no change at the default 5 %
    small = stats.change(a, [x + 0.2 for x in a])
    assert small.p < 0.05 and small.verdict == "no change"
    assert stats.change(a, [x + 0.2 for x in a], min_effect=0.01).verdict == "slower"
    # a large ratio from 3 samples each is not significant (the test's smallest p is 0.1)
    few = stats.change([10.0, 11.0, 12.0], [13.0, 14.0, 15.0])
    assert few.p >= 0.05 and few.verdict == "no change"
    # identical samples: p = 1
    same = stats.change(a, list(a))
    assert (same.ratio, same.p, same.verdict) == (1.0, 1.0, "no change")


# --- the rules at their edges (docs/benchmark.md, "Statistics"; docs/getting-started.md, compare) ---


def test_nearest_rank_bounds_of_percent():
    """percent in (0, 100]: 100 is the largest sample, 101 and 0 are refused; any percent > 0
    of n samples is at least rank 1."""
    xs = shuffled([float(x) for x in range(1, 21)])
    assert stats.nearest_rank(xs, 100) == 20.0 and stats.nearest_rank(xs, 1) == 1.0
    assert stats.nearest_rank([7.0], 1) == 7.0
    for bad in (0, 101, -5):
        with pytest.raises(stats.StatsError, match=rf"percent must be in \(0, 100\], got {bad}"):
            stats.nearest_rank(xs, bad)


def test_bad_samples_are_named():
    with pytest.raises(stats.StatsError, match=r"^no samples: statistics need at least one sample$"):
        stats.median([])
    with pytest.raises(stats.StatsError, match=r"^off samples contain non-finite values \[inf, nan, inf\]; every"):
        stats.speedup([1.0, math.inf, math.nan, math.inf, -math.inf], [1.0] * 5)
    with pytest.raises(stats.StatsError, match=r"^no on samples"):
        stats.speedup([1.0], [])
    with pytest.raises(stats.StatsError, match=r"^no A samples"):
        stats.change([], [1.0])
    with pytest.raises(stats.StatsError, match=r"^B samples contain non-finite"):
        stats.change([1.0], [math.nan])


def test_a_ratio_needs_positive_denominators():
    """off[i] / on[i] needs every on sample > 0 ms; median(B) / median(A) needs median(A) > 0."""
    with pytest.raises(stats.StatsError, match=r"^on samples must be > 0 ms to form off/on ratios$"):
        stats.speedup([1.0, 2.0], [1.0, 0.0])
    assert stats.paired_ratios([3.0, 2.0], [1.5, 4.0]) == [2.0, 0.5]
    with pytest.raises(stats.StatsError, match=r"^median\(A\) must be > 0 ms to form a ratio$"):
        stats.change([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    assert stats.change([0.0, 1.0, 2.0], [2.0, 2.0, 2.0]).ratio == 2.0
    with pytest.raises(
        stats.StatsError,
        match=r"^on/off speedup needs paired samples: 2 off vs 1 on; both modes "
        r"must time the same images$",
    ):
        stats.speedup([1.0, 2.0], [1.0])


def test_change_thresholds_are_strict_for_p_and_inclusive_for_the_effect():
    """ "slower" or "faster" when p < alpha and B/A differs from 1 by at least min_effect."""
    a = [8.0 + 0.01 * i for i in range(21)]  # median 8.1
    b = [10.125 + 0.01 * i for i in range(21)]  # median 10.225: B/A = 1.2623...
    p = stats.change(a, b).p
    ratio = stats.median(b) / stats.median(a)
    assert stats.change(a, b, alpha=p).verdict == "no change"  # p < p is false
    assert stats.change(a, b, alpha=p * 1.001).verdict == "slower"
    effect = abs(ratio - 1.0)
    assert stats.change(a, b, min_effect=effect).verdict == "slower"  # at least: inclusive
    assert stats.change(a, b, min_effect=effect * 1.001).verdict == "no change"
    assert stats.change(b, a, min_effect=abs(stats.median(a) / stats.median(b) - 1.0)).verdict == "faster"
    # samples all equal on both sides: identical, p = 1 (the test itself is undefined there)
    assert stats.change([5.0] * 10, [5.0] * 10) == stats.Change(ratio=1.0, p=1.0, verdict="no change")


def test_change_uses_the_default_settings_of_compare():
    """Defaults min_effect 0.05 and alpha 0.05 (docs/getting-started.md)."""
    a = [10.0 + 0.01 * i for i in range(20)]
    assert stats.change(a, [x * 1.0499 for x in a]).verdict == "no change"
    assert stats.change(a, [x * 1.0501 for x in a]).verdict == "slower"


def test_summary_and_speedup_of_one_pair():
    s = stats.summarize([2.0, 8.0, 4.0, 6.0])
    assert (s.n, s.median, s.p95, s.min, s.max, s.q25, s.q75) == (4, 5.0, 8.0, 2.0, 8.0, 3.5, 6.5)
    one = stats.speedup([3.0], [2.0])
    assert (one.ratio, one.iqr_low, one.iqr_high, one.n) == (1.5, 1.5, 1.5, 1)


def test_equal_medians_are_no_change_even_at_a_minimum_effect_of_0():
    """B/A = 1 is neither slower nor faster, however significant the test: `compare
    --min-effect 0` once called such a row faster."""
    a = [9.0] * 10 + [10.0] + [11.0] * 10
    b = [9.5] * 10 + [10.0] + [11.5] * 10  # the same median, every other sample higher
    c = stats.change(a, b, min_effect=0.0)
    assert c.ratio == 1.0 and c.p < 0.05 and c.verdict == "no change"
    assert stats.change(a, [x * 1.001 for x in b], min_effect=0.0).verdict == "slower"
