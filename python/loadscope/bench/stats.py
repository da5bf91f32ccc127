"""The statistics of an A/B experiment: per-arm summaries with t intervals, and the relative
effect of an arm against the baseline with its interval. No scipy: Student's t distribution
for integer degrees of freedom has a closed form, inverted here by bisection (tested against
scipy in tests/python/test_bench_stats.py)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Sequence


def t_cdf_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer `df` (Abramowitz & Stegun 26.7.3-4)."""
    if df < 1:
        raise ValueError(f"Student's t needs df >= 1, got {df}")
    t = abs(t)
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:  # odd: 2/pi * (theta + sin(theta) * (cos + 2/3 cos^3 + ...))
        if df == 1:
            return 2 * theta / math.pi
        term, acc = math.cos(theta), math.cos(theta)
        for k in range(3, df - 1, 2):  # coefficient (k-1)/k times the previous, cos^2 more
            term *= c2 * (k - 1) / k
            acc += term
        return 2 / math.pi * (theta + math.sin(theta) * acc)
    term, acc = 1.0, 1.0  # even: sin(theta) * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
    for k in range(2, df - 1, 2):
        term *= c2 * (k - 1) / k
        acc += term
    return math.sin(theta) * acc


def t_quantile(confidence: float, df: int) -> float:
    """The t with P(|T| <= t) = confidence: the multiplier of a two-sided interval."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lo, hi = 0.0, 1.0
    while t_cdf_two_sided(hi, df) < confidence:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if t_cdf_two_sided(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def summarize(values: Sequence[Optional[float]], confidence: float = 0.95, upper: Optional[float] = None) -> Dict[str, Any]:
    """n, median, mean, standard deviation, min, max and a t interval. For positive values (all
    the harness measures: rates, times, memory) the interval is of the geometric mean, computed
    on logarithms like the effects: it stays positive and is not stretched by one slow run.
    Otherwise it is the plain t interval of the mean. `ci` says which."""
    xs = [float(v) for v in values if v is not None]
    out: Dict[str, Any] = {"n": len(xs), "median": None, "mean": None, "sd": None,
                                       "min": None, "max": None, "ci_low": None, "ci_high": None, "ci": None}
    if not xs:
        return out
    out.update(median=statistics.median(xs), mean=statistics.fmean(xs), min=min(xs), max=max(xs))
    if len(xs) > 1:
        out["sd"] = statistics.stdev(xs)
        t = t_quantile(confidence, len(xs) - 1)
        if min(xs) > 0:
            logs = [math.log(x) for x in xs]
            m, half = statistics.fmean(logs), t * statistics.stdev(logs) / math.sqrt(len(xs))
            out.update(ci_low=math.exp(m - half), ci_high=math.exp(m + half), ci="geometric mean")
        else:
            half = t * out["sd"] / math.sqrt(len(xs))
            # Nothing measured here is negative (a rate, a time, a size): nor is its interval.
            low = out["mean"] - half if min(xs) < 0 else max(0.0, out["mean"] - half)
            out.update(ci_low=low, ci_high=out["mean"] + half, ci="mean")
        if upper is not None and out["ci_high"] is not None:  # a share cannot exceed 1
            out["ci_high"] = min(upper, out["ci_high"])
    return out


def relative_effect(baseline: Sequence[Optional[float]], arm: Sequence[Optional[float]], *, paired: bool,
                    confidence: float = 0.95) -> Dict[str, Optional[float]]:
    """arm / baseline - 1 with an interval, computed on logarithms (ratios are multiplicative
    and skewed; the log makes the interval symmetric and keeps it above -100%).

    paired=True: the i-th values of both ran back to back (interleaved rounds), so drift that
    moves a round moves both; the interval is a one-sample t interval of the per-round log
    ratios. paired=False: Welch's interval for the difference of the log means (degrees of
    freedom rounded down, which widens it slightly)."""
    a = [math.log(v) for v in baseline if v is not None and v > 0]
    b = [math.log(v) for v in arm if v is not None and v > 0]
    out: Dict[str, Optional[float]] = {"effect": None, "ci_low": None, "ci_high": None,
                                       "paired": paired, "confidence": confidence}
    if not a or not b:
        return out
    half: Optional[float] = None
    if paired:
        if len(a) != len(b):
            raise ValueError(f"a paired effect needs as many baseline as arm values ({len(a)} vs {len(b)})")
        d = [y - x for x, y in zip(a, b)]
        mean = statistics.fmean(d)
        if len(d) > 1:
            half = t_quantile(confidence, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    else:
        mean = statistics.fmean(b) - statistics.fmean(a)
        if len(a) > 1 and len(b) > 1:
            va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
            if va + vb > 0:
                df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
            else:
                df = len(a) + len(b) - 2
            half = t_quantile(confidence, max(1, int(df))) * math.sqrt(va + vb)
    out["effect"] = math.exp(mean) - 1
    if half is not None:
        out["ci_low"], out["ci_high"] = math.exp(mean - half) - 1, math.exp(mean + half) - 1
    return out


def significant(effect: Dict[str, Optional[float]]) -> Optional[bool]:
    """Whether the interval excludes zero; None without an interval."""
    lo, hi = effect.get("ci_low"), effect.get("ci_high")
    if lo is None or hi is None:
        return None
    return lo > 0 or hi < 0


def coverage(trials: List[Dict[str, Optional[float]]], truth: float) -> float:
    """The share of intervals that contain `truth` (used to test the intervals themselves)."""
    bounds = [(e.get("ci_low"), e.get("ci_high")) for e in trials]
    hits = [lo <= truth <= hi for lo, hi in bounds if lo is not None and hi is not None]
    return sum(hits) / len(hits) if hits else float("nan")
