"""Seed statistics for the reproduction suite: means with 95% Student-t intervals, paired differences.

Standard library only. Runs of two arms at the same seed start from the same warm-started model, so differences are
paired by seed (the interval is over the mean of per-seed differences). Why t and not a bootstrap: the suite runs a
handful of seeds, where a percentile bootstrap's interval is too narrow (with 2 seeds it is [min, max]; with no true
difference it excludes zero about half the time at 2 seeds and a sixth of the time at 5, against 5% meant). The
t interval has its stated coverage for normally distributed per-seed values at any n >= 2; fewer than MIN_SEEDS
seeds give no verdict at all (`rpgrl.reproduce.report.status`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

LEVEL = 0.95
MIN_SEEDS = 3
"""paired seeds below which a comparison is left unresolved whatever its interval (two equal differences give a
zero-width interval)"""


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its two-sided t interval; `n` = number of values (one value: NaN bounds)."""

    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def _mass(t: float, df: int, steps: int = 2000, upper: bool = False) -> float:
    """P(0 < T < t) (or, `upper`, P(T > t)) for t >= 0 under Student's t with `df` degrees of freedom, integrated by
    Simpson's rule in theta, t = sqrt(df) tan(theta), where the density becomes c sqrt(df) cos(theta)^(df - 1):
    smooth on a bounded interval, so the heavy tail at df = 1 is as exact as the centre. The upper tail is
    integrated over its own interval (theta(t), pi/2), not taken as 1/2 minus the mass, which cancels."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(math.pi))  # c sqrt(df)
    a = math.atan(t / math.sqrt(df))
    lo, hi = (a, math.pi / 2) if upper else (0.0, a)
    h = (hi - lo) / steps
    f = [max(0.0, math.cos(lo + i * h)) ** (df - 1) for i in range(steps + 1)]
    return scale * h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """The p-quantile (0.5 < p < 1) of Student's t with `df` >= 1 degrees of freedom: the t with
    P(0 < T < t) = p - 1/2, solved by bisection over `_mass` (relative error < 1e-9 against scipy, t(0.9995) at
    df = 1 = 636.6 included)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile: need 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    lo, hi = 0.0, 1.0
    while _mass(hi, df) < p - 0.5:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _mass(mid, df) < p - 0.5 else (lo, mid)
    return (lo + hi) / 2


def t_sf(t: float, df: int) -> float:
    """P(T > t) under Student's t with `df` >= 1 degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    return _mass(t, df, upper=True) if t >= 0 else 0.5 + _mass(-t, df)


def p_side(diff: Interval, bound: float, side: int, level: float = LEVEL) -> float:
    """p-value of the paired t test that the mean lies above `bound` (`side` +1) or below it (-1), doubled so that
    it is below 1 - `level` exactly when `diff`'s two-sided interval lies wholly on that side: 2 P(T > side (mean -
    bound) / se), capped at 1, with the standard error read back from the interval (se = half-width / t quantile).
    NaN below two values; with no spread (`zero_spread`), the sign-flip test's 2^(1 - n) on that side, else 1."""
    if diff.n < 2 or math.isnan(diff.low):
        return math.nan
    excess = side * (diff.mean - bound)
    if zero_spread(diff):  # the exact sign-flip test: 1 of the 2^n sign patterns is as far out, doubled as above
        return min(1.0, 2.0 ** (1 - diff.n)) if excess > 0 else 1.0
    se = (diff.high - diff.low) / 2 / t_quantile((1 + level) / 2, diff.n - 1)
    return min(1.0, 2 * t_sf(excess / se, diff.n - 1))


def zero_spread(diff: Interval) -> bool:
    """Every value equal (up to float rounding: a width below 1e-9 of the bounds' size, or 1e-15): the t interval
    has zero width and the t test's p would be 0 however few the values. Equal paired differences happen with
    coarse metrics (a held-out accuracy in steps of 1/40) or arms that compute the same; with no spread to
    measure, `p_side` takes the sign-flip test, which assumes no distribution: n equal differences on one side
    give p = 2^(1 - n), below 5% from 6 seeds on."""
    width = diff.high - diff.low
    return diff.n >= 2 and width <= 1e-9 * max(abs(diff.low), abs(diff.high), 1e-6)


def p_value(diff: Interval, shift: float = 0.0, level: float = LEVEL) -> float:
    """Two-sided p-value of the paired t test that the mean lies beyond +-`shift` (0: the usual test of a zero
    mean): below 1 - `level` exactly when the interval lies wholly above `shift` or wholly below -`shift`."""
    return min(p_side(diff, shift, 1, level), p_side(diff, -shift, -1, level))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (NaN entries left out of the family and kept as NaN):
    the k-th smallest of m is multiplied by m - k + 1, and the products made non-decreasing and capped at 1. Each
    adjusted value below alpha rejects at family-wise error rate alpha."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    out = [math.nan] * len(pvalues)
    running = 0.0
    for k, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * p))
        out[i] = running
    return out


def mean_interval(values: list[float], level: float = LEVEL) -> Interval:
    """Mean of `values` with its two-sided `level` t interval, mean +- t(n-1) s / sqrt(n) (s: the sample standard
    deviation). One value gives NaN bounds (no spread to measure); none gives NaNs throughout."""
    n = len(values)
    if not n:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile((1 + level) / 2, n - 1) * s / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_difference(a: dict[int, float], b: dict[int, float], level: float = LEVEL) -> Interval:
    """Mean over the seeds both arms ran of a[seed] - b[seed], with its t interval."""
    seeds = sorted(set(a) & set(b))
    return mean_interval([a[s] - b[s] for s in seeds], level)
