"""The A/B statistics against scipy: the t quantile behind every confidence interval the
benchmarks report, and the interval itself."""

import statistics

import pytest

from loadscope import compare

stats = pytest.importorskip("scipy.stats", reason="scipy (Debian python3-scipy) is the reference")


@pytest.mark.parametrize("df", list(range(1, 31)) + [31, 35, 40, 60, 100, 1000])
def test_t975_matches_scipy(df):
    assert compare.t975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-3)


def test_ratio_summary_interval_matches_scipy():
    num = [4109, 4130, 3954, 4167, 4080, 4001, 4122, 4150, 3990, 4070, 4111]
    den = [4130, 4275, 3902, 4150, 4100, 4060, 4090, 4200, 4010, 4120, 4105]
    r = compare.ratio_summary(num, den)
    ratios = [a / b for a, b in zip(num, den)]
    lo, hi = stats.t.interval(0.95, len(ratios) - 1, loc=statistics.fmean(ratios), scale=stats.sem(ratios))
    assert r["ci95"] == pytest.approx((lo, hi), rel=1e-4)
    assert r["median"] == statistics.median(ratios) and r["n"] == 11


def test_t975_refuses_zero_degrees_of_freedom():
    with pytest.raises(ValueError, match="df >= 1"):
        compare.t975(0)
