"""The A/B statistics against scipy and against synthetic experiments with known answers:
t quantiles, per-arm intervals, and the relative effect's interval covering the true effect
at its nominal rate."""

import math
import random
import statistics

import pytest

from loadscope.bench import arms as bench_arms
from loadscope.bench import stats

sps = pytest.importorskip("scipy.stats", reason="scipy (Debian python3-scipy) is the reference")


@pytest.mark.parametrize("df", list(range(1, 32)) + [40, 60, 100, 1000])
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_t_quantile_matches_scipy(df, confidence):
    assert stats.t_quantile(confidence, df) == pytest.approx(sps.t.ppf(0.5 + confidence / 2, df), rel=1e-7)


def test_summary_interval_matches_scipy():
    xs = [4109.0, 4130.0, 3954.0, 4167.0, 4080.0, 4001.0, 4122.0]
    s = stats.summarize(xs)
    logs = [math.log(x) for x in xs]  # positive values: the interval of the geometric mean
    lo, hi = sps.t.interval(0.95, len(xs) - 1, loc=statistics.fmean(logs), scale=sps.sem(logs))
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-9)
    assert s["ci"] == "geometric mean"
    assert s["median"] == 4109.0 and s["sd"] == pytest.approx(statistics.stdev(xs)) and s["n"] == 7
    zs = [-1.0, 0.5, 2.0]  # not all positive: the plain interval of the mean
    z = stats.summarize(zs)
    lo, hi = sps.t.interval(0.95, 2, loc=statistics.fmean(zs), scale=sps.sem(zs))
    assert (z["ci_low"], z["ci_high"]) == pytest.approx((lo, hi), rel=1e-9) and z["ci"] == "mean"


def test_a_wild_repetition_does_not_push_the_interval_below_zero():
    s = stats.summarize([4300.0, 90.0])  # two repetitions, one ruined
    assert 0 < s["ci_low"] < s["ci_high"]


def test_ratio_summary_interval_matches_scipy():
    num = [4109, 4130, 3954, 4167, 4080, 4001, 4122, 4150, 3990, 4070, 4111]
    den = [4130, 4275, 3902, 4150, 4100, 4060, 4090, 4200, 4010, 4120, 4105]
    r = bench_arms.ratio_summary(num, den)
    ratios = [a / b for a, b in zip(num, den)]
    lo, hi = sps.t.interval(0.95, len(ratios) - 1, loc=statistics.fmean(ratios), scale=sps.sem(ratios))
    assert r["ci95"] == pytest.approx((lo, hi), rel=1e-6)


def _experiment(rng, n, effect, drift_sd, noise_sd):
    """One synthetic interleaved experiment: every round shares a drift (the machine got
    slower or faster), each run adds its own noise; the arm is `effect` faster."""
    base, arm = [], []
    for _ in range(n):
        drift = rng.gauss(0, drift_sd)
        base.append(1000 * math.exp(drift + rng.gauss(0, noise_sd)))
        arm.append(1000 * (1 + effect) * math.exp(drift + rng.gauss(0, noise_sd)))
    return base, arm


@pytest.mark.parametrize("paired", [True, False])
def test_effect_intervals_cover_the_true_effect_at_the_nominal_rate(paired):
    rng = random.Random(1234)  # fixed: the test is deterministic
    trials = [stats.relative_effect(*_experiment(rng, 5, 0.10, 0.05, 0.03), paired=paired) for _ in range(4000)]
    cov = stats.coverage(trials, 0.10)
    # Paired intervals are exact for this model; Welch's ignore the shared drift (wider, so
    # they over-cover) and round their degrees of freedom down (also conservative).
    assert 0.94 <= cov <= 0.96 if paired else cov >= 0.94
    # And the paired interval is the sharper one when rounds drift together.
    width = lambda ts: statistics.median(t["ci_high"] - t["ci_low"] for t in ts)  # noqa: E731
    if paired:
        rng = random.Random(1234)
        welch = [stats.relative_effect(*_experiment(rng, 5, 0.10, 0.05, 0.03), paired=False) for _ in range(500)]
        assert width(trials) < 0.7 * width(welch)


def test_no_effect_is_not_significant_at_about_the_nominal_rate():
    rng = random.Random(99)
    trials = [stats.relative_effect(*_experiment(rng, 6, 0.0, 0.05, 0.03), paired=True) for _ in range(4000)]
    false_positives = sum(stats.significant(t) for t in trials) / len(trials)
    assert 0.04 <= false_positives <= 0.06


def test_a_large_effect_is_detected_and_its_sign_kept():
    base, arm = [100.0, 101.0, 99.0, 100.5], [80.0, 81.0, 79.5, 80.2]
    e = stats.relative_effect(base, arm, paired=True)
    assert e["effect"] == pytest.approx(-0.2, abs=0.01) and e["ci_high"] < 0 and stats.significant(e)


def test_bad_arguments_fail_with_what_is_allowed():
    with pytest.raises(ValueError, match="df >= 1"):
        stats.t_quantile(0.95, 0)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        stats.t_quantile(1.5, 3)
    with pytest.raises(ValueError, match="as many baseline as arm values"):
        stats.relative_effect([1, 2, 3], [1, 2], paired=True)


def test_intervals_stay_within_what_a_quantity_can_be():
    shares = stats.summarize([0.90, 0.99, 0.93], upper=1.0)
    assert shares["ci_high"] <= 1.0 and shares["ci_low"] > 0
    rates = stats.summarize([0.0, 3.0, 0.0])  # a zero among them: the plain interval, not below zero
    assert rates["ci"] == "mean" and rates["ci_low"] == 0.0 and rates["ci_high"] > 1.0
